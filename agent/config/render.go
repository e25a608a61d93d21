package config

import (
	"reflect"
	"regexp"
	"time"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// secretKey matches plugin config keys whose values String redacts. Plugin
// configs are opaque maps, so a heuristic is the best available; it errs on
// the side of hiding (key_file is hidden too).
var secretKey = regexp.MustCompile(`(?i)(token|secret|passw|key|credential|auth|cookie|private)`)

// String renders the effective configuration as HCL, with every token and
// every secret-looking plugin config value replaced by "<redacted>". It is
// safe to log. Loading the output gives back the same configuration, apart
// from the redacted values.
func (c *Config) String() string { return c.render(true) }

// GoString implements fmt.GoStringer so that %#v is redacted too.
func (c *Config) GoString() string { return c.String() }

// render writes the configuration as HCL with hclwrite, which also does
// HCL's quoting (its escapes differ from Go's, and "${" / "%{" start
// templates). With redact false the output round-trips exactly; that form
// is only for tests.
func (c *Config) render(redact bool) string {
	f := hclwrite.NewEmptyFile()
	renderBody(f.Body(), reflect.ValueOf(c).Elem(), redact)
	return string(f.Bytes())
}

// renderBody writes a struct's attributes, then its blocks, in field order.
func renderBody(body *hclwrite.Body, v reflect.Value, redact bool) {
	si := infoFor(v.Type())
	for _, fi := range si.fields {
		if fi.kind == kindAttr {
			body.SetAttributeValue(fi.name, attrValue(v.Field(fi.index), redact))
		}
	}
	for _, fi := range si.fields {
		field := v.Field(fi.index)
		switch fi.kind {
		case kindBlock:
			body.AppendNewline()
			renderBody(body.AppendNewBlock(fi.name, nil).Body(), field, redact)
		case kindBlockList, kindNamed:
			for i := 0; i < field.Len(); i++ {
				e := field.Index(i).Elem()
				label := e.Field(infoFor(e.Type()).label).String()
				body.AppendNewline()
				renderBody(body.AppendNewBlock(fi.name, []string{label}).Body(), e, redact)
			}
		}
	}
}

// attrValue converts one field to the value that decodes back to it.
func attrValue(field reflect.Value, redact bool) cty.Value {
	switch x := field.Interface().(type) {
	case time.Duration:
		return cty.StringVal(x.String())
	case Secret:
		if redact {
			return cty.StringVal(x.String())
		}
		return cty.StringVal(x.Reveal())
	case map[string]string:
		if len(x) == 0 {
			return cty.MapValEmpty(cty.String)
		}
		m := make(map[string]cty.Value, len(x))
		for k, val := range x {
			if redact && val != "" && secretKey.MatchString(k) {
				val = redacted
			}
			m[k] = cty.StringVal(val)
		}
		return cty.MapVal(m)
	}
	switch field.Kind() {
	case reflect.String:
		return cty.StringVal(field.String())
	case reflect.Bool:
		return cty.BoolVal(field.Bool())
	case reflect.Int:
		return cty.NumberIntVal(field.Int())
	case reflect.Slice:
		if field.Len() == 0 {
			return cty.ListValEmpty(cty.String)
		}
		vals := make([]cty.Value, field.Len())
		for i := range vals {
			vals[i] = cty.StringVal(field.Index(i).String())
		}
		return cty.ListVal(vals)
	}
	panic("config: cannot render a " + field.Type().String())
}

package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
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

// render writes the configuration as HCL. With redact false the output
// round-trips exactly; that form is only for tests. It is written by hand
// because hclwrite needs a module (go-cmp) that this module does not pin.
func (c *Config) render(redact bool) string {
	var b strings.Builder
	renderBody(&b, reflect.ValueOf(c).Elem(), "", redact)
	return b.String()
}

// renderBody writes a struct's attributes, then its blocks, in field order.
func renderBody(b *strings.Builder, v reflect.Value, indent string, redact bool) {
	si := infoFor(v.Type())
	width := 0
	for _, fi := range si.fields {
		if fi.kind == kindAttr && len(fi.name) > width {
			width = len(fi.name)
		}
	}
	for _, fi := range si.fields {
		if fi.kind == kindAttr {
			fmt.Fprintf(b, "%s%-*s = %s\n", indent, width, fi.name, attrText(v.Field(fi.index), redact))
		}
	}
	for _, fi := range si.fields {
		field := v.Field(fi.index)
		switch fi.kind {
		case kindBlock:
			fmt.Fprintf(b, "\n%s%s {\n", indent, fi.name)
			renderBody(b, field, indent+"  ", redact)
			fmt.Fprintf(b, "%s}\n", indent)
		case kindBlockList:
			for i := 0; i < field.Len(); i++ {
				e := field.Index(i).Elem()
				label := e.Field(infoFor(e.Type()).label).String()
				fmt.Fprintf(b, "\n%s%s %s {\n", indent, fi.name, quote(label))
				renderBody(b, e, indent+"  ", redact)
				fmt.Fprintf(b, "%s}\n", indent)
			}
		}
	}
}

// attrText renders one field as an HCL expression that decodes back to it.
func attrText(field reflect.Value, redact bool) string {
	switch x := field.Interface().(type) {
	case time.Duration:
		return quote(x.String())
	case Secret:
		if redact {
			return quote(x.String())
		}
		return quote(x.Reveal())
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			val := x[k]
			if redact && val != "" && secretKey.MatchString(k) {
				val = redacted
			}
			parts[i] = quote(k) + " = " + quote(val)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	switch field.Kind() {
	case reflect.String:
		return quote(field.String())
	case reflect.Bool:
		return strconv.FormatBool(field.Bool())
	case reflect.Int:
		return strconv.FormatInt(field.Int(), 10)
	case reflect.Slice:
		parts := make([]string, field.Len())
		for i := range parts {
			parts[i] = quote(field.Index(i).String())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic("config: cannot render a " + field.Type().String())
}

// quote writes s as an HCL quoted string. HCL's escapes differ from Go's
// (no \x, and "${" / "%{" start templates), so strconv.Quote will not do.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		case (r == '$' || r == '%') && strings.HasPrefix(s[i+1:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

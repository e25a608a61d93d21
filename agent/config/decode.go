package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// The decoder walks the Config struct by its hcl tags, like gohcl, with
// three differences that are the reason it exists:
//
//   - It decodes into the existing tree. An attribute a file leaves out keeps
//     the value of the layer below, so files override each other attribute by
//     attribute with no merge code (gohcl would do this for plain fields too,
//     but it reuses slice elements by index, which would merge plugin "a" of
//     one file into plugin "b" of another).
//   - Labeled blocks merge by label: `plugin "x"` in a later file overrides
//     attributes of `plugin "x"` from an earlier one.
//   - time.Duration attributes are parsed from strings with the attribute's
//     position in the error, and every value's position is recorded so that
//     semantic validation can point at it as well.
//   - One block type may come both without a label and with one: the
//     unnamed `volume_provisioner {}` and the named `volume_provisioner
//     "<class>" {}` (hcl:"name,block" and hcl:"name,labeled" on two fields).
//     An hcl.BodySchema fixes one label count per type, so those blocks are
//     taken out of the body before the schema is applied.

type fieldKind int

const (
	kindAttr      fieldKind = iota // hcl:"name"
	kindBlock                      // hcl:"name,block" on a struct value
	kindBlockList                  // hcl:"name,block" on a []*struct with a label
	kindLabel                      // hcl:"name,label"
	kindNamed                      // hcl:"name,labeled": the labeled form of a kindBlock's type
)

type fieldInfo struct {
	name  string
	index int
	kind  fieldKind
	typ   reflect.Type
}

type structInfo struct {
	fields    []fieldInfo
	byName    map[string]fieldInfo
	label     int    // struct field index of the label, or -1
	labelName string // the label's name in the schema, e.g. "name"
	schema    *hcl.BodySchema
	// named maps a block type that also comes with a label to the field
	// of its labeled form; byName holds its unlabeled form, and schema
	// does not hold the type (see optionalLabelBlocks).
	named map[string]fieldInfo
}

var structInfos sync.Map // reflect.Type -> *structInfo

var durationType = reflect.TypeOf(time.Duration(0))

// infoFor reads a struct type's hcl tags once.
func infoFor(t reflect.Type) *structInfo {
	if v, ok := structInfos.Load(t); ok {
		return v.(*structInfo)
	}
	si := &structInfo{byName: map[string]fieldInfo{}, label: -1, schema: &hcl.BodySchema{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("hcl")
		if !ok {
			continue
		}
		name, opt, _ := strings.Cut(tag, ",")
		fi := fieldInfo{name: name, index: i, typ: f.Type}
		switch {
		case opt == "label":
			fi.kind = kindLabel
			si.label = i
			si.labelName = name
		case opt == "block" && f.Type.Kind() == reflect.Slice:
			fi.kind = kindBlockList
			elem := infoFor(f.Type.Elem().Elem())
			si.schema.Blocks = append(si.schema.Blocks, hcl.BlockHeaderSchema{
				Type:       name,
				LabelNames: []string{elem.labelName},
			})
		case opt == "labeled":
			fi.kind = kindNamed
			if si.named == nil {
				si.named = map[string]fieldInfo{}
			}
			si.named[name] = fi
			si.fields = append(si.fields, fi)
			continue
		case opt == "block":
			fi.kind = kindBlock
			si.schema.Blocks = append(si.schema.Blocks, hcl.BlockHeaderSchema{Type: name})
		case opt == "":
			fi.kind = kindAttr
			si.schema.Attributes = append(si.schema.Attributes, hcl.AttributeSchema{Name: name})
		default:
			panic(fmt.Sprintf("config: unknown hcl tag option %q on %s.%s", opt, t, f.Name))
		}
		si.fields = append(si.fields, fi)
		si.byName[name] = fi
	}
	for name := range si.named {
		// The type is decoded from optionalLabelBlocks, not the schema.
		si.schema.Blocks = slices.DeleteFunc(si.schema.Blocks, func(b hcl.BlockHeaderSchema) bool { return b.Type == name })
	}
	structInfos.Store(t, si)
	return si
}

// optionalLabelBlocks takes the blocks of type typ out of body, with or
// without a label, and returns them with the rest of the body. In native
// syntax the labels are written; in JSON they are object keys, which the
// syntax cannot tell from attributes: a block object whose keys are all
// attributes of the unlabeled form (attrs) is unlabeled, and any other
// is a set of labeled blocks, one per key.
func optionalLabelBlocks(body hcl.Body, typ string, attrs []string) ([]*hcl.Block, hcl.Body, hcl.Diagnostics) {
	schema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: typ}}}
	if sb, ok := body.(*hclsyntax.Body); ok {
		var blocks []*hcl.Block
		for _, b := range sb.Blocks {
			if b.Type == typ {
				blocks = append(blocks, b.AsHCLBlock())
			}
		}
		// Only for the rest of the body, which hides typ: the label
		// counts are the caller's to check.
		_, rest, _ := sb.PartialContent(schema)
		return blocks, rest, nil
	}
	content, rest, diags := body.PartialContent(schema)
	var blocks []*hcl.Block
	for _, b := range content.Blocks {
		keys, _ := b.Body.JustAttributes()
		var labels []string
		for k := range keys {
			if !slices.Contains(attrs, k) {
				labels = slices.Sorted(maps.Keys(keys))
				break
			}
		}
		if labels == nil {
			blocks = append(blocks, b)
			continue
		}
		var headers []hcl.BlockHeaderSchema
		for _, l := range labels {
			headers = append(headers, hcl.BlockHeaderSchema{Type: l})
		}
		inner, d := b.Body.Content(&hcl.BodySchema{Blocks: headers})
		diags = append(diags, d...)
		for _, ib := range inner.Blocks {
			blocks = append(blocks, &hcl.Block{Type: typ, Labels: []string{ib.Type}, Body: ib.Body,
				DefRange: ib.DefRange, TypeRange: b.TypeRange, LabelRanges: []hcl.Range{ib.TypeRange}})
		}
	}
	return blocks, rest, diags
}

// decoder carries what one Load shares across files.
type decoder struct {
	ctx     *hcl.EvalContext
	origins map[string]origin
	// secrets are the source ranges of Secret-typed values, masked in
	// diagnostic snippets (see Error.WriteDiagnostics).
	secrets []hcl.Range
}

// secretType is the type of token fields, whose source is masked in snippets.
var secretType = reflect.TypeOf(Secret(""))

// join builds an attribute path: "" + "nomad" = "nomad", "nomad" + "address" =
// "nomad.address".
func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// decodeBody decodes body into the struct that ptr points at.
func (d *decoder) decodeBody(body hcl.Body, ptr any, path string) hcl.Diagnostics {
	v := reflect.ValueOf(ptr).Elem()
	si := infoFor(v.Type())
	either, body, diags := splitNamed(body, si)
	content, cd := body.Content(si.schema)
	diags = append(diags, cd...)
	diags = append(diags, d.decodeAttrs(content.Attributes, v, si, path)...)
	blocks := append(content.Blocks, either...)
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].DefRange.Start.Byte < blocks[j].DefRange.Start.Byte })
	return append(diags, d.decodeBlocks(blocks, v, si, path)...)
}

// splitNamed takes out of body the blocks of the types that come both with
// and without a label (volume_provisioner), which one schema cannot
// describe, and returns them with the rest of the body.
func splitNamed(body hcl.Body, si *structInfo) ([]*hcl.Block, hcl.Body, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	var either []*hcl.Block
	for _, name := range slices.Sorted(maps.Keys(si.named)) {
		var attrs []string
		for _, a := range infoFor(si.byName[name].typ).schema.Attributes {
			attrs = append(attrs, a.Name)
		}
		blocks, rest, bd := optionalLabelBlocks(body, name, attrs)
		diags = append(diags, bd...)
		either, body = append(either, blocks...), rest
	}
	return either, body, diags
}

// decodeAttrs decodes a body's attributes into the struct v. Map order is
// random; they are decoded in source order so that diagnostics from one
// file come out the same way every time.
func (d *decoder) decodeAttrs(attributes hcl.Attributes, v reflect.Value, si *structInfo, path string) hcl.Diagnostics {
	attrs := make([]*hcl.Attribute, 0, len(attributes))
	for _, a := range attributes {
		attrs = append(attrs, a)
	}
	sort.Slice(attrs, func(i, j int) bool { return attrs[i].Range.Start.Byte < attrs[j].Range.Start.Byte })
	var diags hcl.Diagnostics
	for _, a := range attrs {
		fi := si.byName[a.Name]
		diags = append(diags, d.decodeAttr(a, v.Field(fi.index), join(path, a.Name))...)
	}
	return diags
}

// decodeBlocks decodes a body's blocks, in source order, into the struct
// v: a plain block into its field, a labeled one into its list's element.
func (d *decoder) decodeBlocks(blocks []*hcl.Block, v reflect.Value, si *structInfo, path string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	seen := map[string]*hcl.Block{}
	for _, b := range blocks {
		fi, key, diag := blockKey(b, si)
		if diag == nil {
			// Within one file a block may appear once; across files,
			// repeats are how overrides work.
			if prev, dup := seen[key]; dup {
				diag = &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  fmt.Sprintf("Duplicate %s block", key),
					Detail: fmt.Sprintf("A %s block was already defined at %s. Put all of its settings in one block; later files, not later blocks, override earlier ones.",
						key, rangeString(prev.DefRange)),
					Subject: b.DefRange.Ptr(),
				}
			}
		}
		if diag != nil {
			diags = append(diags, diag)
			continue
		}
		seen[key] = b
		field := v.Field(fi.index)
		if fi.kind == kindBlock {
			d.origins[join(path, b.Type)] = origin{rng: b.DefRange.Ptr()}
			diags = append(diags, d.decodeBody(b.Body, field.Addr().Interface(), join(path, b.Type))...)
			continue
		}
		diags = append(diags, d.decodeLabeled(b, field, path)...)
	}
	return diags
}

// blockKey returns the field block b decodes into and the key that names
// it within a file (`hook "x"` for a labeled block), or the problem with
// its labels.
func blockKey(b *hcl.Block, si *structInfo) (fieldInfo, string, *hcl.Diagnostic) {
	fi := si.byName[b.Type]
	if _, ok := si.named[b.Type]; ok && len(b.Labels) > 0 {
		fi = si.named[b.Type]
		if len(b.Labels) > 1 {
			return fi, "", &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Extraneous label for %s", b.Type),
				Detail:   fmt.Sprintf("A %s block has at most one label, its name.", b.Type),
				Subject:  b.LabelRanges[1].Ptr(),
			}
		}
	}
	key := b.Type
	if fi.kind == kindBlockList || fi.kind == kindNamed {
		key = fmt.Sprintf("%s %q", b.Type, b.Labels[0])
	}
	return fi, key, nil
}

// decodeLabeled decodes one labeled block (plugin "x", hook "y") into the
// element with that label, creating it with its defaults when it is new.
func (d *decoder) decodeLabeled(b *hcl.Block, list reflect.Value, path string) hcl.Diagnostics {
	label := b.Labels[0]
	elemPath := join(path, b.Type+"."+label)
	rule, rng := "use letters, digits, '-', '_' and '.', starting with a letter or digit", b.LabelRanges[0]
	if b.Type == "volume_provisioner" {
		rule = classRule
	}
	if msg := nameProblem(b.Type, label); msg != "" {
		d.origins[elemPath] = origin{rng: rng.Ptr()}
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Invalid %s name", b.Type),
			Detail:   fmt.Sprintf("%q %s: %s.", label, msg, rule),
			Subject:  rng.Ptr(),
		}}
	}
	var elem reflect.Value
	for i := 0; i < list.Len(); i++ {
		e := list.Index(i)
		if e.Elem().Field(infoFor(e.Type().Elem()).label).String() == label {
			elem = e
			break
		}
	}
	if !elem.IsValid() {
		switch b.Type {
		case "plugin":
			elem = reflect.ValueOf(newPlugin(label))
		case "hook":
			elem = reflect.ValueOf(newHook(label))
		case "volume_provisioner":
			elem = reflect.ValueOf(newVolumeClass(label))
		default:
			panic("config: no constructor for labeled block " + b.Type)
		}
		list.Set(reflect.Append(list, elem))
	}
	// DeclRange points at the first declaration that the user wrote; a
	// built-in (zero range) takes the range of the block that overrides it.
	if dr := elem.Elem().FieldByName("DeclRange"); dr.IsValid() && dr.Interface().(hcl.Range).Filename == "" {
		dr.Set(reflect.ValueOf(b.DefRange))
	}
	d.origins[elemPath] = origin{rng: b.DefRange.Ptr()}
	return d.decodeBody(b.Body, elem.Interface(), elemPath)
}

// decodeAttr evaluates one attribute and stores it into field. On error the
// field keeps its previous value, so later validation does not pile follow-on
// errors onto a value the user already has to fix.
func (d *decoder) decodeAttr(a *hcl.Attribute, field reflect.Value, path string) hcl.Diagnostics {
	if field.Type() == secretType {
		d.secrets = append(d.secrets, a.Expr.Range())
	}
	val, diags := a.Expr.Value(d.ctx)
	if diags.HasErrors() {
		return diags
	}
	// null means "not set here", so `token = env("X", null)` falls back to
	// the layer below when X is unset.
	if val.IsNull() {
		return diags
	}
	rng := a.Expr.Range()
	if !val.IsWhollyKnown() {
		// Without variables nothing is unknown today; guard anyway, since
		// gocty panics on unknown values.
		return append(diags, attrError(a, rng, "Unknown value", "the value must be known when the configuration is loaded"))
	}

	if field.Type() == durationType {
		dur, err := decodeDuration(val)
		if err != nil {
			return append(diags, attrError(a, rng, "Invalid duration", err.Error()))
		}
		field.SetInt(int64(dur))
		d.origins[path] = origin{rng: &rng}
		return diags
	}

	ty, err := gocty.ImpliedType(field.Addr().Interface())
	if err != nil {
		panic(fmt.Sprintf("config: field %s has no cty type: %v", path, err))
	}
	conv, err := convert.Convert(val, ty)
	if err != nil {
		return append(diags, attrError(a, rng, "Incorrect attribute value type", describeConvError(err)))
	}
	// Decode into a fresh value and assign only on success; a map or slice
	// is therefore replaced, never shared with the layer below.
	tmp := reflect.New(field.Type())
	if err := gocty.FromCtyValue(conv, tmp.Interface()); err != nil {
		return append(diags, attrError(a, rng, "Incorrect attribute value type", describeConvError(err)))
	}
	field.Set(tmp.Elem())
	d.origins[path] = origin{rng: &rng}
	return diags
}

// attrError builds a diagnostic about attribute a's value.
func attrError(a *hcl.Attribute, rng hcl.Range, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf("Inappropriate value for attribute %q: %s.", a.Name, detail),
		Subject:  rng.Ptr(),
		Context:  a.Range.Ptr(),
	}
}

// decodeDuration accepts a Go duration string ("30s", "1m30s"). A bare
// number is refused: "30" could mean seconds or nanoseconds, and guessing
// wrong by a factor of a billion is not a kind failure mode.
func decodeDuration(val cty.Value) (time.Duration, error) {
	if val.Type() == cty.Number {
		return 0, fmt.Errorf("a duration string with a unit is required, like \"30s\" or \"5m\", not the bare number %s", val.AsBigFloat().Text('g', -1))
	}
	s, err := convert.Convert(val, cty.String)
	if err != nil {
		return 0, fmt.Errorf("a duration string is required, like \"30s\" or \"5m\"")
	}
	dur, err := time.ParseDuration(s.AsString())
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; use a number and a unit, like \"30s\", \"5m\" or \"1h30m\"", s.AsString())
	}
	return dur, nil
}

// describeConvError words a cty conversion error for a user. cty already
// names the element at fault inside a list or map ("element 1: string
// required"), so the message is used as it is.
func describeConvError(err error) string {
	return err.Error()
}

// validName is the shape of plugin and hook names and plugin drivers. A
// driver becomes a file name in plugin_dir, so no separators and no dot-dot
// may get through.
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// classRule is the shape of a storage class name: the value of a set's
// statefulset_claim_<claim>_class, which the job parser checks by the same
// rule (jobs.classNameRule).
const classRule = "a class name is a letter, then letters, digits, '-' and '_', at most 63 in all; plugin and config are volume_provisioner's own attributes"

// validClass reports whether s can name a storage class.
func validClass(s string) bool {
	if s == "" || len(s) > 63 || s == "plugin" || s == "config" {
		return false
	}
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if i == 0 && !letter {
			return false
		}
		if !letter && !(r >= '0' && r <= '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// nameProblem says why label cannot name a block of type typ, or "".
func nameProblem(typ, label string) string {
	if typ == "volume_provisioner" {
		if !validClass(label) {
			return "cannot name a storage class"
		}
		return ""
	}
	if !validName(label) {
		return "is not a valid " + typ + " name"
	}
	return ""
}

// rangeString renders a range as file:line:col, the form every error uses.
func rangeString(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

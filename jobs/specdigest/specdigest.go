// Package specdigest holds the digest of a child job's spec: one checksum
// per field of its normal form. jobs/ computes it from Nomad's job; the
// agent compares digests without knowing Nomad's types, which is why the
// type lives apart from jobs/.
package specdigest

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unique"
)

// Digest is a child job's spec reduced to one checksum per field, in the
// normal form of jobs.RevisionData: Nomad's defaults filled in and what the
// server adds on its own (implicit constraints, the default workload
// identity) left out, so that a child as rendered and the same child read
// back from Nomad give equal digests. Comparing the digest of the child
// Nomad has with that of its revision rendered for its ordinal finds any
// hand edit (`nomad job run` of a changed child, `nomad job revert`), and
// names the fields it changed. The zero Digest is unknown: it matches
// everything, so a child whose spec could not be read is never replaced
// for it.
//
// A Digest is a handle (package unique) to its fields: the daemon keeps
// three digests of every child (as Nomad holds it, as the daemon
// registered it, as this release renders it), which are nearly always
// equal, so they share one copy, and equal digests are one pointer
// comparison apart. The paths of the fields, the same for every child of a
// template, are a handle of their own, so a child's digest costs the
// daemon its sums, 8 bytes a field. Handles no digest uses any more are
// collected.
type Digest struct {
	h unique.Handle[fields]
}

// fields is a known digest's content, in path order: paths is every
// field's path, each as its length (uvarint) and its bytes; sums is each
// field's checksum, 8 bytes little-endian, in the same order.
type fields struct {
	paths unique.Handle[string]
	sums  string
}

// Field is the checksum of one field of the normal form, named by its path
// ("Group.Tasks[app].Env").
type Field struct {
	Path string
	Sum  uint64
}

// New returns the known digest of fs, in any order; New(nil) is known and
// has no fields. It sorts fs (by path, then checksum) and keeps none of it.
func New(fs []Field) Digest {
	slices.SortFunc(fs, func(a, b Field) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return cmp.Compare(a.Sum, b.Sum)
	})
	n := 0
	for _, f := range fs {
		n += binary.MaxVarintLen64 + len(f.Path)
	}
	paths := make([]byte, 0, n)
	sums := make([]byte, 0, 8*len(fs))
	for _, f := range fs {
		paths = binary.AppendUvarint(paths, uint64(len(f.Path)))
		paths = append(paths, f.Path...)
		sums = binary.LittleEndian.AppendUint64(sums, f.Sum)
	}
	return digestOf(paths, sums)
}

// digestOf returns the digest of paths and sums, in the encoding of fields
// and in path order.
func digestOf(paths, sums []byte) Digest {
	return Digest{h: unique.Make(fields{paths: unique.Make(string(paths)), sums: string(sums)})}
}

// Known reports whether the digest was computed.
func (d Digest) Known() bool { return d.h != unique.Handle[fields]{} }

// Equal reports whether d and other are known and equal: the same fields
// with the same checksums.
func (d Digest) Equal(other Digest) bool {
	return d.Known() && d.h == other.h
}

// Len is the number of fields of a known digest (0 when unknown).
func (d Digest) Len() int {
	if !d.Known() {
		return 0
	}
	return len(d.h.Value().sums) / 8
}

// each calls fn with every field of a known digest, in path order; the
// paths are substrings of the digest's own.
func (d Digest) each(fn func(path string, sum uint64)) {
	if !d.Known() {
		return
	}
	v := d.h.Value()
	eachField(v.paths.Value(), v.sums, fn)
}

// eachField calls fn with every field of paths and sums as fields encodes
// them, which New and Decode wrote: every length is in bounds.
func eachField(paths, sums string, fn func(path string, sum uint64)) {
	for len(sums) >= 8 {
		var n uint64
		k := 0
		for shift := 0; ; shift += 7 {
			c := paths[k]
			k++
			n |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
		}
		var sum uint64
		for i := 7; i >= 0; i-- {
			sum = sum<<8 | uint64(sums[i])
		}
		fn(paths[k:k+int(n)], sum)
		paths, sums = paths[k+int(n):], sums[8:]
	}
}

// list returns the fields of a known digest, in path order.
func (d Digest) list() []Field {
	out := []Field{}
	d.each(func(path string, sum uint64) { out = append(out, Field{Path: path, Sum: sum}) })
	return out
}

// Changed returns the fields whose values differ between d and other,
// sorted ("Group.Tasks[app].Env", "Meta", …); nil when either is unknown
// or they are equal.
func (d Digest) Changed(other Digest) []string {
	if !d.Known() || !other.Known() || d.h == other.h {
		return nil
	}
	a, b := d.list(), other.list()
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Path < b[j].Path):
			out = append(out, a[i].Path)
			i++
		case i == len(a) || b[j].Path < a[i].Path:
			out = append(out, b[j].Path)
			j++
		default:
			if a[i].Sum != b[j].Sum {
				out = append(out, a[i].Path)
			}
			i++
			j++
		}
	}
	return out
}

// encodingV1 prefixes the first encoding of a digest (Encode). A later
// encoding gets another prefix; Decode refuses what it does not know, which
// leaves the digest unknown: never a reason to replace a pod.
const encodingV1 = "1."

// Encode writes the digest as text that fits a Nomad meta value: the
// version prefix, then, base64url without padding, each field as its path's
// length (uvarint), its path and its checksum (8 bytes, little-endian), in
// path order. It is how a child records what the daemon registered for it.
// An unknown digest encodes as "".
func (d Digest) Encode() string {
	if !d.Known() {
		return ""
	}
	v := d.h.Value()
	b := make([]byte, 0, len(v.paths.Value())+len(v.sums))
	d.each(func(path string, sum uint64) {
		b = binary.AppendUvarint(b, uint64(len(path)))
		b = append(b, path...)
		b = binary.LittleEndian.AppendUint64(b, sum)
	})
	return encodingV1 + base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a digest that Encode wrote. Any other text is an error.
func Decode(s string) (Digest, error) {
	rest, ok := strings.CutPrefix(s, encodingV1)
	if !ok {
		return Digest{}, fmt.Errorf("spec digest %.12q…: not an encoding this release knows", s)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Digest{}, fmt.Errorf("spec digest: %w", err)
	}
	// Encode writes the fields in path order; text in another order (or
	// with a path twice) is sorted as New sorts it, so that equal fields
	// give equal digests whatever their order.
	var paths, sums []byte
	sorted := true
	var prev []byte
	var prevSum uint64
	for n := 0; len(b) > 0; n++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) || uint64(len(b)-k)-l < 8 {
			return Digest{}, fmt.Errorf("spec digest: field %d is cut short", n)
		}
		path, sum := b[k:k+int(l)], binary.LittleEndian.Uint64(b[k+int(l):])
		if c := bytes.Compare(path, prev); n > 0 && (c < 0 || c == 0 && sum < prevSum) {
			sorted = false
		}
		prev, prevSum = path, sum
		paths = binary.AppendUvarint(paths, l)
		paths = append(paths, path...)
		sums = binary.LittleEndian.AppendUint64(sums, sum)
		b = b[k+int(l)+8:]
	}
	if !sorted {
		var fs []Field
		eachField(string(paths), string(sums), func(path string, sum uint64) { fs = append(fs, Field{Path: path, Sum: sum}) })
		return New(fs), nil
	}
	return digestOf(paths, sums), nil
}

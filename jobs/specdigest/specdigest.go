// Package specdigest holds the digest of a child job's spec: one checksum
// per field of its normal form. jobs/ computes it from Nomad's job; the
// agent compares digests without knowing Nomad's types, which is why the
// type lives apart from jobs/.
package specdigest

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// Digest is a child job's spec reduced to one checksum per field, in the
// normal form of jobs.RevisionData: Nomad's defaults filled in and what the
// server adds on its own (implicit constraints, the default workload
// identity) left out, so that a child as rendered and the same child read
// back from Nomad give equal digests. Comparing the digest of the child
// Nomad has with that of its revision rendered for its ordinal finds any
// hand edit (`nomad job run` of a changed child, `nomad job revert`), and
// names the fields it changed, while the cache keeps a few hundred bytes
// per child rather than the job. The zero Digest is unknown: it matches
// everything, so a child whose spec could not be read is never replaced for
// it.
type Digest struct {
	fields []Field
	// all sums every field's path and checksum: equal digests have equal
	// sums, so a steady comparison is one test.
	all uint64
}

// Field is the checksum of one field of the normal form, named by its path
// ("Group.Tasks[app].Env").
type Field struct {
	Path string
	Sum  uint64
}

// New returns the known digest of fields, in any order; New(nil) is known
// and has no fields. It keeps fields.
func New(fields []Field) Digest {
	if fields == nil {
		fields = []Field{}
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].Path < fields[j].Path })
	h := fnv.New64a()
	for _, f := range fields {
		h.Write([]byte(f.Path))
		var b [8]byte
		for i := range b {
			b[i] = byte(f.Sum >> (8 * i))
		}
		h.Write(b[:])
	}
	return Digest{fields: fields, all: h.Sum64()}
}

// Known reports whether the digest was computed.
func (d Digest) Known() bool { return d.fields != nil }

// Equal reports whether d and other are known and equal.
func (d Digest) Equal(other Digest) bool {
	if !d.Known() || !other.Known() || d.all != other.all || len(d.fields) != len(other.fields) {
		return false
	}
	for i := range d.fields {
		if d.fields[i] != other.fields[i] {
			return false
		}
	}
	return true
}

// Changed returns the fields whose values differ between d and other,
// sorted ("Group.Tasks[app].Env", "Meta", …); nil when either is unknown
// or they are equal.
func (d Digest) Changed(other Digest) []string {
	if !d.Known() || !other.Known() {
		return nil
	}
	var out []string
	i, j := 0, 0
	for i < len(d.fields) || j < len(other.fields) {
		switch {
		case j == len(other.fields) || (i < len(d.fields) && d.fields[i].Path < other.fields[j].Path):
			out = append(out, d.fields[i].Path)
			i++
		case i == len(d.fields) || other.fields[j].Path < d.fields[i].Path:
			out = append(out, other.fields[j].Path)
			j++
		default:
			if d.fields[i].Sum != other.fields[j].Sum {
				out = append(out, d.fields[i].Path)
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
	var b []byte
	for _, f := range d.fields {
		b = binary.AppendUvarint(b, uint64(len(f.Path)))
		b = append(b, f.Path...)
		b = binary.LittleEndian.AppendUint64(b, f.Sum)
	}
	return encodingV1 + base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a digest that Encode wrote. intern, when not nil, returns the
// string to keep for a path (the same path of many children then shares one
// string). Any other text is an error.
func Decode(s string, intern func(string) string) (Digest, error) {
	rest, ok := strings.CutPrefix(s, encodingV1)
	if !ok {
		return Digest{}, fmt.Errorf("spec digest %.12q…: not an encoding this release knows", s)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Digest{}, fmt.Errorf("spec digest: %w", err)
	}
	fields := []Field{}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) || uint64(len(b)-k)-n < 8 {
			return Digest{}, fmt.Errorf("spec digest: field %d is cut short", len(fields))
		}
		f := Field{Path: string(b[k : k+int(n)]), Sum: binary.LittleEndian.Uint64(b[k+int(n):])}
		if intern != nil {
			f.Path = intern(f.Path)
		}
		fields = append(fields, f)
		b = b[k+int(n)+8:]
	}
	return New(fields), nil
}

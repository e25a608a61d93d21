package specdigest

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, d := range []Digest{
		New(nil),
		New([]Field{{Path: "Group.Tasks[app].Env", Sum: 1}, {Path: "Datacenters", Sum: 1<<64 - 1}}),
		New([]Field{{Path: "Group.Tasks[a,b:c].Config", Sum: 42}}),
	} {
		s := d.Encode()
		if !strings.HasPrefix(s, encodingV1) {
			t.Fatalf("encoding %q has no version prefix", s)
		}
		got, err := Decode(s)
		if err != nil {
			t.Fatalf("Decode(%q): %v", s, err)
		}
		if !got.Equal(d) {
			t.Fatalf("round trip of %+v gave %+v", d, got)
		}
	}
	if s := (Digest{}).Encode(); s != "" {
		t.Fatalf("an unknown digest encodes as %q", s)
	}
}

// TestDecodeRefuses: text Encode did not write is an error, never a digest
// (a wrong one would replace a pod).
func TestDecodeRefuses(t *testing.T) {
	good := New([]Field{{Path: "Meta", Sum: 7}}).Encode()
	for name, s := range map[string]string{
		"empty":          "",
		"other version":  "2." + good[2:],
		"not base64":     "1.!!",
		"cut short":      good[:len(good)-3],
		"length too big": "1." + "_w",
	} {
		if d, err := Decode(s); err == nil {
			t.Errorf("%s: Decode(%q) = %+v, want an error", name, s, d)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(New([]Field{{Path: "Group.Tasks[app].Env", Sum: 3}}).Encode())
	f.Add("1.")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Decode(s)
		if err != nil {
			return
		}
		again, err := Decode(d.Encode())
		if err != nil || !again.Equal(d) {
			t.Fatalf("Decode(Encode(Decode(%q))) = %+v, %v; want %+v", s, again, err, d)
		}
	})
}

// TestEqualAndChanged: digests of the same fields are equal however they
// were built (New in any order, Decode), and Changed names each path whose
// checksum differs or that only one of them has.
func TestEqualAndChanged(t *testing.T) {
	a := New([]Field{{Path: "Meta", Sum: 1}, {Path: "Group.Tasks[app].Env", Sum: 2}, {Path: "Datacenters", Sum: 3}})
	b := New([]Field{{Path: "Datacenters", Sum: 3}, {Path: "Meta", Sum: 1}, {Path: "Group.Tasks[app].Env", Sum: 2}})
	if !a.Equal(b) || a.Changed(b) != nil {
		t.Fatalf("the same fields in another order: Equal %v, Changed %q", a.Equal(b), a.Changed(b))
	}
	decoded, err := Decode(a.Encode())
	if err != nil || !decoded.Equal(a) {
		t.Fatalf("Decode(Encode()) = %+v, %v", decoded, err)
	}
	if a.Len() != 3 || New(nil).Len() != 0 || (Digest{}).Len() != 0 {
		t.Fatalf("Len: %d, %d, %d", a.Len(), New(nil).Len(), Digest{}.Len())
	}
	c := New([]Field{{Path: "Meta", Sum: 9}, {Path: "Group.Tasks[app].Env", Sum: 2}, {Path: "Update", Sum: 4}})
	if a.Equal(c) {
		t.Fatal("different digests are equal")
	}
	if got, want := strings.Join(a.Changed(c), " "), "Datacenters Meta Update"; got != want {
		t.Fatalf("Changed = %q, want %q", got, want)
	}
	if got, want := strings.Join(c.Changed(a), " "), "Datacenters Meta Update"; got != want {
		t.Fatalf("Changed the other way = %q, want %q", got, want)
	}
	var unknown Digest
	if unknown.Known() || unknown.Equal(unknown) || unknown.Equal(a) || a.Equal(unknown) || unknown.Changed(a) != nil || a.Changed(unknown) != nil {
		t.Fatal("an unknown digest must equal nothing and change nothing")
	}
	if !New(nil).Known() || !New(nil).Equal(New([]Field{})) {
		t.Fatal("New(nil) must be known and equal to any digest of no fields")
	}
}

// TestDecodeSortsFields: text with its fields out of order (which Encode
// never writes) decodes to the digest of the same fields.
func TestDecodeSortsFields(t *testing.T) {
	var b []byte
	for _, f := range []Field{{Path: "Meta", Sum: 1}, {Path: "Datacenters", Sum: 2}} {
		b = binary.AppendUvarint(b, uint64(len(f.Path)))
		b = append(b, f.Path...)
		b = binary.LittleEndian.AppendUint64(b, f.Sum)
	}
	d, err := Decode(encodingV1 + base64.RawURLEncoding.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	if want := New([]Field{{Path: "Datacenters", Sum: 2}, {Path: "Meta", Sum: 1}}); !d.Equal(want) {
		t.Fatalf("decoded %+v, want %+v", d.list(), want.list())
	}
}

// TestLongPath: a path longer than a one-byte length reads back whole.
func TestLongPath(t *testing.T) {
	long := "Group.Tasks[" + strings.Repeat("t", 300) + "].Env"
	d := New([]Field{{Path: long, Sum: 5}, {Path: "Meta", Sum: 6}})
	got := d.list()
	if len(got) != 2 || got[0] != (Field{Path: long, Sum: 5}) || got[1] != (Field{Path: "Meta", Sum: 6}) {
		t.Fatalf("fields %+v", got)
	}
}

// TestPathsShared: digests of the same paths (every child of a template)
// share one copy of them, and one of equal fields is the same handle.
func TestPathsShared(t *testing.T) {
	a := New([]Field{{Path: "Meta", Sum: 1}, {Path: "Group.Tasks[app].Env", Sum: 2}})
	b := New([]Field{{Path: "Meta", Sum: 3}, {Path: "Group.Tasks[app].Env", Sum: 2}})
	if a.h.Value().paths != b.h.Value().paths {
		t.Fatal("two digests of the same paths keep two copies of them")
	}
	if again := New([]Field{{Path: "Meta", Sum: 1}, {Path: "Group.Tasks[app].Env", Sum: 2}}); again.h != a.h {
		t.Fatal("two digests of the same fields are two handles")
	}
}

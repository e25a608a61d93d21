package specdigest

import (
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
		got, err := Decode(s, nil)
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
		if d, err := Decode(s, nil); err == nil {
			t.Errorf("%s: Decode(%q) = %+v, want an error", name, s, d)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(New([]Field{{Path: "Group.Tasks[app].Env", Sum: 3}}).Encode())
	f.Add("1.")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Decode(s, nil)
		if err != nil {
			return
		}
		again, err := Decode(d.Encode(), nil)
		if err != nil || !again.Equal(d) {
			t.Fatalf("Decode(Encode(Decode(%q))) = %+v, %v; want %+v", s, again, err, d)
		}
	})
}

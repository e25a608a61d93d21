package bytesize

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestParse holds Parse to the sizes Nomad's `volume create` reads
// (go-humanize's ParseBytes): binary with an "i", decimal without, any
// case, spaces before the unit, commas between digits.
func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  error
	}{
		{"0", 0, nil},
		{"1048576", 1 << 20, nil},
		{"10GiB", 10 << 30, nil},
		{"10Gi", 10 << 30, nil},
		{"10gib", 10 << 30, nil},
		{"500MiB", 500 << 20, nil},
		{"1TiB", 1 << 40, nil},
		{"10GB", 10e9, nil},
		{"10G", 10e9, nil},
		{"10 GB", 10e9, nil},
		{"100MB", 100e6, nil},
		{"1.5GiB", 3 << 29, nil},
		{"1.1GB", 1_100_000_000, nil},
		{"0.5KiB", 512, nil},
		{".5KiB", 512, nil},
		{"1.KiB", 1024, nil},
		{"1,000KB", 1e6, nil},
		{"7B", 7, nil},
		{"1.9B", 1, nil},
		{"8EiB", 0, ErrRange},
		{"7EiB", 7 << 60, nil},
		{"9223372036854775807", math.MaxInt64, nil},
		{"9223372036854775808", 0, ErrRange},
		{"", 0, ErrSyntax},
		{"GiB", 0, ErrSyntax},
		{"-1GiB", 0, ErrSyntax},
		{"+1GiB", 0, ErrSyntax},
		{" 1GiB", 0, ErrSyntax},
		{"1e3", 0, ErrSyntax},
		{"0x10", 0, ErrSyntax},
		{"1.2.3GB", 0, ErrSyntax},
		{"10 GiBs", 0, ErrSyntax},
		{"10XB", 0, ErrSyntax},
		{"ten", 0, ErrSyntax},
		{"1/2", 0, ErrSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
					t.Fatalf("Parse(%q) = %d, %v; want an error naming the value and wrapping %v", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	cases := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{10 << 20, "10MiB"},
		{20 << 30, "20GiB"},
		{1 << 40, "1TiB"},
		{10e9, "10GB"},
		{1500, "1500B"},
		{2000, "2KB"},
		{1536, "1536B"},
	}
	for _, tc := range cases {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParse: Parse never panics, never returns a negative size, agrees
// with strconv on plain digits, and reads Format's output back exactly.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10GiB", "1.5GB", "1,000KB", "8EiB", "0", "", ".5k", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("Parse(%q): %v wraps neither ErrSyntax nor ErrRange", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		if isDigits(s) {
			if want, err := strconv.ParseInt(s, 10, 64); err != nil || want != n {
				t.Fatalf("Parse(%q) = %d, strconv says %d, %v", s, n, want, err)
			}
		}
		back, err := Parse(Format(n))
		if err != nil || back != n {
			t.Fatalf("Parse(Format(%d)) = Parse(%q) = %d, %v", n, Format(n), back, err)
		}
	})
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

package jobs

import "testing"

// TestSuggestCapacity holds the "did you mean" of a claim's capacity to
// sizes the user plausibly meant: the unit nearest to the one written, at
// the magnitude written, and no suggestion when the magnitude cannot be
// known ("10XB" is not "10B") or two units are equally near.
func TestSuggestCapacity(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"10GiBs", ` (did you mean "10GiB"?)`},
		{"10GIBs", ` (did you mean "10GiB"?)`},
		{"20Gbi", ` (did you mean "20GiB"?)`},
		{"10gig", ` (did you mean "10GiB"?)`},
		{"10GBs", ` (did you mean "10GB"?)`},
		{"500MBi", ` (did you mean "500MiB"?)`},
		{"1Tbi", ` (did you mean "1TiB"?)`},
		{"7Bytes", ""},
		{"7BB", ` (did you mean "7B"?)`},
		{"10GiB-20GiB", ` (did you mean "10GiB..20GiB"?)`},
		{"10GiB to 20GiB", ` (did you mean "10GiB..20GiB"?)`},
		{"10GiB...20GiB", ` (did you mean "10GiB..20GiB"?)`},
		{"10GiB..20Gbi", ` (did you mean "10GiB..20GiB"?)`},
		// The magnitude is unknown: no guess, and never bytes.
		{"10XB", ""},
		{"10XiB", ""},
		{"10Q", ""},
		{"10XB..20GiB", ""},
		{"ten gigs", ""},
		{"10", ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := suggestCapacity(tc.in); got != tc.want {
				t.Errorf("suggestCapacity(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Package bytesize reads and writes sizes the way Nomad reads a dynamic
// host volume's capacity_min and capacity_max.
//
// Nomad's `volume create` parses those with go-humanize's ParseBytes
// (command/volume_register_csi.go, parseCapacityBytes): a number, then an
// optional unit, case-insensitive. Units with an "i" are binary and those
// without are decimal, single letters included: "10GiB" and "10Gi" are
// 10×2³⁰ bytes, "10GB" and "10G" are 10×10⁹. A size written for Nomad
// therefore means the same number of bytes here. Two differences, both
// refusals of what go-humanize would turn into a wrong number: a size that
// does not fit in an int64 (Nomad's field) is an error rather than
// wrapping, and the arithmetic is exact (1.1GB is 1100000000 bytes, where a
// float64 could round it).
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// units maps a lower-cased unit to its multiplier: go-humanize's
// bytesSizeTable.
var units = map[string]int64{
	"": 1, "b": 1,
	"kib": 1 << 10, "kb": 1e3, "ki": 1 << 10, "k": 1e3,
	"mib": 1 << 20, "mb": 1e6, "mi": 1 << 20, "m": 1e6,
	"gib": 1 << 30, "gb": 1e9, "gi": 1 << 30, "g": 1e9,
	"tib": 1 << 40, "tb": 1e12, "ti": 1 << 40, "t": 1e12,
	"pib": 1 << 50, "pb": 1e15, "pi": 1 << 50, "p": 1e15,
	"eib": 1 << 60, "eb": 1e18, "ei": 1 << 60, "e": 1e18,
}

// Rule is the sentence a caller appends to a refused value, so that every
// size in the project is explained the same way.
const Rule = "is not a size: a number of bytes, or a number with a unit such as 500MiB, 10GiB, 1TiB (binary) or 10GB (decimal)"

// ErrSyntax and ErrRange are the reasons Parse gives.
var (
	// ErrSyntax: the text is not a number and a known unit.
	ErrSyntax = errors.New("not a size")
	// ErrRange: the size does not fit in an int64 number of bytes.
	ErrRange = errors.New("size too large")
)

// Parse reads a size in bytes: digits with an optional fraction (commas
// between digits are ignored, as go-humanize does), then an optional unit,
// optionally after spaces. A fraction of a byte is dropped. There is no
// sign: a size is never negative.
func Parse(s string) (int64, error) {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || s[end] == ',') {
		end++
	}
	num := strings.ReplaceAll(s[:end], ",", "")
	mult, ok := units[strings.ToLower(strings.TrimSpace(s[end:]))]
	if !ok || !isDecimal(num) {
		return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // both positive: the floor
	if !n.IsInt64() {
		return 0, fmt.Errorf("%q: %w (at most %d bytes)", s, ErrRange, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}

// isDecimal reports whether s is digits with at most one '.', and at least
// one digit: big.Rat would also take "1e3", "0x10" and "1/2".
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// Format writes n in the largest unit, binary or decimal, that divides it
// (10GiB, 10GB), else in bytes (1023B). Parse reads the result back to n,
// so it can be shown to users and put in configs.
func Format(n int64) string {
	best, name := int64(1), "B"
	for _, u := range []struct {
		name string
		mult int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50}, {"EiB", 1 << 60},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}, {"EB", 1e18},
	} {
		if n > 0 && n%u.mult == 0 && u.mult > best {
			best, name = u.mult, u.name
		}
	}
	return fmt.Sprintf("%d%s", n/best, name)
}

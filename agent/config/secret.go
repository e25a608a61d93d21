package config

import (
	"fmt"
	"io"
	"log/slog"
)

// redacted is what a Secret prints as.
const redacted = "<redacted>"

// Secret is a string that never prints: an ACL token. Whatever a caller
// does with it — fmt with any verb, %#v, hclog, slog, encoding/json — it
// comes out as "<redacted>" (or "" when empty, so that "no token" stays
// visible in a dump). Only Reveal, or an explicit string(s), yields the
// value, which makes every place that uses the real token easy to find.
type Secret string

// Reveal returns the secret value. Call it only where the token is handed to
// an API client.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer, for %#v.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// Format implements fmt.Formatter. Without it, verbs that are not string
// verbs (%d, %x with flags, …) would print the underlying bytes.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' || (verb == 'v' && f.Flag('#')) {
		_, _ = io.WriteString(f, s.GoString())
		return
	}
	_, _ = io.WriteString(f, s.String())
}

// MarshalJSON implements json.Marshaler, so that a config dumped as JSON (an
// HTTP debug endpoint, a JSON log line) carries no token. A redacted config
// therefore does not round-trip through JSON; load it from HCL instead.
func (s Secret) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%q", s.String())), nil
}

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

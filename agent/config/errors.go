package config

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Error is the error Load and Validate return. It carries every problem
// found, so the operator fixes them in one pass rather than one per restart.
//
// Error() lists one problem per line as "file:line:col: summary; detail".
// errors.As(err, &diags) with a hcl.Diagnostics target yields the
// diagnostics, and WriteDiagnostics prints them with source snippets.
type Error struct {
	// Diagnostics are the problems, ordered by file and position.
	Diagnostics hcl.Diagnostics
	// files holds the parsed sources, for snippets.
	files map[string]*hcl.File
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	for i, d := range e.Diagnostics {
		if i > 0 {
			b.WriteByte('\n')
		}
		if d.Severity == hcl.DiagWarning {
			b.WriteString("warning: ")
		}
		if d.Subject != nil {
			b.WriteString(rangeString(*d.Subject))
			b.WriteString(": ")
		}
		b.WriteString(d.Summary)
		if d.Detail != "" {
			b.WriteString("; ")
			b.WriteString(d.Detail)
		}
	}
	return b.String()
}

// Unwrap returns the diagnostics, so errors.As finds a hcl.Diagnostics.
func (e *Error) Unwrap() error { return e.Diagnostics }

// WriteDiagnostics prints the problems the way HashiCorp tools do, with the
// offending source lines, wrapped at width columns (0: no wrapping). Token
// values in those lines are masked with '*', so the output is safe to log.
func (e *Error) WriteDiagnostics(w io.Writer, width uint, color bool) error {
	wr := hcl.NewDiagnosticTextWriter(w, e.files, width, color)
	if err := wr.WriteDiagnostics(e.Diagnostics); err != nil {
		return fmt.Errorf("writing config diagnostics: %w", err)
	}
	return nil
}

// tokenLiteral matches the quoted value of a token-like assignment; group 1
// is the text inside the quotes (up to the end of the line when unclosed).
var tokenLiteral = regexp.MustCompile(`(?i)token"?\s*[=:]\s*"([^"\n]*)`)

// maskSecrets returns copies of the files in which the source of every
// Secret-typed attribute value is overwritten with '*' (newlines kept, so
// positions stay right). Snippets print whole lines, so without this a type
// error on `token = [...]` would print the token.
func maskSecrets(files map[string]*hcl.File, secrets []hcl.Range) map[string]*hcl.File {
	out := make(map[string]*hcl.File, len(files))
	for name, f := range files {
		cp := *f
		cp.Bytes = append([]byte(nil), f.Bytes...)
		out[name] = &cp
	}
	// A file that did not parse was not decoded, so its Secret ranges are
	// unknown; mask anything that looks like a token assignment as well.
	for _, f := range out {
		for _, m := range tokenLiteral.FindAllSubmatchIndex(f.Bytes, -1) {
			for i := m[2]; i < m[3]; i++ {
				f.Bytes[i] = '*'
			}
		}
	}
	for _, r := range secrets {
		f, ok := out[r.Filename]
		if !ok {
			continue
		}
		for i := r.Start.Byte; i < r.End.Byte && i < len(f.Bytes); i++ {
			if f.Bytes[i] != '\n' && f.Bytes[i] != '\r' {
				f.Bytes[i] = '*'
			}
		}
	}
	return out
}

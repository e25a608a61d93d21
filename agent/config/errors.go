package config

import (
	"fmt"
	"io"
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
// offending source lines, wrapped at width columns (0: no wrapping).
func (e *Error) WriteDiagnostics(w io.Writer, width uint, color bool) error {
	wr := hcl.NewDiagnosticTextWriter(w, e.files, width, color)
	if err := wr.WriteDiagnostics(e.Diagnostics); err != nil {
		return fmt.Errorf("writing config diagnostics: %w", err)
	}
	return nil
}

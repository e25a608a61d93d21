package nomad

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hashicorp/nomad/api"
)

// ExecOutputLimit bounds ExecResult.Output. The output goes into events,
// which must stay small; a command's last words usually say why it failed.
const ExecOutputLimit = 4096

// execShell is the program every command of ExecAlloc runs under.
const execShell = "/bin/sh"

// ExecCommand returns the argv that ExecAlloc sends to Nomad to run command
// with env set:
//
//	["/bin/sh", "-c", "export NSS_ORDINAL='2' NSS_POD='web-2'; exec \"$@\"", "sh", command…]
//
// Nomad's exec API takes an argv and no environment, so a shell exports the
// variables and then execs the command in its place (the exit status is the
// command's own). A shell rather than `env NSS_X=… command…`, which would
// need no quoting at all: env is /usr/bin/env on most images but only
// /bin/env in some (the test agent's exec chroot), and absent from some
// minimal ones, whereas /bin/sh is what a set's commands need anyway (they
// are command lines, run by /bin/sh -c). Only the values are quoted into
// the script, by ShellQuote; the command's argv reaches exec "$@" as the
// shell's positional parameters, which no parsing touches, so a command is
// never quoted twice and any argv passes through as given.
//
// It fails on an empty command (the shell would exit 0 having run nothing),
// on a variable name that is not a shell identifier, and on a NUL byte,
// which no argv can carry.
func ExecCommand(command []string, env map[string]string) ([]string, error) {
	if len(command) == 0 {
		return nil, errors.New("no command to run")
	}
	for _, arg := range command {
		if strings.IndexByte(arg, 0) >= 0 {
			return nil, fmt.Errorf("command argument %q holds a NUL byte", arg)
		}
	}
	var script strings.Builder
	if len(env) > 0 {
		script.WriteString("export")
		for _, name := range slices.Sorted(maps.Keys(env)) {
			if !isShellName(name) {
				return nil, fmt.Errorf("environment variable name %q is not a shell identifier", name)
			}
			value := env[name]
			if strings.IndexByte(value, 0) >= 0 {
				return nil, fmt.Errorf("environment variable %s holds a NUL byte", name)
			}
			script.WriteString(" " + name + "=" + ShellQuote(value))
		}
		script.WriteString("; ")
	}
	script.WriteString(`exec "$@"`)
	// "sh" is $0, the name the shell gives itself in its error messages.
	return append([]string{execShell, "-c", script.String(), "sh"}, command...), nil
}

// ShellQuote returns s as one word of a POSIX shell, taken literally: in
// single quotes, inside which nothing is special but the single quote
// itself, which becomes
//
//	'\''
//
// (close the quotes, an escaped quote, open them again). s must not hold a
// NUL byte.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isShellName reports whether name is a POSIX shell variable name: a
// letter or underscore, then letters, digits and underscores, in ASCII.
func isShellName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
// ExecAlloc gives it to the api client as both stdout and stderr, which
// one goroutine writes, and reads it from another when its deadline
// passes: hence the lock.
type tailBuffer struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	dropped bool
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

// Write implements io.Writer. It never fails: output beyond the bound is
// dropped from the front.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.max {
		b.dropped = b.dropped || len(b.buf) > 0 || len(p) > b.max
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = b.buf[:copy(b.buf, b.buf[over:])]
		b.dropped = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// tail returns what the buffer holds and whether anything was dropped.
// When the cut fell inside a UTF-8 sequence, its remaining bytes are
// dropped too, so that the text does not start with garbage.
func (b *tailBuffer) tail() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.buf
	if b.dropped {
		for i := 0; i < utf8.UTFMax-1 && len(out) > 0 && !utf8.RuneStart(out[0]); i++ {
			out = out[1:]
		}
	}
	return string(out), b.dropped
}

// TailOutput returns the end of a command's output that ExecResult keeps,
// and whether it lost the start: the simulator bounds its output with it.
func TailOutput(output string) (string, bool) {
	b := newTailBuffer(ExecOutputLimit)
	_, _ = b.Write([]byte(output))
	return b.tail()
}

// checksByName reads Nomad's check results, which it keys by check ID, by
// check name. A name can repeat across the services of a group; it then
// passes only when every check of that name passes, so that no pod passes
// a check on the word of one of two services, and the output is that of a
// failing one.
func checksByName(statuses api.AllocCheckStatuses) map[string]CheckStatus {
	out := make(map[string]CheckStatus, len(statuses))
	for _, id := range slices.Sorted(maps.Keys(statuses)) {
		st := statuses[id]
		c := CheckStatus{Passing: st.Status == "success", Output: st.Output}
		if prev, seen := out[st.Check]; seen && (!prev.Passing || c.Passing) {
			continue
		}
		out[st.Check] = c
	}
	return out
}

package nomad

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// shellValues are strings a shell would mangle if they were not quoted.
var shellValues = map[string]string{
	"empty":         "",
	"plain":         "web-0",
	"spaces":        "  two  spaces  ",
	"single quotes": `it's 'quoted'`,
	"only a quote":  `'`,
	"double quotes": `say "hi"`,
	"expansions":    "$HOME ${PATH} $(true) `true` $1 $@ *",
	"escapes":       `back\slash \n \'`,
	"newlines":      "line one\nline two\n",
	"separators":    "a; b && c | d > /dev/null &",
	"unicode":       "ordinal ⑦ ünïcode",
	"quote escape":  `'\''`,
}

// TestShellQuoteIsLiteral: every value comes out of /bin/sh as it went in.
func TestShellQuoteIsLiteral(t *testing.T) {
	for name, value := range shellValues {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command("/bin/sh", "-c", "printf '%s' "+ShellQuote(value)).Output()
			if err != nil || string(out) != value {
				t.Fatalf("sh printed %q (%v) for %s; want %q", out, err, ShellQuote(value), value)
			}
		})
	}
}

// TestExecCommandSetsEnvAndKeepsArgv runs the argv ExecAlloc sends, here
// with the local /bin/sh: each variable holds its value exactly, the
// command's arguments arrive untouched, and the exit status is the
// command's.
func TestExecCommandSetsEnvAndKeepsArgv(t *testing.T) {
	env := map[string]string{"NSS_POD": "web-2"}
	i := 0
	for _, value := range shellValues {
		i++
		env["NSS_V"+strings.Repeat("X", i)] = value
	}
	for name, value := range shellValues {
		t.Run(name, func(t *testing.T) {
			env["NSS_TARGET_POD"] = value
			// The command prints the variable, then its own argument, which
			// it receives as $1: the value again, as an argv word.
			argv, err := ExecCommand([]string{"/bin/sh", "-c", `printf '%s|%s|%s' "$NSS_POD" "$NSS_TARGET_POD" "$1"; exit 3`, "cmd", value}, env)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = []string{} // nothing inherited: the script sets all
			out, err := cmd.Output()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 3 {
				t.Fatalf("exit %v; want status 3", err)
			}
			if want := "web-2|" + value + "|" + value; string(out) != want {
				t.Fatalf("printed %q; want %q (argv %q)", out, want, argv)
			}
		})
	}
}

func TestExecCommandRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		env     map[string]string
		want    string
	}{
		{"no command", nil, nil, "no command"},
		{"NUL in an argument", []string{"echo", "a\x00b"}, nil, "NUL"},
		{"NUL in a value", []string{"true"}, map[string]string{"NSS_POD": "a\x00b"}, "NUL"},
		{"empty name", []string{"true"}, map[string]string{"": "x"}, "not a shell identifier"},
		{"name with a dash", []string{"true"}, map[string]string{"NSS-POD": "x"}, "not a shell identifier"},
		{"name starting with a digit", []string{"true"}, map[string]string{"1NSS": "x"}, "not a shell identifier"},
		{"name with a space", []string{"true"}, map[string]string{"NSS POD": "x"}, "not a shell identifier"},
		{"name that injects", []string{"true"}, map[string]string{"A=1; rm -rf /; B": "x"}, "not a shell identifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := ExecCommand(tc.command, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, %v; want an error saying %q", argv, err, tc.want)
			}
		})
	}
}

func TestExecCommandShape(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no env", nil, []string{"/bin/sh", "-c", `exec "$@"`, "sh", "pg_ctl", "promote"}},
		{"sorted names", map[string]string{"NSS_SET": "db", "NSS_ORDINAL": "2", "_x9": "it's"},
			[]string{"/bin/sh", "-c", `export NSS_ORDINAL='2' NSS_SET='db' _x9='it'\''s'; exec "$@"`, "sh", "pg_ctl", "promote"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := ExecCommand([]string{"pg_ctl", "promote"}, tc.env)
			if err != nil || strings.Join(argv, "\x00") != strings.Join(tc.want, "\x00") {
				t.Fatalf("got %q, %v; want %q", argv, err, tc.want)
			}
		})
	}
}

// TestTailBufferKeepsTheEnd: writes of any size keep the last max bytes,
// and a cut inside a UTF-8 sequence drops the rest of that sequence.
func TestTailBufferKeepsTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		writes    []string
		want      string
		truncated bool
	}{
		{"nothing", nil, "", false},
		{"fits", []string{"abc", "de"}, "abcde", false},
		{"exactly full", []string{"abcdefgh"}, "abcdefgh", false},
		{"full in pieces", []string{"abcd", "efgh"}, "abcdefgh", false},
		{"one write too long", []string{"0123456789"}, "23456789", true},
		{"spills over", []string{"abcdef", "ghij"}, "cdefghij", true},
		{"a full write after others", []string{"xy", "abcdefgh"}, "abcdefgh", true},
		{"many small", []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}, "23456789", true},
		// Bytes: é is 2, € is 3.
		{"cut inside a rune", []string{"aé€€x"}, "€€x", true},
		{"cut inside a 3-byte rune", []string{"€€€"}, "€€", true},
		{"cut at a rune's start", []string{"€ab€€"}, "ab€€", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTailBuffer(8)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			got, truncated := b.tail()
			if got != tc.want || truncated != tc.truncated {
				t.Fatalf("tail %q (truncated %v); want %q (%v)", got, truncated, tc.want, tc.truncated)
			}
		})
	}
}

func TestTailOutput(t *testing.T) {
	long := strings.Repeat("x", ExecOutputLimit) + "end"
	if got, cut := TailOutput(long); !cut || len(got) != ExecOutputLimit || !strings.HasSuffix(got, "end") {
		t.Fatalf("TailOutput kept %d bytes (cut %v); want the last %d", len(got), cut, ExecOutputLimit)
	}
	if got, cut := TailOutput("short"); cut || got != "short" {
		t.Fatalf("TailOutput(short) = %q, %v", got, cut)
	}
}

// TestChecksByName: results keyed by check ID are read by name; a name
// that two services share passes only if both pass.
func TestChecksByName(t *testing.T) {
	st := func(name, status, output string) api.AllocCheckStatus {
		return api.AllocCheckStatus{Check: name, Status: status, Output: output}
	}
	for _, tc := range []struct {
		name     string
		statuses api.AllocCheckStatuses
		want     map[string]CheckStatus
	}{
		{"none", nil, map[string]CheckStatus{}},
		{"by name", api.AllocCheckStatuses{
			"id1": st("leader", "success", "HTTP 200"),
			"id2": st("alive", "failure", "connection refused"),
			"id3": st("ready", "pending", ""),
		}, map[string]CheckStatus{
			"leader": {Passing: true, Output: "HTTP 200"},
			"alive":  {Passing: false, Output: "connection refused"},
			"ready":  {Passing: false},
		}},
		{"shared name, one fails", api.AllocCheckStatuses{
			"a": st("leader", "success", "ok"),
			"b": st("leader", "failure", "HTTP 503"),
		}, map[string]CheckStatus{"leader": {Passing: false, Output: "HTTP 503"}}},
		{"shared name, one fails, other order", api.AllocCheckStatuses{
			"a": st("leader", "failure", "HTTP 503"),
			"b": st("leader", "success", "ok"),
		}, map[string]CheckStatus{"leader": {Passing: false, Output: "HTTP 503"}}},
		{"shared name, both pass", api.AllocCheckStatuses{
			"a": st("leader", "success", "ok a"),
			"b": st("leader", "success", "ok b"),
		}, map[string]CheckStatus{"leader": {Passing: true, Output: "ok a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checksByName(tc.statuses)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v; want %+v", got, tc.want)
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Fatalf("%s: got %+v; want %+v", name, got[name], want)
				}
			}
		})
	}
}

// TestDeniedExec: Nomad refuses an exec inside the websocket, so the
// refusal arrives as its bare text, and must still name alloc-exec.
func TestDeniedExec(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		perm bool
	}{
		{"close frame text", errors.New("Permission denied"), true},
		{"forwarded", errors.New("rpc error: Permission denied"), true},
		{"other refusal", errors.New(`task "main" is not running.`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := deniedExec("db", tc.err)
			var perm *PermissionError
			if got := errors.As(err, &perm); got != tc.perm || (got && (perm.Capability != "alloc-exec" || perm.Namespace != "db")) {
				t.Fatalf("deniedExec(%v) = %v; PermissionError for alloc-exec in db: %v", tc.err, err, tc.perm)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("deniedExec lost Nomad's error: %v", err)
			}
		})
	}
}

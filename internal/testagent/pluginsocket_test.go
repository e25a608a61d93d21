package testagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWithPluginSocketDir: the variable is set once, to the directory, which
// exists; a directory whose sockets would not fit a unix socket's path
// leaves the environment as it was, so that plugins keep their default.
func TestWithPluginSocketDir(t *testing.T) {
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", 91-len(base)))
	for _, tc := range []struct {
		name, dir string
		env, want []string
		made      bool
	}{
		{name: "set", dir: filepath.Join(base, "plugins"),
			env:  []string{"A=1"},
			want: []string{"A=1", "PLUGIN_UNIX_SOCKET_DIR=" + filepath.Join(base, "plugins")}, made: true},
		{name: "replaces an inherited value", dir: filepath.Join(base, "p2"),
			env:  []string{"PLUGIN_UNIX_SOCKET_DIR=/elsewhere", "A=1"},
			want: []string{"A=1", "PLUGIN_UNIX_SOCKET_DIR=" + filepath.Join(base, "p2")}, made: true},
		{name: "too long for a socket path", dir: long,
			env:  []string{"A=1"},
			want: []string{"A=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withPluginSocketDir(tc.env, tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("env %v, want %v", got, tc.want)
			}
			_, statErr := os.Stat(tc.dir)
			if made := statErr == nil; made != tc.made {
				t.Fatalf("directory %s made: %t, want %t (%v)", tc.dir, made, tc.made, statErr)
			}
		})
	}
}

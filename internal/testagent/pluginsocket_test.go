package testagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPluginSocketEnv: the variable is set once, to <process dir>/plugins,
// which exists; a directory whose sockets would not fit a unix socket's
// path leaves the environment as it was, so that plugins keep their default.
func TestPluginSocketEnv(t *testing.T) {
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", 91-len(base)-len("/plugins")))
	for _, tc := range []struct {
		name, processDir string
		env, want        []string
		sockets          string
	}{
		{name: "set", processDir: filepath.Join(base, "a"),
			env:     []string{"A=1"},
			want:    []string{"A=1", "PLUGIN_UNIX_SOCKET_DIR=" + filepath.Join(base, "a", "plugins")},
			sockets: filepath.Join(base, "a", "plugins")},
		{name: "replaces an inherited value", processDir: filepath.Join(base, "b"),
			env:     []string{"PLUGIN_UNIX_SOCKET_DIR=/elsewhere", "A=1"},
			want:    []string{"A=1", "PLUGIN_UNIX_SOCKET_DIR=" + filepath.Join(base, "b", "plugins")},
			sockets: filepath.Join(base, "b", "plugins")},
		{name: "too long for a socket path", processDir: long,
			env:  []string{"A=1"},
			want: []string{"A=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sockets, err := pluginSocketEnv(tc.env, tc.processDir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || sockets != tc.sockets {
				t.Fatalf("env %v, directory %q; want %v, %q", got, sockets, tc.want, tc.sockets)
			}
			_, statErr := os.Stat(filepath.Join(tc.processDir, "plugins"))
			if made, want := statErr == nil, tc.sockets != ""; made != want {
				t.Fatalf("directory %s/plugins made: %t, want %t (%v)", tc.processDir, made, want, statErr)
			}
		})
	}
}

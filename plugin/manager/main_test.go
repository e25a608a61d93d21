package manager

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binDir holds the plugin binaries built once for the whole package:
// "testplugin" (plugin/internal/testplugin), "predelete-command" (the
// example in examples/plugins) and "nomad-host-volume" (the built-in served
// as a binary). Tests copy them into their own plugin_dir
// under the names they need.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nss-plugin-bins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating the binary dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The tests kill plugins with SIGKILL, which leaves their unix sockets
	// behind: keep them in dir rather than /tmp. go-plugin's client hands
	// this process's environment to every plugin it starts.
	sockets := filepath.Join(dir, "sockets")
	if err := os.Mkdir(sockets, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "creating the socket dir:", err)
		return 1
	}
	os.Setenv("PLUGIN_UNIX_SOCKET_DIR", sockets)
	for name, pkg := range map[string]string{
		"testplugin":        "github.com/nomad-statefulset/nomad-statefulset/plugin/internal/testplugin",
		"predelete-command": "github.com/nomad-statefulset/nomad-statefulset/examples/plugins/predelete-command",
		"nomad-host-volume": "github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume/cmd/nomad-host-volume",
	} {
		cmd := exec.Command(filepath.Join(os.Getenv("GOROOT"), "bin", "go"), "build", "-o", filepath.Join(dir, name), pkg)
		if os.Getenv("GOROOT") == "" {
			cmd = exec.Command("go", cmd.Args[1:]...)
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

// install copies a built binary into dir under name, executable.
func install(t *testing.T, dir, bin, name string) string {
	t.Helper()
	src, err := os.Open(filepath.Join(binDir, bin))
	if err != nil {
		t.Fatalf("opening %s: %v", bin, err)
	}
	defer src.Close()
	dst := filepath.Join(dir, name)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatalf("creating %s: %v", dst, err)
	}
	if _, err := io.Copy(out, src); err != nil {
		t.Fatalf("copying %s: %v", bin, err)
	}
	if err := out.Close(); err != nil {
		t.Fatalf("closing %s: %v", dst, err)
	}
	return dst
}

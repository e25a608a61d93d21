package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// annotatedExamples lists the example jobs: examples/*.nomad.hcl, and the
// self-contained examples in a directory of their own (examples/postgres,
// examples/nats),
// which bring their scripts in template blocks. examples/deploy (the
// daemon's own job) is not an annotated set, and is run by
// TestDeployAsANomadJob.
func annotatedExamples(t *testing.T) []string {
	t.Helper()
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pattern := range []string{"*.nomad.hcl", "postgres/*.nomad.hcl", "nats/*.nomad.hcl"} {
		m, err := filepath.Glob(filepath.Join(root, "examples", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatalf("no examples/*.nomad.hcl under %s: every example must exist and be exercised", root)
	}
	return files
}

// TestExamplesRegister parses every example with a real Nomad's parse API,
// checks it with `nomad-statefulset validate` (the agent's own parser) and
// registers it. The annotated parents have count = 0, so they register
// without placing anything. (examples/postgres runs for real in
// TestPostgres.)
func TestExamplesRegister(t *testing.T) {
	files := annotatedExamples(t)
	n := testagent.Nomad(t)
	bin := DaemonBinary(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".nomad.hcl")
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "validate", "-nomad-address", n.Addr, f)
			cmd.Env = n.Env()
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "is a valid statefulset") {
				t.Fatalf("nomad-statefulset validate %s: %v\n%s", f, err, out)
			}
			job := RegisterFile(t, n.Client, f)
			ns := deref(job.Namespace)
			got, _, err := n.Client.Jobs().Info(deref(job.ID), &nomadapi.QueryOptions{Namespace: ns})
			if err != nil {
				t.Fatalf("job %s not readable after register: %v", deref(job.ID), err)
			}
			if got.Meta["statefulset"] == "true" {
				if len(got.TaskGroups) != 1 || got.TaskGroups[0].Count == nil || *got.TaskGroups[0].Count != 0 {
					t.Errorf("%s: an annotated parent must have one group with count = 0", f)
				}
				// The daemon reads it as Nomad holds it: every annotation
				// parses and keeps its rules.
				if _, err := jobs.Parse(got); err != nil {
					t.Errorf("%s: the daemon rejects it: %v", f, err)
				}
			}
		})
	}
}

package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// TestExamplesRegister parses every examples/*.nomad.hcl with a real Nomad's
// parse API and registers it. The annotated parents have count = 0, so they
// register without placing anything.
func TestExamplesRegister(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no examples/*.nomad.hcl under %s: every example must exist and be exercised", root)
	}
	n := testagent.Nomad(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".nomad.hcl")
		t.Run(name, func(t *testing.T) {
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

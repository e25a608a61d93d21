package jobs

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// An upgrade of the daemon restarts nothing (DESIGN §2). Each release
// leaves, under testdata/releases/<release>/, what it made of the example
// parents: the parents themselves, the names of their revisions, and every
// child as it registered it. Those files are kept for good and never
// written again: a later release must read the same revision names from
// the same parents, and judge every such child not drifted. Kubernetes
// learnt both with the pod-template hash, whose change in a release
// restarted every Deployment's pods.

// thisRelease names the directory this release writes with -record-release.
const thisRelease = "2026-12-01"

var recordRelease = flag.Bool("record-release", false,
	"write testdata/releases/"+thisRelease+" (refused if it exists: a release's files are never rewritten)")

// releaseRecord is a release's revisions.json: the revision name of each
// example parent, by example.
type releaseRecord map[string]string

// TestRecordThisRelease writes this release's files when asked with
// -record-release, and otherwise checks that they exist, so that a release
// cannot ship without them.
func TestRecordThisRelease(t *testing.T) {
	dir := filepath.Join("testdata", "releases", thisRelease)
	if !*recordRelease {
		if _, err := os.Stat(filepath.Join(dir, "revisions.json")); err != nil {
			t.Fatalf("this release's record is missing (go test ./jobs -run TestRecordThisRelease -record-release): %v", err)
		}
		return
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists: a release's record is never rewritten; a new release sets thisRelease anew", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	revisions := releaseRecord{}
	for _, name := range examples {
		parent := submitted(t, name)
		writeJSON(t, filepath.Join(dir, name+".parent.json"), parent)
		spec, rev := releaseRevision(t, parent)
		revisions[name] = rev.Name
		for ord := spec.OrdinalsStart; ord < spec.OrdinalsStart+spec.Replicas; ord++ {
			child, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := RecordRendering(child); err != nil {
				t.Fatal(err)
			}
			writeJSON(t, filepath.Join(dir, fmt.Sprintf("%s.child-%d.json", name, ord)), child)
		}
	}
	writeJSON(t, filepath.Join(dir, "revisions.json"), revisions)
}

// TestEveryReleaseStillHolds reads every release's record with this
// release's code: each parent gets the revision name it got then, and each
// child that release registered is judged as it was registered: its
// identity and safety settings match its revision, and its spec equals its
// record of what was registered, whatever this release would render now.
func TestEveryReleaseStillHolds(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join("testdata", "releases"))
	if err != nil {
		t.Fatalf("reading the releases' records: %v", err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join("testdata", "releases", d.Name())
		t.Run(d.Name(), func(t *testing.T) {
			var revisions releaseRecord
			b, err := os.ReadFile(filepath.Join(dir, "revisions.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &revisions); err != nil {
				t.Fatal(err)
			}
			for name, want := range revisions {
				spec, rev := releaseRevision(t, loadJob(t, filepath.Join(dir, name+".parent.json")))
				if rev.Name != want {
					t.Errorf("%s: the parent's revision is %s now, %s in release %s: every pod of such a set would be replaced",
						name, rev.Name, want, d.Name())
				}
				children, err := filepath.Glob(filepath.Join(dir, name+".child-*.json"))
				if err != nil || len(children) == 0 {
					t.Fatalf("%s: no children recorded (%v)", name, err)
				}
				for _, path := range children {
					child := loadJob(t, path)
					ord, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), name+".child-"), ".json"))
					if err != nil {
						t.Fatalf("%s: %v", path, err)
					}
					r := NewChildRecord(child)
					if !r.Matches(spec, rev, ord) {
						t.Errorf("%s: its identity or safety settings no longer match its revision", path)
					}
					if !r.Rendered().Known() {
						t.Errorf("%s: its record of what was registered does not decode", path)
					} else if !r.Digest().Equal(r.Rendered()) {
						t.Errorf("%s: judged drifted from its own registration (%v)", path, r.Rendered().Changed(r.Digest()))
					}
				}
			}
		})
	}
}

// releaseRevision parses a parent and names its revision as the reconciler
// does (no collision).
func releaseRevision(t *testing.T, parent *api.Job) (reconciler.Spec, reconciler.Revision) {
	t.Helper()
	spec, err := Parse(parent)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	data, err := RevisionData(parent)
	if err != nil {
		t.Fatalf("RevisionData: %v", err)
	}
	hash := reconciler.HashRevision(data, 0)
	return spec, reconciler.Revision{Name: reconciler.RevisionName(spec.Name, hash), Hash: hash, Data: data}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

package jobs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// metaFromText turns "k=v" lines into a meta map: a compact fuzz input.
func metaFromText(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// FuzzParse feeds arbitrary annotations and job shapes to Parse. It must
// never panic; an accepted job must render valid children at its first and
// last ordinals; a rejected one must say why, key by key.
func FuzzParse(f *testing.F) {
	f.Add("statefulset=true\nstatefulset_replicas=3\nstatefulset_volume_claims=data", 0, uint8(1), "host", "web")
	f.Add("statefulset=true\nstatefulset_max_unavailable=25%\nstatefulset_pod_management_policy=Parallel", 0, uint8(1), "host", "db")
	f.Add("statefulset=true\nstatefulset_replicas=-1\nstatefulset_partiton=2", 3, uint8(2), "csi", "Web")
	f.Fuzz(func(t *testing.T, metaText string, count int, groups uint8, volType, id string) {
		job := newJob(metaFromText(metaText))
		job.ID = &id
		job.TaskGroups[0].Count = &count
		job.TaskGroups[0].Volumes["data"].Type = volType
		for range int(groups%4) - 1 {
			job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: ptr("extra"), Count: ptr(0)})
		}
		if groups%4 == 0 {
			job.TaskGroups = nil
		}
		spec, err := Parse(job)
		if err != nil {
			if errors.Is(err, ErrNotManaged) {
				if IsManaged(job) {
					t.Fatalf("managed job reported as not managed")
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("Parse error is not a ValidationError with problems: %v", err)
			}
			msg := err.Error()
			for _, p := range verr.Problems {
				if p.Key == "" || p.Rule == "" || !strings.Contains(msg, p.String()) {
					t.Fatalf("problem %+v is incomplete or missing from %q", p, msg)
				}
			}
			return
		}
		data, err := RevisionData(job)
		if err != nil {
			t.Fatalf("RevisionData of an accepted job: %v", err)
		}
		rev := testRevision(spec.Name, data)
		for _, ord := range []int{spec.OrdinalsStart, maxOrdinal(spec)} {
			child, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatalf("RenderChild(%d) of an accepted job: %v", ord, err)
			}
			if errs := validateChild(spec, rev, ord, child); len(errs) > 0 {
				t.Fatalf("child %d breaks rules: %v", ord, errs)
			}
		}
	})
}

// FuzzRender fuzzes the names that end up in a child (set, claim, service,
// task, group, env) and the ordinal. Every child of an accepted job must be
// valid, must survive Nomad's canonicalization and a JSON round trip
// without looking drifted, and must look drifted once its identity env is
// changed.
func FuzzRender(f *testing.F) {
	f.Add("web", uint32(0), "data", "web", "app", "value")
	f.Add("db", uint32(7), "wal_1", "", "db", "")
	f.Add("a-b-c", uint32(4294967295), "x", "svc", "", "STATEFULSET_NAME")
	f.Fuzz(func(t *testing.T, set string, ordinal uint32, claim, service, task, env string) {
		job := newJob(map[string]string{KeyVolumeClaims: claim, KeyReplicas: "3", KeyOrdinalsStart: "1000"})
		job.ID = &set
		g := job.TaskGroups[0]
		g.Volumes[claim] = &api.VolumeRequest{Name: claim, Type: "host", Source: claim}
		g.Services[0].Name = service
		g.Tasks[0].Name = task
		g.Tasks[0].Env = map[string]string{env: env}
		spec, err := Parse(job)
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse error is not a ValidationError: %v", err)
			}
			return
		}
		data, err := RevisionData(job)
		if err != nil {
			t.Fatalf("RevisionData: %v", err)
		}
		rev := testRevision(spec.Name, data)
		ord := spec.OrdinalsStart + int(ordinal%uint32(spec.Replicas))
		child, err := RenderChild(spec, rev, ord)
		if err != nil {
			t.Fatalf("RenderChild: %v", err)
		}
		if errs := validateChild(spec, rev, ord, child); len(errs) > 0 {
			t.Fatalf("child breaks rules: %v", errs)
		}
		back, err := copyJob(child)
		if err != nil {
			t.Fatal(err)
		}
		back.Canonicalize()
		if !ChildMatches(spec, rev, ord, back) {
			t.Fatalf("canonicalized child looks drifted")
		}
		back.TaskGroups[0].Tasks[0].Env[EnvOrdinal] = "x"
		if ChildMatches(spec, rev, ord, back) {
			t.Fatalf("edited child env not detected")
		}
		// Re-rendering is deterministic: same inputs, same child.
		again, err := RenderChild(spec, rev, ord)
		if err != nil {
			t.Fatal(err)
		}
		if ja, jb := mustJSON(t, child), mustJSON(t, again); ja != jb {
			t.Fatalf("rendering is not deterministic:\n%s\n%s", ja, jb)
		}
	})
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

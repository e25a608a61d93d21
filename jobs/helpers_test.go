package jobs

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// examples are the annotated jobs under examples/; each has recorded JSON
// under testdata: <name>.submitted.json is the job as parsed from HCL
// (`nomad job run -output`), <name>.registered.json the same job read back
// from a real Nomad agent after registering it.
var examples = []string{"web", "parallel", "partition"}

// loadJob reads a recorded job. It accepts both the {"Job": {...}} wrapper
// that `nomad job run -output` prints and the bare job that GET /v1/job/<id>
// returns.
func loadJob(t testing.TB, path string) *api.Job {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	job, err := decodeJob(b)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return job
}

func decodeJob(b []byte) (*api.Job, error) {
	var wrapped struct{ Job *api.Job }
	if err := json.Unmarshal(b, &wrapped); err == nil && wrapped.Job != nil {
		return wrapped.Job, nil
	}
	var job api.Job
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

func submitted(t testing.TB, name string) *api.Job {
	return loadJob(t, filepath.Join("testdata", name+".submitted.json"))
}

// testRevision builds a revision for data with a test-only name. The real
// name comes from reconciler.HashRevision; the jobs package only needs a
// name that changes with the data.
func testRevision(set string, data []byte) reconciler.Revision {
	h := fnv.New32a()
	h.Write(data)
	hash := fmt.Sprintf("%08x", h.Sum32())
	return reconciler.Revision{Name: set + "-" + hash, Hash: hash, Data: data}
}

// mustSpecRev parses job and computes its revision, failing the test on
// any error.
func mustSpecRev(t testing.TB, job *api.Job) (reconciler.Spec, reconciler.Revision) {
	t.Helper()
	spec, err := Parse(job)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	data, err := RevisionData(job)
	if err != nil {
		t.Fatalf("RevisionData: %v", err)
	}
	return spec, testRevision(spec.Name, data)
}

// newJob returns a small valid parent job: one service group with count 0,
// one exec task, a host volume "data" and a nomad service.
func newJob(meta map[string]string) *api.Job {
	m := map[string]string{KeyManaged: "true"}
	for k, v := range meta {
		m[k] = v
	}
	return &api.Job{
		ID:          ptr("web"),
		Name:        ptr("web"),
		Datacenters: []string{"dc1"},
		Meta:        m,
		TaskGroups: []*api.TaskGroup{{
			Name:  ptr("web"),
			Count: ptr(0),
			Volumes: map[string]*api.VolumeRequest{
				"data": {Name: "data", Type: "host", Source: "data", AccessMode: "single-node-single-writer", AttachmentMode: "file-system"},
				"logs": {Name: "logs", Type: "host", Source: "logs"},
				"csi":  {Name: "csi", Type: "csi", Source: "csi"},
			},
			Services: []*api.Service{{Name: "web", Provider: "nomad"}},
			Tasks: []*api.Task{{
				Name:   "app",
				Driver: "exec",
				Config: map[string]any{"command": "/bin/sh", "args": []any{"-c", "sleep 3600"}},
				VolumeMounts: []*api.VolumeMount{
					{Volume: ptr("data"), Destination: ptr("/data")},
				},
				Services: []*api.Service{{Name: "web-task", Provider: "nomad"}},
			}},
		}},
	}
}

var (
	jobIDRule       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	validVolumeName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
)

// validateChild checks a rendered child against Nomad's own rules for a
// job (nomad/structs Job.Validate: ID without spaces or NUL, a type, a
// namespace, datacenters, groups with a name and count ≥ 0; disconnect
// without both lost_after and stop_on_client_after) and against this
// project's contract (DESIGN §2). It returns every broken rule.
func validateChild(spec reconciler.Spec, rev reconciler.Revision, ordinal int, child *api.Job) []string {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if child == nil {
		return []string{"child is nil"}
	}
	id := deref(child.ID)
	if id == "" || strings.ContainsAny(id, " \x00") {
		bad("job ID %q is empty or has a space or NUL", id)
	}
	if !jobIDRule.MatchString(id) || len(id) > maxPodNameLength {
		bad("job ID %q is not a DNS label of at most %d characters", id, maxPodNameLength)
	}
	if want := fmt.Sprintf("%s-%d", spec.Name, ordinal); id != want {
		bad("job ID %q, want %q", id, want)
	}
	if deref(child.Name) != id {
		bad("job name %q differs from ID %q", deref(child.Name), id)
	}
	if deref(child.Type) != api.JobTypeService {
		bad("job type %q is not service", deref(child.Type))
	}
	if deref(child.Namespace) == "" {
		bad("no namespace")
	}
	if len(child.Datacenters) == 0 {
		bad("no datacenters")
	}
	if p := deref(child.Priority); p < 1 || p > 100 {
		bad("priority %d outside [1, 100]", p)
	}
	if len(child.TaskGroups) != 1 {
		return append(errs, fmt.Sprintf("%d task groups", len(child.TaskGroups)))
	}
	g := child.TaskGroups[0]
	if deref(g.Name) == "" {
		bad("group has no name")
	}
	if deref(g.Count) != 1 {
		bad("group count %d is not 1", deref(g.Count))
	}
	if d := g.Disconnect; d == nil || deref(d.Replace) || (d.LostAfter != nil && d.StopOnClientAfter != nil) || deref(d.StopOnClientAfter) <= 0 {
		bad("disconnect block %+v allows a replacement or is invalid", d)
	}
	if r := g.ReschedulePolicy; r == nil || deref(r.Attempts) != 0 || deref(r.Unlimited) {
		bad("reschedule is not off")
	}
	if u := g.Update; u == nil || deref(u.MaxParallel) < 1 || deref(u.Canary) != 0 || deref(u.AutoRevert) {
		bad("update block does not give a deployment without canaries")
	}
	for _, c := range spec.VolumeClaims {
		v := g.Volumes[c]
		if v == nil || !validVolumeName.MatchString(v.Source) || v.Source != fmt.Sprintf("%s-%s-%d", c, spec.Name, ordinal) {
			bad("claim %q has no valid per-ordinal source", c)
		}
	}
	for _, task := range g.Tasks {
		if task.Env[EnvPodName] != id || task.Env[EnvName] != spec.Name || task.Env[EnvOrdinal] != fmt.Sprint(ordinal) {
			bad("task %q lacks the identity env", task.Name)
		}
		if deref(task.RestartPolicy.Mode) != restartModeFail {
			bad("task %q restart mode is not fail", task.Name)
		}
	}
	if set, ord, r, ok := ParseChild(child); !ok || set != spec.Name || ord != ordinal || r != rev.Name {
		bad("ParseChild = %q, %d, %q, %v", set, ord, r, ok)
	}
	if !ChildMatches(spec, rev, ordinal, child) {
		bad("ChildMatches is false for a freshly rendered child")
	}
	return errs
}

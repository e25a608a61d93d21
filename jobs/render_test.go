package jobs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestRenderGolden renders every ordinal of every example and compares the
// children with testdata/<name>.children.golden.json. Run with -update after
// an intended change, and review the diff.
func TestRenderGolden(t *testing.T) {
	for _, name := range examples {
		t.Run(name, func(t *testing.T) {
			spec, rev := mustSpecRev(t, submitted(t, name))
			var children []*api.Job
			for ord := spec.OrdinalsStart; ord < spec.OrdinalsStart+spec.Replicas; ord++ {
				child, err := RenderChild(spec, rev, ord)
				if err != nil {
					t.Fatalf("RenderChild(%d): %v", ord, err)
				}
				if errs := validateChild(spec, rev, ord, child); len(errs) > 0 {
					t.Errorf("child %d breaks rules: %v", ord, errs)
				}
				children = append(children, child)
			}
			got, err := json.MarshalIndent(children, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name+".children.golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered children differ from %s (run with -update and review the diff):\n%s", path, got)
			}
		})
	}
}

// TestRenderChildContract checks each DESIGN §2 item on the web example.
func TestRenderChildContract(t *testing.T) {
	spec, rev := mustSpecRev(t, submitted(t, "web"))
	child, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	if deref(child.ID) != "web-1" || deref(child.Namespace) != "default" || deref(child.Type) != "service" {
		t.Errorf("ID/namespace/type = %q/%q/%q", deref(child.ID), deref(child.Namespace), deref(child.Type))
	}
	wantMeta := map[string]string{MetaParent: "web", MetaOrdinal: "1", MetaPodName: "web-1", MetaRevision: rev.Name}
	for k, v := range wantMeta {
		if child.Meta[k] != v {
			t.Errorf("meta %s = %q, want %q", k, child.Meta[k], v)
		}
	}
	if _, ok := child.Meta[KeyManaged]; ok {
		t.Error("child carries statefulset = true")
	}
	g := child.TaskGroups[0]
	if deref(g.Count) != 1 {
		t.Errorf("count = %d", deref(g.Count))
	}
	if got := g.Volumes["data"].Source; got != "data-web-1" {
		t.Errorf("data volume source = %q, want data-web-1", got)
	}
	if !slices.Contains(g.Services[0].Tags, "web-1") {
		t.Errorf("service tags %v lack web-1", g.Services[0].Tags)
	}
	env := g.Tasks[0].Env
	if env[EnvName] != "web" || env[EnvOrdinal] != "1" || env[EnvPodName] != "web-1" {
		t.Errorf("env = %v", env)
	}
	if d := deref(g.Update.MinHealthyTime); d != 3*time.Second {
		t.Errorf("min_healthy_time = %v, want the user's 3s", d)
	}
	if deref(g.Update.MaxParallel) != 1 || deref(g.Update.Canary) != 0 || deref(g.Update.AutoRevert) {
		t.Errorf("update = %+v", g.Update)
	}
	if deref(g.Disconnect.Replace) || deref(g.Disconnect.StopOnClientAfter) != DefaultStopOnClientAfter || g.Disconnect.LostAfter != nil {
		t.Errorf("disconnect = %+v", g.Disconnect)
	}
	if deref(g.ReschedulePolicy.Attempts) != 0 || deref(g.ReschedulePolicy.Unlimited) {
		t.Errorf("reschedule = %+v", g.ReschedulePolicy)
	}
	if child.Datacenters[0] != "*" {
		t.Errorf("datacenters = %v", child.Datacenters)
	}
}

// TestRenderKeepsExplicitZeros: prune drops zeros from the revision data;
// rendering must give them back, or Nomad would apply its non-zero
// defaults (restart attempts 2, min_healthy_time 10s).
func TestRenderKeepsExplicitZeros(t *testing.T) {
	job := newJob(nil)
	g := job.TaskGroups[0]
	g.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Delay: ptr(time.Duration(0))}
	g.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Duration(0))}
	g.Tasks[0].KillTimeout = ptr(time.Duration(0))
	spec, rev := mustSpecRev(t, job)
	child, err := RenderChild(spec, rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Nomad canonicalizes the child on registration: check what it will
	// see, not only what was sent.
	c, err := copyJob(child)
	if err != nil {
		t.Fatal(err)
	}
	c.Canonicalize()
	cg := c.TaskGroups[0]
	if a := deref(cg.RestartPolicy.Attempts); a != 0 {
		t.Errorf("group restart attempts = %d, want 0", a)
	}
	if a := deref(cg.Tasks[0].RestartPolicy.Attempts); a != 0 {
		t.Errorf("task restart attempts = %d, want 0", a)
	}
	if d := deref(cg.RestartPolicy.Delay); d != 0 {
		t.Errorf("restart delay = %v, want 0", d)
	}
	if d := deref(cg.Update.MinHealthyTime); d != 0 {
		t.Errorf("min_healthy_time = %v, want 0", d)
	}
	if d := deref(cg.Tasks[0].KillTimeout); d != 0 {
		t.Errorf("kill_timeout = %v, want 0", d)
	}
	// And defaults the user did not touch are Nomad's.
	if d := deref(cg.RestartPolicy.Interval); d != 30*time.Minute {
		t.Errorf("restart interval = %v, want the default 30m", d)
	}
}

// TestRenderKeepsUserStopAfter: a user's stop_on_client_after is kept, and
// lost_after is dropped because Nomad refuses both together.
func TestRenderKeepsUserStopAfter(t *testing.T) {
	job := newJob(nil)
	job.TaskGroups[0].Disconnect = &api.DisconnectStrategy{LostAfter: ptr(time.Hour), Replace: ptr(true)}
	spec, rev := mustSpecRev(t, job)
	child, err := RenderChild(spec, rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := child.TaskGroups[0].Disconnect
	if d.LostAfter != nil || deref(d.Replace) || deref(d.StopOnClientAfter) != DefaultStopOnClientAfter {
		t.Errorf("disconnect = %+v", d)
	}
	job.TaskGroups[0].Disconnect = &api.DisconnectStrategy{StopOnClientAfter: ptr(5 * time.Minute)}
	spec, rev = mustSpecRev(t, job)
	child, err = RenderChild(spec, rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := deref(child.TaskGroups[0].Disconnect.StopOnClientAfter); got != 5*time.Minute {
		t.Errorf("stop_on_client_after = %v, want the user's 5m", got)
	}
}

// TestRenderFromRevision: a child is rendered from the revision's data,
// not from the parent as it is now, so pods below a partition keep the old
// template.
func TestRenderFromRevision(t *testing.T) {
	oldJob := newJob(nil)
	spec, oldRev := mustSpecRev(t, oldJob)
	newJob := newJob(nil)
	newJob.TaskGroups[0].Tasks[0].Config["args"] = []any{"-c", "sleep 1"}
	_, newRev := mustSpecRev(t, newJob)
	if oldRev.Name == newRev.Name {
		t.Fatal("template change did not change the revision")
	}
	a, err := RenderChild(spec, oldRev, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RenderChild(spec, newRev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.TaskGroups[0].Tasks[0].Config["args"].([]any)[1]; got != "sleep 3600" {
		t.Errorf("old revision rendered args %v", got)
	}
	if got := b.TaskGroups[0].Tasks[0].Config["args"].([]any)[1]; got != "sleep 1" {
		t.Errorf("new revision rendered args %v", got)
	}
	if a.Meta[MetaRevision] != oldRev.Name || b.Meta[MetaRevision] != newRev.Name {
		t.Errorf("revision meta %q/%q", a.Meta[MetaRevision], b.Meta[MetaRevision])
	}
}

func TestRenderErrors(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data"}))
	if _, err := RenderChild(spec, rev, -1); err == nil {
		t.Error("negative ordinal rendered")
	}
	if _, err := RenderChild(spec, reconciler.Revision{Name: "x", Data: []byte("{")}, 0); err == nil {
		t.Error("corrupt revision data rendered")
	}
	if _, err := RenderChild(spec, reconciler.Revision{Name: "x", Data: []byte("{}")}, 0); err == nil {
		t.Error("revision data without a group rendered")
	}
	spec.VolumeClaims = []string{"missing"}
	if _, err := RenderChild(spec, rev, 0); err == nil {
		t.Error("a claim the revision lacks rendered")
	}
}

func TestParseChild(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(nil))
	child, err := RenderChild(spec, rev, 12)
	if err != nil {
		t.Fatal(err)
	}
	set, ord, r, ok := ParseChild(child)
	if !ok || set != "web" || ord != 12 || r != rev.Name {
		t.Errorf("ParseChild = %q, %d, %q, %v", set, ord, r, ok)
	}
	cases := []struct {
		name   string
		mutate func(*api.Job)
	}{
		{"nil meta", func(j *api.Job) { j.Meta = nil }},
		{"no parent", func(j *api.Job) { delete(j.Meta, MetaParent) }},
		{"no revision", func(j *api.Job) { delete(j.Meta, MetaRevision) }},
		{"ordinal not a number", func(j *api.Job) { j.Meta[MetaOrdinal] = "x" }},
		{"negative ordinal", func(j *api.Job) { j.Meta[MetaOrdinal] = "-12" }},
		{"leading zero", func(j *api.Job) { j.Meta[MetaOrdinal] = "012" }},
		{"ordinal overflows", func(j *api.Job) { j.Meta[MetaOrdinal] = "99999999999999999999999" }},
		{"ID does not match", func(j *api.Job) { j.ID = ptr("other") }},
		{"no ID", func(j *api.Job) { j.ID = nil }},
		{"pod name does not match", func(j *api.Job) { j.Meta[MetaPodName] = "web-13" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := copyJob(child)
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(c)
			if _, _, _, ok := ParseChild(c); ok {
				t.Errorf("ParseChild accepted a job with %s", tc.name)
			}
		})
	}
	if _, _, _, ok := ParseChild(nil); ok {
		t.Error("ParseChild(nil) ok")
	}
}

// TestChildMatchesDetectsDrift: every hand edit to what identifies a pod,
// to its storage or to its safety settings is seen; edits elsewhere are
// not the identity's business.
func TestChildMatchesDetectsDrift(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data,logs"}))
	child, err := RenderChild(spec, rev, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !ChildMatches(spec, rev, 2, child) {
		t.Fatal("fresh child does not match")
	}
	if ChildMatches(spec, rev, 3, child) {
		t.Error("child matches another ordinal")
	}
	other := rev
	other.Name = "web-other"
	if ChildMatches(spec, other, 2, child) {
		t.Error("child matches another revision")
	}
	cases := []struct {
		name   string
		mutate func(*api.Job)
	}{
		{"ID", func(j *api.Job) { j.ID = ptr("web-9") }},
		{"namespace", func(j *api.Job) { j.Namespace = ptr("other") }},
		{"parent meta", func(j *api.Job) { j.Meta[MetaParent] = "db" }},
		{"ordinal meta", func(j *api.Job) { j.Meta[MetaOrdinal] = "3" }},
		{"pod name meta", func(j *api.Job) { delete(j.Meta, MetaPodName) }},
		{"count 0 (scaled to nothing: replaced once stopped; a count above 1 is ScaledChild's)", func(j *api.Job) { j.TaskGroups[0].Count = ptr(0) }},
		{"env ordinal", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env[EnvOrdinal] = "0" }},
		{"env pod name removed", func(j *api.Job) { delete(j.TaskGroups[0].Tasks[0].Env, EnvPodName) }},
		{"env name", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env[EnvName] = "x" }},
		{"group service tag", func(j *api.Job) { j.TaskGroups[0].Services[0].Tags = nil }},
		{"task service tag", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Services[0].Tags = []string{"web-3"} }},
		{"volume source", func(j *api.Job) { j.TaskGroups[0].Volumes["data"].Source = "data-web-0" }},
		{"second claim source", func(j *api.Job) { j.TaskGroups[0].Volumes["logs"].Source = "logs" }},
		{"volume removed", func(j *api.Job) { delete(j.TaskGroups[0].Volumes, "data") }},
		{"replace on disconnect", func(j *api.Job) { j.TaskGroups[0].Disconnect.Replace = ptr(true) }},
		{"disconnect removed", func(j *api.Job) { j.TaskGroups[0].Disconnect = nil }},
		{"reschedule on", func(j *api.Job) { j.TaskGroups[0].ReschedulePolicy.Unlimited = ptr(true) }},
		{"reschedule attempts", func(j *api.Job) { j.TaskGroups[0].ReschedulePolicy.Attempts = ptr(3) }},
		{"canary", func(j *api.Job) { j.TaskGroups[0].Update.Canary = ptr(1) }},
		{"no deployments", func(j *api.Job) { j.TaskGroups[0].Update.MaxParallel = ptr(0) }},
		{"second group", func(j *api.Job) { j.TaskGroups = append(j.TaskGroups, j.TaskGroups[0]) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := copyJob(child)
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(c)
			if ChildMatches(spec, rev, 2, c) {
				t.Errorf("hand edit of %s not detected", tc.name)
			}
		})
	}
	if ChildMatches(spec, rev, 2, nil) {
		t.Error("nil child matches")
	}
}

// TestChildRegisteredMatches: a child rendered here, registered on a real
// Nomad agent and read back (testdata/<name>.child.registered.json) still
// matches: Nomad's defaults and canonicalization are not drift.
func TestChildRegisteredMatches(t *testing.T) {
	for _, name := range examples {
		t.Run(name, func(t *testing.T) {
			spec, rev := mustSpecRev(t, submitted(t, name))
			reg := loadJob(t, filepath.Join("testdata", name+".child.registered.json"))
			set, ord, r, ok := ParseChild(reg)
			if !ok || set != spec.Name {
				t.Fatalf("ParseChild(registered) = %q, %d, %q, %v", set, ord, r, ok)
			}
			// The recording was made with the test revision name of the
			// recorded data; rev must be the same, or the data changed.
			if r != rev.Name {
				t.Fatalf("registered child is at revision %q, the example now renders %q: re-record", r, rev.Name)
			}
			if !ChildMatches(spec, rev, ord, reg) {
				t.Errorf("a child read back from Nomad does not match what was rendered")
			}
			sent, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatal(err)
			}
			// Nomad keeps the values that matter for one pod per ordinal.
			rg, sg := reg.TaskGroups[0], sent.TaskGroups[0]
			if deref(rg.Update.MinHealthyTime) != deref(sg.Update.MinHealthyTime) ||
				deref(rg.Disconnect.StopOnClientAfter) != deref(sg.Disconnect.StopOnClientAfter) ||
				deref(rg.Disconnect.Reconcile) != api.ReconcileOptionKeepOriginal ||
				deref(rg.RestartPolicy.Mode) != restartModeFail {
				t.Errorf("Nomad changed the child's settings: update %+v disconnect %+v restart %+v", rg.Update, rg.Disconnect, rg.RestartPolicy)
			}
		})
	}
}

// TestVolumeNameFormat pins "<claim>-<set>-<ordinal>", which must agree
// with the name the controller creates the volume under.
func TestVolumeNameFormat(t *testing.T) {
	for i, tc := range []struct{ claim, set string }{{"data", "web"}, {"wal", "db"}} {
		ord := i * 7
		if got, want := volumeName(tc.claim, tc.set, ord), tc.claim+"-"+tc.set+"-"+strconv.Itoa(ord); got != want {
			t.Errorf("volumeName = %q, want %q", got, want)
		}
		if got, want := podName(tc.set, ord), fmt.Sprintf("%s-%d", tc.set, ord); got != want {
			t.Errorf("podName = %q, want %q", got, want)
		}
	}
}

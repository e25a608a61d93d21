package jobs

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestRevisionDataRoundTrip is the recorded proof that the revision data
// survives a round trip through a real Nomad agent: for every example the
// job as parsed from HCL and the job read back after registering it give
// the same bytes, so the same revision hash.
func TestRevisionDataRoundTrip(t *testing.T) {
	for _, name := range examples {
		t.Run(name, func(t *testing.T) {
			sub := submitted(t, name)
			reg := loadJob(t, filepath.Join("testdata", name+".registered.json"))
			a, err := RevisionData(sub)
			if err != nil {
				t.Fatalf("RevisionData(submitted): %v", err)
			}
			b, err := RevisionData(reg)
			if err != nil {
				t.Fatalf("RevisionData(registered): %v", err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("revision data differs after a round trip through Nomad:\nsubmitted:  %s\nregistered: %s", a, b)
			}
			// The registered job really is different on the wire: without
			// normalization the test would prove nothing.
			rawSub, _ := json.Marshal(sub.TaskGroups[0])
			rawReg, _ := json.Marshal(reg.TaskGroups[0])
			if bytes.Equal(rawSub, rawReg) {
				t.Errorf("submitted and registered groups are identical before normalization; the recording is not from a real agent")
			}
		})
	}
}

// TestRevisionDataIgnoresAnnotations: changing only statefulset_* keys
// must not make a new revision (DESIGN §1).
func TestRevisionDataIgnoresAnnotations(t *testing.T) {
	base := newJob(map[string]string{KeyReplicas: "3", "team": "a"})
	changed := newJob(map[string]string{
		KeyReplicas: "5", KeyPartition: "2", KeyPaused: "true", KeyMaxUnavailable: "50%",
		KeyVolumeClaims: "data", KeyPodManagementPolicy: "Parallel", "team": "a",
	})
	a := mustRevisionData(t, base)
	b := mustRevisionData(t, changed)
	if !bytes.Equal(a, b) {
		t.Errorf("statefulset_* keys changed the revision data:\n%s\n%s", a, b)
	}
	var doc revisionDoc
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Meta[KeyManaged]; ok {
		t.Errorf("revision meta keeps %q: every child would look like a parent", KeyManaged)
	}
	if doc.Meta["team"] != "a" {
		t.Errorf("revision meta lost the user key team: %v", doc.Meta)
	}
}

// TestRevisionDataIgnoresLeaderKeys: the DESIGN §3b keys and the approve
// token are statefulset_* keys too. Setting or changing any one of them
// changes how the set is managed, never its revision: an approval that
// made a new revision would roll the whole set.
func TestRevisionDataIgnoresLeaderKeys(t *testing.T) {
	base := map[string]string{
		KeyLeaderCheck: "primary", KeyLeaderUpdate: "switchover", KeySwitchoverCommand: "promote",
		KeyDisruptionCheck: "true", KeyExecTask: "app", KeyExecTimeout: "30s", KeyApprove: "t1",
	}
	changes := map[string]string{
		KeyLeaderCheck: "alive", KeyLeaderUpdate: "supervised", KeySwitchoverCommand: "promote --force",
		KeyDisruptionCheck: "pg_isready", KeyExecTask: "backup", KeyExecTimeout: "2m", KeyApprove: "t2",
	}
	want := mustRevisionData(t, newJob(nil))
	for k, v := range changes {
		t.Run(k, func(t *testing.T) {
			set := newJob(map[string]string{k: base[k]})
			changed := newJob(map[string]string{k: v})
			if got := mustRevisionData(t, set); !bytes.Equal(got, want) {
				t.Errorf("setting %s changed the revision data:\n%s\n%s", k, got, want)
			}
			if got := mustRevisionData(t, changed); !bytes.Equal(got, want) {
				t.Errorf("changing %s changed the revision data:\n%s\n%s", k, got, want)
			}
		})
	}
}

// TestRevisionDataChanges: every revisioned field of DESIGN §1 changes the
// data when it changes.
func TestRevisionDataChanges(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*api.Job)
	}{
		{"task command", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Config["args"] = []any{"-c", "sleep 1"} }},
		{"task env", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env = map[string]string{"A": "1"} }},
		{"task env with empty value", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env = map[string]string{"A": ""} }},
		{"task resources", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: ptr(500)} }},
		{"group meta", func(j *api.Job) { j.TaskGroups[0].Meta = map[string]string{"x": "y"} }},
		{"group restart attempts 0", func(j *api.Job) { j.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: ptr(0)} }},
		{"volume source", func(j *api.Job) { j.TaskGroups[0].Volumes["data"].Source = "other" }},
		{"service name", func(j *api.Job) { j.TaskGroups[0].Services[0].Name = "www" }},
		{"job meta", func(j *api.Job) { j.Meta["version"] = "2" }},
		{"datacenters", func(j *api.Job) { j.Datacenters = []string{"dc2"} }},
		{"node pool", func(j *api.Job) { j.NodePool = ptr("gpu") }},
		{"priority", func(j *api.Job) { j.Priority = ptr(70) }},
		{"job update block", func(j *api.Job) { j.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second)} }},
		{"constraint", func(j *api.Job) {
			j.Constraints = []*api.Constraint{api.NewConstraint("${attr.kernel.name}", "=", "linux")}
		}},
		{"affinity", func(j *api.Job) {
			j.Affinities = []*api.Affinity{api.NewAffinity("${node.datacenter}", "=", "dc1", 50)}
		}},
		{"spread", func(j *api.Job) { j.Spreads = []*api.Spread{api.NewSpread("${node.unique.id}", 50, nil)} }},
	}
	base := mustRevisionData(t, newJob(nil))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(nil)
			tc.mutate(job)
			if got := mustRevisionData(t, job); bytes.Equal(got, base) {
				t.Errorf("changing %s did not change the revision data", tc.name)
			}
		})
	}
}

// TestRevisionDataNilVsEmpty: Nomad turns nil into empty (and back); the
// data must not see the difference.
func TestRevisionDataNilVsEmpty(t *testing.T) {
	a := newJob(nil)
	b := newJob(nil)
	b.Constraints = []*api.Constraint{}
	b.Affinities = []*api.Affinity{}
	b.Spreads = []*api.Spread{}
	g := b.TaskGroups[0]
	g.Meta = map[string]string{}
	g.Constraints = []*api.Constraint{}
	g.Networks = []*api.NetworkResource{}
	g.Services[0].Tags = []string{}
	g.Services[0].Meta = map[string]string{}
	g.Tasks[0].Env = map[string]string{}
	g.Tasks[0].Templates = []*api.Template{}
	g.Tasks[0].Artifacts = []*api.TaskArtifact{}
	g.Tasks[0].Meta = map[string]string{}
	if x, y := mustRevisionData(t, a), mustRevisionData(t, b); !bytes.Equal(x, y) {
		t.Errorf("nil and empty give different data:\n%s\n%s", x, y)
	}
}

// TestRevisionDataCanonicalized: a job that went through the api
// package's Canonicalize (as every job does inside a Nomad server) and
// JSON gives the same data as the raw job.
func TestRevisionDataCanonicalized(t *testing.T) {
	raw := newJob(map[string]string{"team": "x"})
	c, err := copyJob(raw)
	if err != nil {
		t.Fatal(err)
	}
	c.Canonicalize()
	if x, y := mustRevisionData(t, raw), mustRevisionData(t, c); !bytes.Equal(x, y) {
		t.Errorf("canonicalization changed the data:\n%s\n%s", x, y)
	}
}

// TestRevisionDataImplicitConstraints: the constraints a Nomad server adds
// on its own are not part of the data, but the same constraint written by
// the user for a feature not in use is.
func TestRevisionDataImplicitConstraints(t *testing.T) {
	plain := newJob(nil)
	withImplicit := newJob(nil)
	withImplicit.TaskGroups[0].Constraints = []*api.Constraint{
		{LTarget: "${attr.nomad.service_discovery}", RTarget: "true", Operand: "="},
	}
	if x, y := mustRevisionData(t, plain), mustRevisionData(t, withImplicit); !bytes.Equal(x, y) {
		t.Errorf("implicit service discovery constraint changed the data:\n%s\n%s", x, y)
	}

	noServices := newJob(nil)
	noServices.TaskGroups[0].Services = nil
	noServices.TaskGroups[0].Tasks[0].Services = nil
	userWritten := newJob(nil)
	userWritten.TaskGroups[0].Services = nil
	userWritten.TaskGroups[0].Tasks[0].Services = nil
	userWritten.TaskGroups[0].Constraints = []*api.Constraint{
		{LTarget: "${attr.nomad.service_discovery}", RTarget: "true", Operand: "="},
	}
	if x, y := mustRevisionData(t, noServices), mustRevisionData(t, userWritten); bytes.Equal(x, y) {
		t.Error("a user constraint equal to an implicit one was dropped although no nomad service needs it")
	}

	signals := newJob(nil)
	signals.TaskGroups[0].Tasks[0].KillSignal = "SIGINT"
	signals.TaskGroups[0].Tasks[0].Templates = []*api.Template{{
		EmbeddedTmpl: ptr("x"), DestPath: ptr("local/x"), ChangeMode: ptr("signal"), ChangeSignal: ptr("SIGHUP"),
	}}
	signalsImplicit, err := copyJob(signals)
	if err != nil {
		t.Fatal(err)
	}
	signalsImplicit.TaskGroups[0].Constraints = []*api.Constraint{
		{LTarget: "${attr.os.signals}", RTarget: "SIGHUP,SIGINT", Operand: "set_contains"},
		{LTarget: "${attr.nomad.service_discovery}", RTarget: "true", Operand: "="},
	}
	if x, y := mustRevisionData(t, signals), mustRevisionData(t, signalsImplicit); !bytes.Equal(x, y) {
		t.Errorf("implicit signal constraint changed the data:\n%s\n%s", x, y)
	}
}

// TestRevisionDataImplicitConsulAndBridge follows Nomad v1.10.5: a task's
// Consul service gets its constraint on the task, the minimum Consul
// version moved from 1.7.0 to 1.8.0 across versions, and bridge networking
// brings CNI plugin constraints. A user's stricter constraint stays.
func TestRevisionDataImplicitConsulAndBridge(t *testing.T) {
	consulJob := func() *api.Job {
		j := newJob(nil)
		g := j.TaskGroups[0]
		g.Services[0].Provider = "consul"
		g.Tasks[0].Services[0].Provider = ""
		g.Networks = []*api.NetworkResource{{Mode: "bridge"}}
		return j
	}
	base := mustRevisionData(t, consulJob())
	for _, rt := range []string{">= 1.7.0", ">= 1.8.0"} {
		j := consulJob()
		g := j.TaskGroups[0]
		g.Constraints = append(g.Constraints, &api.Constraint{LTarget: "${attr.consul.version}", RTarget: rt, Operand: "semver"})
		for _, p := range []string{"bridge", "firewall", "host-local", "loopback", "portmap"} {
			g.Constraints = append(g.Constraints, &api.Constraint{LTarget: "${attr.plugins.cni.version." + p + "}", RTarget: ">= 0.4.0", Operand: "semver"})
		}
		g.Tasks[0].Constraints = []*api.Constraint{{LTarget: "${attr.consul.version}", RTarget: rt, Operand: "semver"}}
		if got := mustRevisionData(t, j); !bytes.Equal(got, base) {
			t.Errorf("implicit Consul %q / CNI constraints changed the data:\n%s\n%s", rt, base, got)
		}
	}
	strict := consulJob()
	strict.TaskGroups[0].Constraints = []*api.Constraint{{LTarget: "${attr.consul.version}", RTarget: ">= 1.20.0", Operand: "semver"}}
	if got := mustRevisionData(t, strict); bytes.Equal(got, base) {
		t.Error("a user's stricter Consul version constraint was dropped")
	}
}

func TestRevisionDataDoesNotMutate(t *testing.T) {
	job := newJob(map[string]string{KeyReplicas: "2"})
	before, _ := json.Marshal(job)
	mustRevisionData(t, job)
	after, _ := json.Marshal(job)
	if !bytes.Equal(before, after) {
		t.Errorf("RevisionData changed its input:\n%s\n%s", before, after)
	}
}

func TestRevisionDataErrors(t *testing.T) {
	if _, err := RevisionData(nil); err == nil {
		t.Error("RevisionData(nil) returned no error")
	}
	job := newJob(nil)
	job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: ptr("b")})
	if _, err := RevisionData(job); err == nil {
		t.Error("RevisionData of a two-group job returned no error")
	}
}

func mustRevisionData(t testing.TB, job *api.Job) []byte {
	t.Helper()
	b, err := RevisionData(job)
	if err != nil {
		t.Fatalf("RevisionData: %v", err)
	}
	return b
}

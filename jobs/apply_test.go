package jobs

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestClaimModes(t *testing.T) {
	job := &api.Job{TaskGroups: []*api.TaskGroup{{Volumes: map[string]*api.VolumeRequest{
		"data": {Type: "host", AccessMode: "single-node-single-writer", AttachmentMode: "file-system"},
		"bare": {Type: "host"},
	}}}}
	for _, tc := range []struct{ claim, access, attach string }{
		{"data", "single-node-single-writer", "file-system"},
		{"bare", "single-node-writer", "file-system"},
	} {
		a, m := ClaimModes(job, tc.claim)
		if a != tc.access || m != tc.attach {
			t.Errorf("ClaimModes(%q) = %q, %q; want %q, %q", tc.claim, a, m, tc.access, tc.attach)
		}
	}
}

// TestApplyRevisionMeta: applying a revision takes the template's meta from
// the revision and keeps the parent's own statefulset keys, so registering
// the result gives back exactly the revision's data (a rollback, not a new
// revision) without changing how the set is managed.
func TestApplyRevisionMeta(t *testing.T) {
	old := newJob(map[string]string{KeyReplicas: "3", "owner": "a", "gone": "x"})
	data, err := RevisionData(old)
	if err != nil {
		t.Fatal(err)
	}
	parent := newJob(map[string]string{KeyReplicas: "5", KeyPartition: "1", "owner": "b", "added": "y"})
	got, err := ApplyRevision(parent, data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{KeyManaged: "true", KeyReplicas: "5", KeyPartition: "1", "owner": "a", "gone": "x"}
	if !reflect.DeepEqual(got.Meta, want) {
		t.Fatalf("meta %v, want %v", got.Meta, want)
	}
	back, err := RevisionData(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("revision data after apply\n%s\nwant\n%s", back, data)
	}
	if parent.Meta["owner"] != "b" {
		t.Fatal("ApplyRevision changed the parent's meta")
	}
}

// TestChildRecordMeta: a child record keeps exactly the statefulset keys of
// a job's meta, the ones ParseChild and IsManaged read.
func TestChildRecordMeta(t *testing.T) {
	j := newJob(map[string]string{KeyReplicas: "2", MetaParent: "web", "owner": "a", "statefulsetx": "y"})
	got := NewChildRecord(j).Job().Meta
	want := map[string]string{KeyManaged: "true", KeyReplicas: "2", MetaParent: "web"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("record meta %v, want %v", got, want)
	}
}

func TestConsulServices(t *testing.T) {
	job := &api.Job{TaskGroups: []*api.TaskGroup{{
		Services: []*api.Service{{Name: "web"}, {Name: "native", Provider: "nomad"}, {Name: "${NOMAD_JOB_NAME}-x"}},
		Tasks: []*api.Task{
			{Name: "app", Services: []*api.Service{{Name: "admin", Provider: "consul"}, {Name: "web"}}},
			{Name: "side"},
		},
	}}}
	if got, want := ConsulServices(job), []string{"admin", "web"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ConsulServices = %q, want %q", got, want)
	}
	if got := ConsulServices(nil); got != nil {
		t.Fatalf("ConsulServices(nil) = %q", got)
	}
}

// TestNativeLeaderCheck: a leader check is native when the check of that
// name is on a provider = "nomad" service, group or task level, named as
// statefulset_leader_check names it (an unnamed check by Nomad's name);
// its interval is the shortest of its checks', at least a second, and
// DefaultCheckInterval when none is set. A check of a Consul service, a
// name no check has, and no job are not native.
func TestNativeLeaderCheck(t *testing.T) {
	job := func(provider string, checks ...api.ServiceCheck) *api.Job {
		return &api.Job{ID: ptr("pg"), Name: ptr("pg"), TaskGroups: []*api.TaskGroup{{
			Name:     ptr("db"),
			Services: []*api.Service{{Name: "pg", Provider: provider, Checks: checks}},
			Tasks: []*api.Task{{Name: "postgres", Services: []*api.Service{{Name: "pg-primary", Provider: provider,
				Checks: []api.ServiceCheck{{Name: "primary", Type: "http", Interval: 5 * time.Second}}}}}},
		}}}
	}
	cases := []struct {
		name         string
		job          *api.Job
		check        string
		wantInterval time.Duration
		wantNative   bool
	}{
		{name: "task service of provider nomad", job: job("nomad"), check: "primary", wantInterval: 5 * time.Second, wantNative: true},
		{name: "the shortest interval of its checks", job: job("nomad", api.ServiceCheck{Name: "primary", Type: "tcp", Interval: 2 * time.Second}),
			check: "primary", wantInterval: 2 * time.Second, wantNative: true},
		{name: "under a second is a second", job: job("nomad", api.ServiceCheck{Name: "primary", Type: "tcp", Interval: time.Millisecond}),
			check: "primary", wantInterval: time.Second, wantNative: true},
		{name: "unnamed group check without an interval", job: job("nomad", api.ServiceCheck{Type: "tcp"}),
			check: `service: "pg" check`, wantInterval: DefaultCheckInterval, wantNative: true},
		{name: "provider consul", job: job("consul"), check: "primary"},
		{name: "no provider is consul", job: job(""), check: "primary"},
		{name: "a name no check has", job: job("nomad"), check: "primry"},
		{name: "no leader check", job: job("nomad"), check: ""},
		{name: "no job", job: nil, check: "primary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			interval, native := NativeLeaderCheck(tc.job, tc.check)
			if interval != tc.wantInterval || native != tc.wantNative {
				t.Fatalf("NativeLeaderCheck = %s, %v; want %s, %v", interval, native, tc.wantInterval, tc.wantNative)
			}
		})
	}
}

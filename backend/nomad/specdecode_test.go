package nomad

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// TestSpecKeyOf: the namespace, ID and JobModifyIndex are read from a
// job's JSON as Nomad and the api package write it, and a payload they
// cannot be read from plainly is said so.
func TestSpecKeyOf(t *testing.T) {
	job := func(ns, id string, meta map[string]string) []byte {
		b, err := json.Marshal(&api.Job{Namespace: &ns, ID: &id, JobModifyIndex: ptr(uint64(42)), Meta: meta,
			TaskGroups: []*api.TaskGroup{{Name: ptr("app"), Tasks: []*api.Task{{Name: "app", Env: map[string]string{"ID": "x"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		raw    []byte
		ns, id string
		index  uint64
		ok     bool
	}{
		{"a child", job("prod", "web-0", map[string]string{"JobModifyIndex": "7", "ID": "other"}), "prod", "web-0", 42, true},
		{"the default namespace", job("", "web-0", nil), "default", "web-0", 42, true},
		{"an escaped ID", job("prod", `we"b`, nil), "", "", 0, false},
		{"no index", []byte(`{"Namespace":"prod","ID":"web-0"}`), "", "", 0, false},
		{"no ID", []byte(`{"Namespace":"prod","JobModifyIndex":3}`), "", "", 0, false},
		{"not JSON", []byte(`{"Namespace":"prod`), "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, id, index, ok := specKeyOf(tc.raw)
			if ns != tc.ns || id != tc.id || index != tc.index || ok != tc.ok {
				t.Fatalf("specKeyOf = %q, %q, %d, %v; want %q, %q, %d, %v", ns, id, index, ok, tc.ns, tc.id, tc.index, tc.ok)
			}
		})
	}
}

// TestNewSpecDecodedOnce: a job event of a spec the cache does not hold
// gives, decoded once, the record and digest that decoding the record and
// then the digest give; a parent is returned whole.
func TestNewSpecDecodedOnce(t *testing.T) {
	child := &api.Job{Namespace: ptr("default"), ID: ptr("web-0"), Type: ptr("service"), JobModifyIndex: ptr(uint64(9)),
		Meta: map[string]string{jobs.KeyManaged: "true", jobs.MetaParent: "web", jobs.MetaOrdinal: "0"},
		TaskGroups: []*api.TaskGroup{{Name: ptr("app"), Count: ptr(1),
			Tasks: []*api.Task{{Name: "app", Driver: "docker", Env: map[string]string{"A": "1"}, KillTimeout: ptr(7 * time.Second)}}}}}
	parent := &api.Job{Namespace: ptr("default"), ID: ptr("web"), JobModifyIndex: ptr(uint64(3)),
		Meta: map[string]string{jobs.KeyManaged: "true"}, TaskGroups: []*api.TaskGroup{{Name: ptr("app")}}}
	w := &Watcher{cache: NewCache()}
	for _, j := range []*api.Job{child, parent} {
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		job, rec, ok := w.decodeNewSpec(raw)
		if !ok {
			t.Fatalf("%s did not decode", *j.ID)
		}
		if *j.ID == "web" {
			if rec != nil || !reflect.DeepEqual(job, mustDecode(t, raw)) {
				t.Fatalf("the parent is not returned whole: %+v, record %v", job, rec)
			}
			continue
		}
		want, err := jobs.DecodeChildRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		d, err := jobs.DigestChildJSON(raw)
		if err != nil || !d.Known() {
			t.Fatalf("digest %v: %v", d, err)
		}
		if !reflect.DeepEqual(job, want.Job()) || !reflect.DeepEqual(rec.Job(), want.Job()) ||
			rec.KillGrace() != want.KillGrace() || !rec.Digest().Equal(d) {
			t.Fatalf("decoded once: %+v, digest %v; want %+v, %v", rec.Job(), rec.Digest(), want.Job(), d)
		}
	}
	if _, _, ok := w.decodeNewSpec(json.RawMessage(`{"ID":1}`)); ok {
		t.Fatal("a job that does not decode whole was decoded")
	}
}

func mustDecode(t *testing.T, raw []byte) *api.Job {
	t.Helper()
	var j api.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

package jobs

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// mutator walks a value in a fixed order and changes the target-th thing it
// can change: a leaf's value, a pointer, slice, map or interface set to nil,
// or a map entry deleted. Counting every change point of a job lets a test
// try each one in turn without listing fields by hand, so a check added to
// ChildMatches on any field is exercised.
type mutator struct {
	target, n int
	done      bool
	what      string
}

func (m *mutator) hit(path string) bool {
	m.n++
	if m.n == m.target {
		m.done, m.what = true, path
		return true
	}
	return false
}

var timeType = reflect.TypeOf(time.Time{})

func (m *mutator) walk(v reflect.Value, path string) {
	if m.done {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.CanSet() && m.hit(path+"=nil") {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		if v.Kind() == reflect.Pointer {
			m.walk(v.Elem(), path)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			if v.CanSet() && m.hit(path+"+1s") {
				v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Second)))
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				m.walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		if v.CanSet() && m.hit(path+"=nil") {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := 0; i < v.Len(); i++ {
			m.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		if v.CanSet() && m.hit(path+"=nil") {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			p := fmt.Sprintf("%s[%v]", path, k)
			if m.hit(p + " deleted") {
				v.SetMapIndex(k, reflect.Value{})
				return
			}
			val := v.MapIndex(k)
			if val.Kind() == reflect.String {
				if m.hit(p + " changed") {
					v.SetMapIndex(k, reflect.ValueOf(val.String()+"x").Convert(val.Type()))
					return
				}
				continue
			}
			// Pointer values are changed through the pointer.
			if val.Kind() == reflect.Pointer {
				m.walk(val.Elem(), p)
			}
		}
	case reflect.String:
		if v.CanSet() && m.hit(path+" changed") {
			v.SetString(v.String() + "x")
		}
	case reflect.Bool:
		if v.CanSet() && m.hit(path+" flipped") {
			v.SetBool(!v.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.CanSet() && m.hit(path+"+1") {
			v.SetInt(v.Int() + 1)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.CanSet() && m.hit(path+"+1") {
			v.SetUint(v.Uint() + 1)
		}
	case reflect.Float32, reflect.Float64:
		if v.CanSet() && m.hit(path+"+1") {
			v.SetFloat(v.Float() + 1)
		}
	}
}

// TestCompactChildKeepsDrift changes every field of a child, one at a time,
// and checks that ChildMatches and ParseChild give the same answer on the
// compact form as on the whole job: the cache can keep the compact form
// without hiding drift or inventing it. It runs on a freshly rendered child
// and on children read back from a real Nomad (with all of Nomad's
// defaults).
func TestCompactChildKeepsDrift(t *testing.T) {
	type base struct {
		name  string
		spec  reconciler.Spec
		rev   reconciler.Revision
		ord   int
		child *api.Job
	}
	var bases []base
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data,logs"}))
	rendered, err := RenderChild(spec, rev, 2)
	if err != nil {
		t.Fatal(err)
	}
	bases = append(bases, base{"rendered", spec, rev, 2, rendered})
	for _, name := range examples {
		spec, rev := mustSpecRev(t, submitted(t, name))
		reg := loadJob(t, filepath.Join("testdata", name+".child.registered.json"))
		_, ord, _, ok := ParseChild(reg)
		if !ok {
			t.Fatalf("%s: the recorded child does not parse", name)
		}
		bases = append(bases, base{name + " registered", spec, rev, ord, reg})
	}
	for _, b := range bases {
		t.Run(b.name, func(t *testing.T) {
			if !ChildMatches(b.spec, b.rev, b.ord, b.child) || !ChildMatches(b.spec, b.rev, b.ord, CompactChild(b.child)) {
				t.Fatal("the unchanged child does not match, whole or compact")
			}
			tried, drifted := 0, 0
			for target := 1; ; target++ {
				j, err := copyJob(b.child)
				if err != nil {
					t.Fatal(err)
				}
				m := &mutator{target: target}
				m.walk(reflect.ValueOf(j).Elem(), "job")
				if !m.done {
					break
				}
				tried++
				whole := ChildMatches(b.spec, b.rev, b.ord, j)
				compact := ChildMatches(b.spec, b.rev, b.ord, CompactChild(j))
				if whole != compact {
					t.Errorf("%s: ChildMatches is %v on the whole job but %v on its compact form", m.what, whole, compact)
				}
				if !whole {
					drifted++
				}
				s1, o1, r1, ok1 := ParseChild(j)
				s2, o2, r2, ok2 := ParseChild(CompactChild(j))
				if s1 != s2 || o1 != o2 || r1 != r2 || ok1 != ok2 {
					t.Errorf("%s: ParseChild differs: whole %q %d %q %v, compact %q %d %q %v", m.what, s1, o1, r1, ok1, s2, o2, r2, ok2)
				}
			}
			// The walk must reach what ChildMatches checks, or the
			// comparison above proves nothing.
			if drifted < 15 {
				t.Errorf("only %d of %d changes were drift; the walk misses the checked fields", drifted, tried)
			}
			t.Logf("%d changes tried, %d of them drift", tried, drifted)
		})
	}
}

// eachMutatedChild calls visit with the JSON of each base unchanged and of
// every one of the changes TestCompactChildKeepsDrift tries (the mutator's
// targets, one at a time), and fails unless each base gave at least 100.
func eachMutatedChild(t *testing.T, bases []*api.Job, visit func(base int, what string, data []byte)) {
	t.Helper()
	for i, b := range bases {
		tried := 0
		for target := 0; ; target++ {
			j, err := copyJob(b)
			if err != nil {
				t.Fatal(err)
			}
			m := &mutator{target: target, what: "unchanged"}
			if target > 0 {
				m.walk(reflect.ValueOf(j).Elem(), "job")
				if !m.done {
					break
				}
			}
			tried++
			data, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			visit(i, m.what, data)
		}
		if tried < 100 {
			t.Fatalf("base %d: only %d variants tried", i, tried)
		}
	}
}

// TestDecodeCompactChildMatches: decoding a child's JSON straight into the
// compact form gives exactly CompactChild of the whole decoded job, for
// every one of the changes TestCompactChildKeepsDrift tries.
func TestDecodeCompactChildMatches(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data,logs"}))
	rendered, err := RenderChild(spec, rev, 2)
	if err != nil {
		t.Fatal(err)
	}
	bases := []*api.Job{rendered}
	for _, name := range examples {
		bases = append(bases, loadJob(t, filepath.Join("testdata", name+".child.registered.json")))
	}
	eachMutatedChild(t, bases, func(i int, what string, data []byte) {
		got, err := DecodeCompactChild(data)
		if err != nil {
			t.Fatal(err)
		}
		var whole api.Job
		if err := json.Unmarshal(data, &whole); err != nil {
			t.Fatal(err)
		}
		if want := CompactChild(&whole); !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Fatalf("base %d, %s: decoded compact\n%s\nwant\n%s", i, what, g, w)
		}
	})
	if _, err := DecodeCompactChild([]byte("{")); err == nil {
		t.Fatal("truncated JSON decoded")
	}
}

// TestCompactChildKeepsObservedFields: what the watcher's observation reads
// survives, and the copy shares nothing mutable with the original's maps.
func TestCompactChildKeepsObservedFields(t *testing.T) {
	if CompactChild(nil) != nil {
		t.Fatal("CompactChild(nil) is not nil")
	}
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data"}))
	j, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	j.Stop, j.Status, j.Version, j.SubmitTime = ptr(true), ptr("dead"), ptr(uint64(3)), ptr(int64(42))
	j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = ptr(uint64(5)), ptr(uint64(9)), ptr(uint64(8))
	j.Meta["user_key"] = "dropped"
	c := CompactChild(j)
	if *c.Stop != true || *c.Status != "dead" || *c.Version != 3 || *c.SubmitTime != 42 ||
		*c.CreateIndex != 5 || *c.ModifyIndex != 9 || *c.JobModifyIndex != 8 {
		t.Fatalf("status, stop, version or indexes lost: %+v", c)
	}
	if c.Meta[MetaRevision] != rev.Name || c.Meta[MetaParent] != "web" || c.Meta[MetaOrdinal] != "1" {
		t.Fatalf("identity meta lost: %v", c.Meta)
	}
	if _, ok := c.Meta["user_key"]; ok {
		t.Fatal("a user meta key was kept")
	}
	if got := c.TaskGroups[0].Disconnect.StopOnClientAfter; got == nil || *got != *j.TaskGroups[0].Disconnect.StopOnClientAfter {
		t.Fatalf("stop_on_client_after lost: %v", got)
	}
	c.Meta[MetaRevision] = "changed"
	c.TaskGroups[0].Tasks[0].Env[EnvName] = "changed"
	if j.Meta[MetaRevision] == "changed" || j.TaskGroups[0].Tasks[0].Env[EnvName] == "changed" {
		t.Fatal("the compact copy shares maps with the original")
	}
}

// TestChildRecord: the record answers what the watcher's observation asks
// without rebuilding the job, and what it rebuilds is the caller's own.
func TestChildRecord(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data"}))
	j, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	j.SubmitTime, j.ModifyIndex, j.JobModifyIndex = ptr(int64(42)), ptr(uint64(9)), ptr(uint64(8))
	r := NewChildRecord(j)
	if r.ID() != "web-1" || r.Namespace() != "default" || r.Meta(MetaOrdinal) != "1" || r.Meta(MetaRevision) != rev.Name ||
		r.Meta("nope") != "" || r.Stopped() || r.ModifyIndex() != 9 || r.JobModifyIndex() != 8 ||
		r.StopOnClientAfter() != *j.TaskGroups[0].Disconnect.StopOnClientAfter {
		t.Fatalf("record reads wrong: %+v", r)
	}
	if st, ok := r.SubmitTime(); !ok || st != 42 {
		t.Fatalf("submit time %d, %v", st, ok)
	}
	stopped := r.WithStop()
	if !stopped.Stopped() || r.Stopped() || *stopped.Job().Stop != true {
		t.Fatal("WithStop changed the original or did not stop the copy")
	}
	a := r.Job()
	*a.TaskGroups[0].Update.MaxParallel = 99
	a.TaskGroups[0].Services[0].Tags[0] = "changed"
	*a.TaskGroups[0].Disconnect.Replace = true
	b := r.Job()
	if *b.TaskGroups[0].Update.MaxParallel == 99 || b.TaskGroups[0].Services[0].Tags[0] == "changed" || *b.TaskGroups[0].Disconnect.Replace {
		t.Fatal("a rebuilt job shares state with the record")
	}
	// Another child of the same settings shares them in the record.
	j2, err := RenderChild(spec, rev, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r2 := NewChildRecord(j2); r2.groups[0].update != r.groups[0].update || r2.groups[0].disconnect != r.groups[0].disconnect {
		t.Fatal("identical settings are not shared")
	}
}

// TestChildRecordWithListing: a re-list keeps a child's record when the
// stub is of the same spec (Nomad moved only its status and ModifyIndex),
// brought up to the stub; any sign of another spec or another job, or a
// stub older than the record, needs a read of the job.
func TestChildRecordWithListing(t *testing.T) {
	spec, rev := mustSpecRev(t, submitted(t, "web"))
	child, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	child.Status, child.Stop, child.Stable = pointer("pending"), pointer(false), pointer(false)
	child.CreateIndex, child.ModifyIndex, child.JobModifyIndex = pointer(uint64(10)), pointer(uint64(12)), pointer(uint64(11))
	child.SubmitTime = pointer(int64(1000))
	rec := NewChildRecord(child)
	same := api.JobListStub{ID: *child.ID, Status: "running", CreateIndex: 10, ModifyIndex: 20, JobModifyIndex: 11, SubmitTime: 1000}
	for _, tc := range []struct {
		name string
		edit func(s *api.JobListStub)
		keep bool
	}{
		{"status and ModifyIndex moved", func(*api.JobListStub) {}, true},
		{"as recorded", func(s *api.JobListStub) { s.Status, s.ModifyIndex = "pending", 12 }, true},
		{"spec written again", func(s *api.JobListStub) { s.JobModifyIndex = 20 }, false},
		{"stopped", func(s *api.JobListStub) { s.Stop, s.JobModifyIndex = true, 20 }, false},
		{"stop flag differs", func(s *api.JobListStub) { s.Stop = true }, false},
		{"purged and registered anew", func(s *api.JobListStub) { s.CreateIndex = 15 }, false},
		{"submitted again", func(s *api.JobListStub) { s.SubmitTime = 2000 }, false},
		{"stub older than the record", func(s *api.JobListStub) { s.ModifyIndex = 11 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stub := same
			tc.edit(&stub)
			got, ok := rec.WithListing(&stub)
			if ok != tc.keep {
				t.Fatalf("kept %v, want %v", ok, tc.keep)
			}
			if !ok {
				return
			}
			j := got.Job()
			if got.ModifyIndex() != stub.ModifyIndex || *j.Status != stub.Status || j.Stable != nil ||
				got.JobModifyIndex() != 11 || got.Version() != rec.Version() || got.KillGrace() != rec.KillGrace() {
				t.Fatalf("kept record: ModifyIndex %d, status %s, stable %v, JobModifyIndex %d", got.ModifyIndex(), *j.Status, j.Stable, got.JobModifyIndex())
			}
			if rec.ModifyIndex() != 12 || *rec.Job().Status != "pending" {
				t.Fatal("WithListing changed the record it was called on")
			}
		})
	}
}

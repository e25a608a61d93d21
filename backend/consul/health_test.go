package consul

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

func loadEntries(t *testing.T, name string) []*consulapi.ServiceEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*consulapi.ServiceEntry
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// recordedAllocID is the ID of the allocation in testdata/nomad-alloc.json,
// recorded with the health entries from a real Nomad 1.10.5 registering in
// a real Consul 1.20.6 (see testdata/README.md).
func recordedAllocID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "nomad-alloc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a struct{ ID string }
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a.ID
}

// The service IDs Nomad registers carry the allocation ID, for group and
// task services alike; the checks of the instance are mapped to it, and a
// node check (serfHealth) is not.
func TestAllocChecksOfRecordedPayloads(t *testing.T) {
	alloc := recordedAllocID(t)
	cases := []struct {
		file         string
		wantCritical string
	}{
		{"health-rec-web-passing.json", ""},
		{"health-rec-task-passing.json", ""},
		{"health-rec-web-critical.json", `check "healthy-file" of service "rec-web" is critical: context deadline exceeded`},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			got := AllocChecksOf(loadEntries(t, tc.file))
			want := map[string]string{alloc: tc.wantCritical}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

func TestAllocIDOf(t *testing.T) {
	cases := []struct {
		id, want string
		ok       bool
	}{
		{"_nomad-task-0b6a5e5c-0c5e-6f7a-4d3c-3b3b0e1f2a9d-group-g-rec-web-http", "0b6a5e5c-0c5e-6f7a-4d3c-3b3b0e1f2a9d", true},
		{"_nomad-task-0b6a5e5c-0c5e-6f7a-4d3c-3b3b0e1f2a9d-app-rec-task-http", "0b6a5e5c-0c5e-6f7a-4d3c-3b3b0e1f2a9d", true},
		{"_nomad-server-abc-http", "", false},
		{"_nomad-task-short", "", false},
		{"web-1", "", false},
	}
	for _, tc := range cases {
		got, ok := AllocIDOf(tc.id)
		if got != tc.want || ok != tc.ok {
			t.Errorf("AllocIDOf(%q) = %q, %v; want %q, %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
}

// fakeHealth answers blocking queries from a script of answers per service:
// each query with the last index returned blocks until the next answer is
// pushed, as Consul's blocking query does.
type fakeHealth struct {
	mu      sync.Mutex
	cond    *sync.Cond
	answers map[string][][]*consulapi.ServiceEntry
	calls   map[string]int
}

func newFakeHealth() *fakeHealth {
	f := &fakeHealth{answers: map[string][][]*consulapi.ServiceEntry{}, calls: map[string]int{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *fakeHealth) push(service string, entries []*consulapi.ServiceEntry) {
	f.mu.Lock()
	f.answers[service] = append(f.answers[service], entries)
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *fakeHealth) Service(ctx context.Context, service string, waitIndex uint64) ([]*consulapi.ServiceEntry, *consulapi.QueryMeta, error) {
	stop := context.AfterFunc(ctx, f.cond.Broadcast)
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[service]++
	for uint64(len(f.answers[service])) <= waitIndex && ctx.Err() == nil {
		f.cond.Wait()
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	i := waitIndex
	return f.answers[service][i], &consulapi.QueryMeta{LastIndex: i + 1}, nil
}

func entry(alloc, status string) *consulapi.ServiceEntry {
	id := "_nomad-task-" + alloc + "-group-g-web-http"
	return &consulapi.ServiceEntry{
		Service: &consulapi.AgentService{ID: id, Service: "web"},
		Checks: consulapi.HealthChecks{
			{Name: "serfHealth", Status: consulapi.HealthCritical},
			{Name: "data", ServiceID: id, ServiceName: "web", Status: status, Output: "out"},
		},
	}
}

// A watch makes one blocking query per service whatever the number of
// sets, hands every set using the service to onChange when an allocation's
// checks change (not when an answer repeats), and records when checks
// stopped being critical.
func TestCheckWatcherFollowsChanges(t *testing.T) {
	const a1 = "11111111-1111-1111-1111-111111111111"
	fake := newFakeHealth()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Unix(1_000_000, 0)
	var clockMu sync.Mutex
	changed := make(chan backend.SetKey, 16)
	w := NewCheckWatcher(ctx, CheckWatcherConfig{
		API: fake,
		Clock: func() time.Time {
			clockMu.Lock()
			defer clockMu.Unlock()
			return now
		},
		OnChange: func(k backend.SetKey) { changed <- k },
	})
	web := backend.SetKey{Namespace: "default", Name: "web"}
	db := backend.SetKey{Namespace: "default", Name: "db"}
	w.Watch(web, []string{"web"})
	w.Watch(db, []string{"web"})
	if _, synced := w.Checks(web, a1); synced {
		t.Fatal("synced before the first answer")
	}
	expect := func(step string, want ...backend.SetKey) {
		t.Helper()
		got := map[backend.SetKey]bool{}
		for range want {
			got[<-changed] = true
		}
		for _, k := range want {
			if !got[k] {
				t.Fatalf("%s: %v not requeued (got %v)", step, k, got)
			}
		}
	}
	steps := []struct {
		name         string
		status       string
		critical     string
		passingSince time.Time
	}{
		{"first answer", consulapi.HealthPassing, "", time.Time{}},
		{"turns critical", consulapi.HealthCritical, `check "data" of service "web" is critical: out`, time.Time{}},
		{"passes again", consulapi.HealthPassing, "", now.Add(3 * time.Second)},
	}
	for i, s := range steps {
		clockMu.Lock()
		now = time.Unix(1_000_000, 0).Add(time.Duration(i+1) * time.Second)
		clockMu.Unlock()
		fake.push("web", []*consulapi.ServiceEntry{entry(a1, s.status)})
		expect(s.name, web, db)
		got, synced := w.Checks(web, a1)
		want := AllocChecks{Known: true, Critical: s.critical, PassingSince: s.passingSince}
		if !synced || got != want {
			t.Fatalf("%s: checks %+v synced %v; want %+v", s.name, got, synced, want)
		}
	}
	// The same answer again changes nothing and requeues nothing.
	fake.push("web", []*consulapi.ServiceEntry{entry(a1, consulapi.HealthPassing)})
	fake.push("web", []*consulapi.ServiceEntry{entry(a1, consulapi.HealthCritical)})
	expect("critical after a repeat", web, db)
	select {
	case k := <-changed:
		t.Fatalf("an unchanged answer requeued %v", k)
	default:
	}
	fake.mu.Lock()
	if calls := len(fake.calls); calls != 1 {
		t.Fatalf("queries for %d services, want 1 for two sets sharing one", calls)
	}
	fake.mu.Unlock()
	if n := w.Services(); n != 1 {
		t.Fatalf("%d watches, want 1", n)
	}
	w.Watch(web, nil)
	if n := w.Services(); n != 1 {
		t.Fatalf("%d watches after one set left, want 1", n)
	}
	w.Watch(db, nil)
	if n := w.Services(); n != 0 {
		t.Fatalf("%d watches after both sets left, want 0", n)
	}
	cancel()
	w.Wait()
}

// Critical wins across a set's services, and a service not answered yet
// leaves the set unsynced.
func TestCheckWatcherChecksAcrossServices(t *testing.T) {
	const a1 = "22222222-2222-2222-2222-222222222222"
	fake := newFakeHealth()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan backend.SetKey, 16)
	w := NewCheckWatcher(ctx, CheckWatcherConfig{API: fake, OnChange: func(k backend.SetKey) { changed <- k }})
	key := backend.SetKey{Namespace: "default", Name: "web"}
	w.Watch(key, []string{"api", "web"})
	fake.push("web", []*consulapi.ServiceEntry{entry(a1, consulapi.HealthPassing)})
	<-changed
	if _, synced := w.Checks(key, a1); synced {
		t.Fatal("synced while api has not answered")
	}
	e := entry(a1, consulapi.HealthCritical)
	e.Service.Service = "api"
	e.Checks[1].ServiceName = "api"
	fake.push("api", []*consulapi.ServiceEntry{e})
	<-changed
	got, synced := w.Checks(key, a1)
	if !synced || !got.Known || !strings.Contains(got.Critical, `service "api"`) {
		t.Fatalf("checks %+v synced %v; want api's critical check", got, synced)
	}
	cancel()
	w.Wait()
}

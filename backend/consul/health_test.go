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
			got := AllocChecksOf(loadEntries(t, tc.file), "")
			want := map[string]AllocChecks{alloc: {Known: true, Critical: tc.wantCritical}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
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
	w.Watch(web, []string{"web"}, "")
	w.Watch(db, []string{"web"}, "")
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
	w.Watch(web, nil, "")
	if n := w.Services(); n != 1 {
		t.Fatalf("%d watches after one set left, want 1", n)
	}
	w.Watch(db, nil, "")
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
	w.Watch(key, []string{"api", "web"}, "")
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

// chk is a check of a service instance in a test entry: its name and status.
type chk struct{ name, status string }

// entryOf is the health entry of the instance Nomad registers for alloc in
// service, with the node's serfHealth (critical, so that a test sees it is
// not counted) and the instance's checks in order.
func entryOf(service, alloc string, checks ...chk) *consulapi.ServiceEntry {
	id := "_nomad-task-" + alloc + "-group-g-" + service + "-http"
	e := &consulapi.ServiceEntry{
		Service: &consulapi.AgentService{ID: id, Service: service},
		Checks:  consulapi.HealthChecks{{Name: "serfHealth", Status: consulapi.HealthCritical}},
	}
	for _, c := range checks {
		e.Checks = append(e.Checks, &consulapi.HealthCheck{Name: c.name, ServiceID: id, ServiceName: service, Status: c.status, Output: "out"})
	}
	return e
}

// critical is the reason a critical check of service "db" shows.
func critical(name string) string {
	return `check "` + name + `" of service "db" is critical: out`
}

// The leader check names the leader where it passes and never counts
// against readiness; without a leader check, the same check is an ordinary
// one.
func TestAllocChecksOfLeaderCheck(t *testing.T) {
	const a1 = "33333333-3333-3333-3333-333333333333"
	const (
		pass = consulapi.HealthPassing
		warn = consulapi.HealthWarning
		crit = consulapi.HealthCritical
	)
	cases := []struct {
		name    string
		entries []*consulapi.ServiceEntry
		leader  string
		want    AllocChecks
	}{
		{name: "the leader check passes: the leader", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"data", pass}, chk{"primary", pass})},
			want:    AllocChecks{Known: true, Leader: true}},
		{name: "critical on a follower: neither leader nor critical", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", crit}, chk{"data", pass})},
			want:    AllocChecks{Known: true}},
		{name: "the next critical check is the reason", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", crit}, chk{"data", crit})},
			want:    AllocChecks{Known: true, Critical: critical("data")}},
		{name: "a warning does not name a leader", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", warn})},
			want:    AllocChecks{Known: true}},
		{name: "a leader that is not ready still leads", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"data", crit}, chk{"primary", pass})},
			want:    AllocChecks{Known: true, Critical: critical("data"), Leader: true}},
		{name: "two checks of the name lead only when both pass", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", pass}, chk{"primary", crit})},
			want:    AllocChecks{Known: true}},
		{name: "two instances lead only when both pass", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", crit}), entryOf("db", a1, chk{"primary", pass})},
			want:    AllocChecks{Known: true}},
		{name: "a leader check not listed names no leader", leader: "primary",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"data", pass})},
			want:    AllocChecks{Known: true}},
		{name: "without a leader check the check counts", leader: "",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", crit})},
			want:    AllocChecks{Known: true, Critical: critical("primary")}},
		{name: "without a leader check nothing leads", leader: "",
			entries: []*consulapi.ServiceEntry{entryOf("db", a1, chk{"primary", pass})},
			want:    AllocChecks{Known: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := AllocChecksOf(tc.entries, tc.leader)
			want := map[string]AllocChecks{a1: tc.want}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// The recorded check of a real Nomad in a real Consul, named as the leader
// check, names the leader while it passes and is no reason once critical.
func TestAllocChecksOfRecordedLeaderCheck(t *testing.T) {
	alloc := recordedAllocID(t)
	for _, tc := range []struct {
		file   string
		leader bool
	}{
		{"health-rec-web-passing.json", true},
		{"health-rec-web-critical.json", false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := AllocChecksOf(loadEntries(t, tc.file), "healthy-file")
			want := map[string]AllocChecks{alloc: {Known: true, Leader: tc.leader}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// newTestWatcher is a watcher on fake with a clock the test sets, and the
// channel onChange sends to.
func newTestWatcher(t *testing.T, fake *fakeHealth, start time.Time) (w *CheckWatcher, setClock func(time.Time), changed chan backend.SetKey) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	now := start
	changed = make(chan backend.SetKey, 64)
	w = NewCheckWatcher(ctx, CheckWatcherConfig{
		API: fake,
		Clock: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		},
		OnChange: func(k backend.SetKey) { changed <- k },
	})
	t.Cleanup(func() {
		cancel()
		w.Wait()
	})
	return w, func(t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		now = t
	}, changed
}

// leaderWant is what Checks should say of one allocation to one set.
type leaderWant struct {
	set   backend.SetKey
	alloc string
	want  AllocChecks
}

func checkWants(t *testing.T, w *CheckWatcher, step string, wants []leaderWant) {
	t.Helper()
	for _, lw := range wants {
		got, synced := w.Checks(lw.set, lw.alloc)
		if !synced || got != lw.want {
			t.Errorf("%s: %s, alloc %s: %+v synced %v; want %+v", step, lw.set.Name, lw.alloc[:2], got, synced, lw.want)
		}
	}
}

// The layout DESIGN §3b advises: the leader check on a service of its own
// (pg-primary), the readiness checks on another (pg). The leader check,
// critical on the followers, does not make them not Ready; the leader is
// the pod where it passes, and follows it when it moves, without moving
// anyone's PassingSince.
func TestCheckWatcherLeaderCheckOnItsOwnService(t *testing.T) {
	const (
		a1   = "66666666-6666-6666-6666-666666666666"
		a2   = "77777777-7777-7777-7777-777777777777"
		pass = consulapi.HealthPassing
		crit = consulapi.HealthCritical
	)
	fake := newFakeHealth()
	t0 := time.Unix(3_000_000, 0)
	w, setClock, changed := newTestWatcher(t, fake, t0)
	pg := backend.SetKey{Namespace: "default", Name: "pg"}
	w.Watch(pg, []string{"pg", "pg-primary"}, "primary")
	fake.push("pg", []*consulapi.ServiceEntry{entryOf("pg", a1, chk{"data", pass}), entryOf("pg", a2, chk{"data", pass})})
	<-changed
	steps := []struct {
		name    string
		primary [2]string
		want    [2]AllocChecks
	}{
		{"a1 leads", [2]string{pass, crit}, [2]AllocChecks{{Known: true, Leader: true}, {Known: true}}},
		{"a2 leads", [2]string{crit, pass}, [2]AllocChecks{{Known: true}, {Known: true, Leader: true}}},
		{"between two leaders", [2]string{crit, crit}, [2]AllocChecks{{Known: true}, {Known: true}}},
	}
	for i, s := range steps {
		setClock(t0.Add(time.Duration(i+1) * time.Second))
		fake.push("pg-primary", []*consulapi.ServiceEntry{
			entryOf("pg-primary", a1, chk{"primary", s.primary[0]}), entryOf("pg-primary", a2, chk{"primary", s.primary[1]}),
		})
		if k := <-changed; k != pg {
			t.Fatalf("%s: requeued %v", s.name, k)
		}
		checkWants(t, w, s.name, []leaderWant{{pg, a1, s.want[0]}, {pg, a2, s.want[1]}})
	}
	// The parent no longer names a leader check: primary is an ordinary
	// check from the next Checks on, with no new answer needed.
	w.Watch(pg, []string{"pg", "pg-primary"}, "")
	primary := `check "primary" of service "pg-primary" is critical: out`
	checkWants(t, w, "no leader check", []leaderWant{
		{pg, a1, AllocChecks{Known: true, Critical: primary}},
		// a2's primary check passed from the second answer to the third.
		{pg, a2, AllocChecks{Known: true, Critical: primary, PassingSince: t0.Add(2 * time.Second)}},
	})
}

// Two sets share service "db" and name different leader checks: "primary"
// for by-primary (allocations p1, p2) and "writable" for by-writable (w1,
// w2). Each set's leader check names its leader and neither makes a pod
// critical nor moves its PassingSince. Allocation x1 has both checks and is
// asked of both sets: what is one set's leader check is an ordinary check
// to the other, so the watcher keeps each check's status and judges per set.
func TestCheckWatcherSharedServiceLeaderChecks(t *testing.T) {
	const (
		p1   = "p1111111-1111-1111-1111-111111111111"
		p2   = "p2222222-2222-2222-2222-222222222222"
		w1   = "w1111111-1111-1111-1111-111111111111"
		w2   = "w2222222-2222-2222-2222-222222222222"
		x1   = "x1111111-1111-1111-1111-111111111111"
		pass = consulapi.HealthPassing
		crit = consulapi.HealthCritical
	)
	fake := newFakeHealth()
	t0 := time.Unix(2_000_000, 0)
	w, setClock, changed := newTestWatcher(t, fake, t0)
	byPrimary := backend.SetKey{Namespace: "default", Name: "by-primary"}
	byWritable := backend.SetKey{Namespace: "default", Name: "by-writable"}
	w.Watch(byPrimary, []string{"db"}, "primary")
	w.Watch(byWritable, []string{"db"}, "writable")

	// db is the service's answer with the status of each allocation's
	// checks: data, then its leader check(s).
	db := func(p1Data, p1Primary, p2Data, p2Primary, w1Data, w1Writable, w2Writable, x1Primary, x1Writable string) []*consulapi.ServiceEntry {
		return []*consulapi.ServiceEntry{
			entryOf("db", p1, chk{"data", p1Data}, chk{"primary", p1Primary}),
			entryOf("db", p2, chk{"data", p2Data}, chk{"primary", p2Primary}),
			entryOf("db", w1, chk{"data", w1Data}, chk{"writable", w1Writable}),
			entryOf("db", w2, chk{"data", pass}, chk{"writable", w2Writable}),
			entryOf("db", x1, chk{"primary", x1Primary}, chk{"writable", x1Writable}),
		}
	}
	steps := []struct {
		name   string
		answer []*consulapi.ServiceEntry
		want   []leaderWant
	}{
		{
			name:   "p1 and w2 lead",
			answer: db(pass, pass, pass, crit, pass, crit, pass, crit, pass),
			want: []leaderWant{
				{byPrimary, p1, AllocChecks{Known: true, Leader: true}},
				{byPrimary, p2, AllocChecks{Known: true}},
				{byWritable, w1, AllocChecks{Known: true}},
				{byWritable, w2, AllocChecks{Known: true, Leader: true}},
				{byPrimary, x1, AllocChecks{Known: true}},
				{byWritable, x1, AllocChecks{Known: true, Leader: true, Critical: critical("primary")}},
			},
		},
		{
			name:   "leadership moves to p2 and w1; on x1 from writable to primary",
			answer: db(pass, crit, pass, pass, pass, pass, crit, pass, crit),
			want: []leaderWant{
				{byPrimary, p1, AllocChecks{Known: true}},
				{byPrimary, p2, AllocChecks{Known: true, Leader: true}},
				{byWritable, w1, AllocChecks{Known: true, Leader: true}},
				{byWritable, w2, AllocChecks{Known: true}},
				{byPrimary, x1, AllocChecks{Known: true, Leader: true, Critical: critical("writable")}},
				// Primary, an ordinary check to by-writable, passes again.
				{byWritable, x1, AllocChecks{Known: true, PassingSince: t0.Add(2 * time.Second)}},
			},
		},
		{
			name:   "the leaders' data fails",
			answer: db(pass, crit, crit, pass, crit, pass, crit, pass, crit),
			want: []leaderWant{
				{byPrimary, p2, AllocChecks{Known: true, Leader: true, Critical: critical("data")}},
				{byWritable, w1, AllocChecks{Known: true, Leader: true, Critical: critical("data")}},
			},
		},
		{
			name:   "the leaders' data passes again",
			answer: db(pass, crit, pass, pass, pass, pass, crit, pass, crit),
			want: []leaderWant{
				{byPrimary, p1, AllocChecks{Known: true}},
				{byPrimary, p2, AllocChecks{Known: true, Leader: true, PassingSince: t0.Add(4 * time.Second)}},
				{byWritable, w1, AllocChecks{Known: true, Leader: true, PassingSince: t0.Add(4 * time.Second)}},
				{byWritable, w2, AllocChecks{Known: true}},
				{byPrimary, x1, AllocChecks{Known: true, Leader: true, Critical: critical("writable")}},
				{byWritable, x1, AllocChecks{Known: true, PassingSince: t0.Add(2 * time.Second)}},
			},
		},
	}
	for i, s := range steps {
		setClock(t0.Add(time.Duration(i+1) * time.Second))
		fake.push("db", s.answer)
		seen := map[backend.SetKey]bool{}
		for len(seen) < 2 {
			seen[<-changed] = true
		}
		checkWants(t, w, s.name, s.want)
	}
}

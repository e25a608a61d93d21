package nomadsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

var errInjected = errors.New("injected")

// faultScenario is one call of every verb. Each step is independent of the
// others' success, so a fault in one shows only in that step.
type faultScenario struct {
	s     *Nomad
	volID string
}

func newFaultScenario(t *testing.T) *faultScenario {
	s := manual(t)
	register(t, s, testJob("pre"), true, 0)
	register(t, s, testJob("pre-stop"), true, 0)
	v, err := s.CreateHostVolume(context.Background(), &api.HostVolume{Name: "pre-vol"})
	if err != nil {
		t.Fatal(err)
	}
	s.Settle()
	s.ResetCalls()
	return &faultScenario{s: s, volID: v.ID}
}

type faultStep struct {
	verb string
	run  func(ctx context.Context, f *faultScenario) error
}

var faultSteps = []faultStep{
	{nomad.VerbListJobs, func(ctx context.Context, f *faultScenario) error {
		_, _, err := f.s.ListJobs(ctx, "*")
		return err
	}},
	{nomad.VerbRegisterJob, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.RegisterJob(ctx, testJob("new"), true, 0)
		return err
	}},
	{nomad.VerbGetJob, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.GetJob(ctx, "default", "pre")
		return err
	}},
	{nomad.VerbListAllocations, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.ListAllocations(ctx, "*")
		return err
	}},
	{nomad.VerbCreateHostVolume, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.CreateHostVolume(ctx, &api.HostVolume{Name: "new-vol"})
		return err
	}},
	{nomad.VerbListHostVolumes, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.ListHostVolumes(ctx, "default", "")
		return err
	}},
	{nomad.VerbDeleteHostVolume, func(ctx context.Context, f *faultScenario) error {
		return f.s.DeleteHostVolume(ctx, "default", f.volID)
	}},
	{nomad.VerbDeregisterJob, func(ctx context.Context, f *faultScenario) error {
		return f.s.DeregisterJob(ctx, "default", "pre-stop", false)
	}},
	{nomad.VerbEvents, func(ctx context.Context, f *faultScenario) error {
		_, err := f.s.Events(ctx, 0)
		return err
	}},
}

// TestFaultAtEveryCallIndex arms a fault at each call index in turn and
// checks that exactly that call fails, and that a failed write has no
// effect while a lost response has its effect.
func TestFaultAtEveryCallIndex(t *testing.T) {
	for _, lose := range []bool{false, true} {
		for n := 1; n <= len(faultSteps); n++ {
			name := fmt.Sprintf("fail/%d", n)
			if lose {
				name = fmt.Sprintf("lose-response/%d", n)
			}
			t.Run(name, func(t *testing.T) {
				f := newFaultScenario(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if lose {
					f.s.LoseResponse(n, errInjected)
				} else {
					f.s.FailCall(n, errInjected)
				}
				for i, st := range faultSteps {
					before := f.s.Index()
					err := st.run(ctx, f)
					if i+1 != n {
						if err != nil {
							t.Fatalf("call %d (%s) failed: %v", i+1, st.verb, err)
						}
						continue
					}
					if !errors.Is(err, errInjected) {
						t.Fatalf("call %d (%s): got %v, want the injected error", n, st.verb, err)
					}
					applied := f.s.Index() != before
					write := nomad.Verbs[st.verb].Write
					if write && applied != lose {
						t.Fatalf("call %d (%s): write applied = %v with lose-response = %v", n, st.verb, applied, lose)
					}
					if !write && applied {
						t.Fatalf("call %d (%s): a read changed the state", n, st.verb)
					}
				}
				calls := f.s.Calls()
				for _, st := range faultSteps {
					if calls[st.verb] != 1 {
						t.Fatalf("calls %v: want 1 of each verb", calls)
					}
				}
				if w := f.s.Writes(); w != 4 {
					t.Fatalf("writes %d, want 4", w)
				}
			})
		}
	}
}

func TestFailVerbAndUnreachable(t *testing.T) {
	s := manual(t)
	ctx := context.Background()
	s.FailVerb(nomad.VerbGetJob, 2, ServerError())
	s.FailVerb(nomad.VerbGetJob, 1, errInjected)
	register(t, s, testJob("web-0"), true, 0)
	for i, want := range []string{"500", "500", "injected", ""} {
		_, err := s.GetJob(ctx, "default", "web-0")
		switch {
		case want == "" && err != nil:
			t.Fatalf("GetJob %d: %v", i, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("GetJob %d: %v, want %q", i, err, want)
		}
	}

	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	s.SetUnreachable(true)
	_, err := s.GetJob(ctx, "default", "web-0")
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("unreachable: %v", err)
	}
	if _, err := s.RegisterJob(ctx, testJob("web-1"), true, 0); err == nil {
		t.Fatal("a write succeeded while unreachable")
	}
	var last *api.Events
	for ev := range ch {
		last = ev
	}
	if last == nil || !errors.Is(last.Err, syscall.ECONNREFUSED) {
		t.Fatalf("stream end while unreachable: %+v", last)
	}
	if _, err := s.Events(ctx, 0); err == nil {
		t.Fatal("subscribed while unreachable")
	}
	s.SetUnreachable(false)
	if _, err := s.GetJob(ctx, "default", "web-0"); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	if s.Job("default", "web-1") != nil {
		t.Fatal("the failed write took effect")
	}

	// A call whose context is done never reaches Nomad and is not counted.
	before := s.Calls()[nomad.VerbGetJob]
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := s.GetJob(done, "default", "web-0"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if s.Calls()[nomad.VerbGetJob] != before {
		t.Fatal("a cancelled call was counted")
	}

	s.FailVerb(nomad.VerbListJobs, 5, errInjected)
	s.ClearFaults()
	if _, _, err := s.ListJobs(ctx, "default"); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestServerErrors(t *testing.T) {
	err := ResponseError(503, "no leader")
	code, body := responseBody(t, err)
	if code != 503 || body != "no leader" || err.Error() != "Unexpected response code: 503 (no leader)" {
		t.Fatalf("response error: %d %q %q", code, body, err)
	}
	if code, _ := responseBody(t, ServerError()); code != 500 {
		t.Fatalf("server error code %d", code)
	}
}

// TestConcurrentUse runs writers racing on the same jobs with
// check-and-set, readers and a subscriber against a real-time simulation;
// run it with -race.
func TestConcurrentUse(t *testing.T) {
	s := NewNomad(NomadConfig{})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var streamErr error
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		var last uint64
		for ev := range ch {
			if ev.Err == nil && ev.Index <= last {
				streamErr = fmt.Errorf("index %d after %d", ev.Index, last)
			}
			last = ev.Index
		}
	}()

	const jobs, writersPerJob, updates = 20, 3, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := make(map[string]int)
	for j := 0; j < jobs; j++ {
		id := fmt.Sprintf("web-%d", j)
		for w := 0; w < writersPerJob; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for u := 0; u < updates; {
					cur, err := s.GetJob(ctx, "default", id)
					var jmi uint64
					if err == nil {
						jmi = *cur.JobModifyIndex
					}
					next := testJob(id)
					next.Meta["writer"] = fmt.Sprintf("%d-%d", w, u)
					_, err = s.RegisterJob(ctx, next, true, jmi)
					if err != nil {
						if !strings.Contains(err.Error(), api.RegisterEnforceIndexErrPrefix) {
							t.Errorf("register: %v", err)
							return
						}
						continue // lost the race: read again
					}
					mu.Lock()
					wins[id]++
					mu.Unlock()
					u++
					if _, _, err := s.ListJobs(ctx, "*"); err != nil {
						t.Errorf("list: %v", err)
					}
					if _, err := s.ListAllocations(ctx, "default"); err != nil {
						t.Errorf("list allocations: %v", err)
					}
				}
			}(w)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			v, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: fmt.Sprintf("vol-%d", i)})
			if err != nil {
				t.Errorf("create volume: %v", err)
				return
			}
			if err := s.DeleteHostVolume(ctx, "default", v.ID); err != nil {
				t.Errorf("delete volume: %v", err)
			}
		}
	}()
	wg.Wait()
	waitQuiet(t, s)

	for j := 0; j < jobs; j++ {
		id := fmt.Sprintf("web-%d", j)
		job := s.Job("default", id)
		if got, want := int(*job.Version), wins[id]-1; got != want {
			t.Fatalf("%s: version %d after %d successful writes", id, got, wins[id])
		}
		running := 0
		for _, a := range s.Allocs("default", id) {
			if a.ClientStatus == "running" {
				running++
			}
		}
		if running != 1 {
			t.Fatalf("%s: %d running allocations", id, running)
		}
	}
	if m := s.MaxConcurrentAllocsPerJob(); m != 1 {
		t.Fatalf("max concurrent allocations per job %d", m)
	}
	cancel()
	<-streamDone
	if streamErr != nil {
		t.Fatal(streamErr)
	}
}

// waitQuiet waits until a real-time simulation has no transition left.
func waitQuiet(t testing.TB, s *Nomad) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for s.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("simulation never settled: %d transitions pending", s.Pending())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRealTime runs the lifecycle against the clock, waiting on the event
// stream for the allocation to become healthy.
func TestRealTime(t *testing.T) {
	s := NewNomad(NomadConfig{PlaceDelay: time.Millisecond, StartDelay: 2 * time.Millisecond, HealthyDelay: 3 * time.Millisecond, StopDelay: time.Millisecond})
	defer s.Close()
	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	register(t, s, testJob("web-0"), true, 0)
	timeout := time.After(guard)
	for healthy := false; !healthy; {
		select {
		case ev := <-ch:
			for _, e := range ev.Events {
				if a, _ := e.Allocation(); a != nil && a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil {
					healthy = *a.DeploymentStatus.Healthy
				}
			}
		case <-timeout:
			t.Fatal("never healthy")
		}
	}
	if s.Now().Before(time.Now().Add(-time.Minute)) {
		t.Fatal("real-time mode is not on the wall clock")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Advance in real-time mode did not panic")
		}
	}()
	s.Advance(time.Second)
}

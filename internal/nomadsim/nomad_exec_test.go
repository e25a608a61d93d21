package nomadsim

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// placed registers testJob(id) and lets its allocation be placed: pending,
// and running once the test advances by tStart.
func placed(t *testing.T, s *Nomad, id string) *api.AllocationListStub {
	t.Helper()
	register(t, s, testJob(id), false, 0)
	s.Advance(tPlace)
	return only(t, s, id)
}

// TestExecAlloc: the default command exits 0; SetExec's function sees the
// caller's command and env and decides the result; Nomad's refusals come
// before it runs; its output is bounded as nomad.Client bounds it.
func TestExecAlloc(t *testing.T) {
	ctx := context.Background()
	s := manual(t)
	a := placed(t, s, "web-0")
	cmd := []string{"/bin/sh", "-c", "pg_isready"}
	env := map[string]string{"NSS_POD": "web-0", "NSS_ORDINAL": "0"}

	if _, err := s.ExecAlloc(ctx, "default", a.NodeID, a.ID, "app", cmd, env); err == nil || !strings.Contains(err.Error(), `task "app" is not running.`) {
		t.Fatalf("exec into a pending allocation: %v; want Nomad's refusal", err)
	}
	s.Advance(tStart)
	if res, err := s.ExecAlloc(ctx, "default", a.NodeID, a.ID, "app", cmd, env); err != nil || res != (nomad.ExecResult{}) {
		t.Fatalf("default exec: %+v, %v; want exit 0 with no output", res, err)
	}

	type call struct {
		allocID, task string
		command       []string
		env           map[string]string
	}
	var seen []call
	s.SetExec(func(allocID, task string, command []string, env map[string]string) (int, string, error) {
		seen = append(seen, call{allocID, task, command, env})
		return 3, strings.Repeat("x", nomad.ExecOutputLimit) + "the end\n", nil
	})
	res, err := s.ExecAlloc(ctx, "default", "", a.ID, "app", cmd, env)
	if err != nil || res.ExitCode != 3 || !res.Truncated || len(res.Output) != nomad.ExecOutputLimit || !strings.HasSuffix(res.Output, "the end\n") {
		t.Fatalf("scripted exec: exit %d, %d bytes (truncated %v), %v; want exit 3 and the last %d bytes",
			res.ExitCode, len(res.Output), res.Truncated, err, nomad.ExecOutputLimit)
	}
	if len(seen) != 1 || seen[0].allocID != a.ID || seen[0].task != "app" || !slices.Equal(seen[0].command, cmd) || !maps.Equal(seen[0].env, env) {
		t.Fatalf("SetExec's function saw %+v", seen)
	}

	for _, tc := range []struct {
		name, ns, alloc, task string
		command               []string
		env                   map[string]string
		want                  string
	}{
		{"unknown allocation", "default", "nope", "app", cmd, nil, `Unknown allocation "nope"`},
		{"another namespace", "other", a.ID, "app", cmd, nil, "Unknown allocation"},
		{"unknown task", "default", a.ID, "db", cmd, nil, "task not found"},
		{"no command", "default", a.ID, "app", nil, nil, "no command"},
		{"bad variable name", "default", a.ID, "app", cmd, map[string]string{"NSS-POD": "x"}, "not a shell identifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.ExecAlloc(ctx, tc.ns, "", tc.alloc, tc.task, tc.command, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) || res.ExitCode != -1 {
				t.Fatalf("got %+v, %v; want an error saying %q", res, err, tc.want)
			}
		})
	}
	if len(seen) != 1 {
		t.Fatalf("a refused exec ran: %+v", seen)
	}

	if err := s.StopAlloc(a.ID); err != nil {
		t.Fatal(err)
	}
	s.Advance(tStop)
	if _, err := s.ExecAlloc(ctx, "default", "", a.ID, "app", cmd, env); err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Fatalf("exec into a stopped allocation: %v; want Nomad's refusal", err)
	}
}

// TestExecAllocDeadlineAndFaults: a command that outlives the caller's
// deadline fails at the deadline; a failed call runs nothing; a lost
// response ran the command; and every call is counted, as a write.
func TestExecAllocDeadlineAndFaults(t *testing.T) {
	s := manual(t)
	a := placed(t, s, "web-0")
	s.Advance(tStart)
	release := make(chan struct{})
	defer close(release)
	ran := make(chan string, 10)
	s.SetExec(func(_, _ string, command []string, _ map[string]string) (int, string, error) {
		ran <- command[0]
		if command[0] == "hang" {
			<-release
		}
		return 0, "", nil
	})
	exec := func(ctx context.Context, command string) (nomad.ExecResult, error) {
		return s.ExecAlloc(ctx, "default", "", a.ID, "app", []string{command}, nil)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := exec(ctx, "hang"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("a hanging command returned %v after %s; want a deadline error at 100ms", err, time.Since(start))
	}
	<-ran

	injected := errors.New("injected")
	s.FailVerb(nomad.VerbExecAlloc, 1, injected)
	if _, err := exec(context.Background(), "failed"); !errors.Is(err, injected) {
		t.Fatalf("got %v; want the injected fault", err)
	}
	s.LoseResponse(1, injected)
	if res, err := exec(context.Background(), "lost"); !errors.Is(err, injected) || res.ExitCode != -1 {
		t.Fatalf("got %+v, %v; want the injected fault", res, err)
	}
	if got := <-ran; got != "lost" {
		t.Fatalf("ran %q; want the lost response's command to have run, and the failed call's not", got)
	}
	if n := s.Calls()[nomad.VerbExecAlloc]; n != 3 || s.Writes() != 3+1 { // and the registration
		t.Fatalf("counted %d execs and %d writes; want 3 and 4", n, s.Writes())
	}
}

// TestAllocChecks: the results SetAllocChecks gives a running allocation,
// none once it stops, and ErrNotFound for an allocation Nomad does not
// know.
func TestAllocChecks(t *testing.T) {
	ctx := context.Background()
	s := manual(t)
	a := placed(t, s, "web-0")
	s.Advance(tStart)
	if checks, err := s.AllocChecks(ctx, "default", a.ID); err != nil || len(checks) != 0 {
		t.Fatalf("checks before any were set: %+v, %v; want none", checks, err)
	}
	if err := s.SetAllocChecks(a.ID, map[string]bool{"leader": true, "alive": false}); err != nil {
		t.Fatal(err)
	}
	checks, err := s.AllocChecks(ctx, "default", a.ID)
	if err != nil || len(checks) != 2 || !checks["leader"].Passing || checks["alive"].Passing {
		t.Fatalf("got %+v, %v; want leader passing and alive failing", checks, err)
	}
	for _, tc := range []struct{ name, ns, alloc string }{
		{"unknown allocation", "default", "nope"},
		{"another namespace", "other", a.ID},
	} {
		if _, err := s.AllocChecks(ctx, tc.ns, tc.alloc); !errors.Is(err, nomad.ErrNotFound) {
			t.Errorf("%s: %v; want ErrNotFound", tc.name, err)
		}
	}
	if err := s.SetAllocChecks("nope", map[string]bool{"leader": true}); err == nil {
		t.Error("SetAllocChecks took an unknown allocation")
	}
	if err := s.StopAlloc(a.ID); err != nil {
		t.Fatal(err)
	}
	s.Advance(tStop)
	if checks, err := s.AllocChecks(ctx, "default", a.ID); err != nil || len(checks) != 0 {
		t.Fatalf("checks of a stopped allocation: %+v, %v; want none", checks, err)
	}
	if n := s.Calls()[nomad.VerbAllocChecks]; n != 5 {
		t.Fatalf("counted %d AllocChecks calls, want 5", n)
	}
}

package command

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

// stack is the real agent, its real HTTP API, and the simulated Nomad
// behind an HTTP facade of the two endpoints the CLI writes through. Every
// verb runs against it end to end in-process: the CLI reads what the agent
// really serves and writes what the agent really reacts to.
type stack struct {
	t         *testing.T
	sim       *nomadsim.Nomad
	agentAddr string
	nomadAddr string
	// beforeRegister, if set, runs once before the facade's next register:
	// someone else's `nomad job run` landing between read and write.
	beforeRegister func()
	mu             sync.Mutex
}

func startStack(t *testing.T) *stack {
	t.Helper()
	sim := nomadsim.NewNomad(nomadsim.NomadConfig{PlaceDelay: time.Millisecond, StartDelay: 5 * time.Millisecond, HealthyDelay: 10 * time.Millisecond, StopDelay: 5 * time.Millisecond})
	a, err := agent.New(agent.Options{
		Logger: hclog.NewNullLogger(),
		Nomad:  nomad.NewCluster(sim), PluginBuiltins: map[string]plugin.Factory{hostvolume.Name: hostvolume.Factory(sim)},
		Store: memory.NewStore(), HTTPAddr: "127.0.0.1:0", Workers: 2,
		RetryBaseDelay: 5 * time.Millisecond, RetryMaxDelay: 100 * time.Millisecond,
		ResyncInterval: time.Hour, ExpectationTTL: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done; sim.Close() })

	// The facade is the simulator's own Nomad HTTP API (nomadsim.Nomad's
	// Handler), so errors come back as Nomad sends them: the enforce-index
	// conflict is Nomad's own 500 and text. Only register is wrapped, to
	// let a test land someone else's write between the CLI's read and write.
	s := &stack{t: t, sim: sim, agentAddr: "http://" + a.HTTPAddr()}
	nomadAPI := sim.Handler()
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		f := s.beforeRegister
		s.beforeRegister = nil
		s.mu.Unlock()
		if f != nil {
			f()
		}
		nomadAPI.ServeHTTP(w, r)
	})
	mux.Handle("/", nomadAPI)
	facade := httptest.NewServer(mux)
	t.Cleanup(facade.Close)
	s.nomadAddr = facade.URL
	return s
}

// cli runs one command with both addresses set, the way e2e and scripts do
// through NOMAD_STATEFULSET_ADDR and NOMAD_ADDR.
func (s *stack) cli(c func(Meta) interface{ Run([]string) int }, args ...string) (int, string, string) {
	s.t.Helper()
	s.t.Setenv(client.AddressEnv, s.agentAddr)
	s.t.Setenv("NOMAD_ADDR", s.nomadAddr)
	m, ui := newTestMeta()
	m.Now = nil // the real clock: the agent stamps real times
	code := c(m).Run(args)
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func (s *stack) mustRun(c func(Meta) interface{ Run([]string) int }, args ...string) string {
	s.t.Helper()
	code, out, errOut := s.cli(c, args...)
	if code != ExitOK {
		s.t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	return out
}

// follow runs rollout status to completion and returns its lines.
func (s *stack) follow(set string) []string {
	s.t.Helper()
	out := s.mustRun(rolloutStatusC, "-poll-interval", "5ms", "-timeout", "60s", set)
	return strings.Split(strings.TrimSpace(out), "\n")
}

func statusC(m Meta) interface{ Run([]string) int }        { return &StatusCommand{Meta: m} }
func rolloutStatusC(m Meta) interface{ Run([]string) int } { return &RolloutStatusCommand{Meta: m} }
func historyC(m Meta) interface{ Run([]string) int }       { return &RolloutHistoryCommand{Meta: m} }
func undoC(m Meta) interface{ Run([]string) int }          { return &RolloutUndoCommand{Meta: m} }
func restartC(m Meta) interface{ Run([]string) int }       { return &RolloutRestartCommand{Meta: m} }
func pauseC(m Meta) interface{ Run([]string) int }         { return &RolloutPauseCommand{Meta: m} }
func resumeC(m Meta) interface{ Run([]string) int } {
	return &RolloutPauseCommand{Meta: m, Resume: true}
}
func scaleC(m Meta) interface{ Run([]string) int }   { return &ScaleCommand{Meta: m} }
func approveC(m Meta) interface{ Run([]string) int } { return &RolloutApproveCommand{Meta: m} }

// detail reads the set as `status -json` shows it.
func (s *stack) detail(set string) *client.SetDetail {
	s.t.Helper()
	out := s.mustRun(statusC, "-json", set)
	var d client.SetDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		s.t.Fatalf("status -json: %v\n%s", err, out)
	}
	return &d
}

// podRevisions maps each pod's ordinal to its revision.
func podRevisions(d *client.SetDetail) map[int]string {
	out := map[int]string{}
	for _, p := range d.Pods {
		out[p.Ordinal] = p.Revision
	}
	return out
}

func TestEveryVerbAgainstTheRealAgent(t *testing.T) {
	s := startStack(t)
	job := parentJob("web")
	job.Meta["statefulset_partition"] = "1"
	if _, err := s.sim.RegisterJob(context.Background(), job, false, 0); err != nil {
		t.Fatal(err)
	}

	// rollout status right after the job is registered: the agent may not
	// know the set yet; the CLI waits for it, then follows creation.
	lines := s.follow("web")
	t.Logf("creation:\n%s", strings.Join(lines, "\n"))
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, `Partitioned rollout of statefulset "web" complete`) || !strings.Contains(last, "3 of 3 ready") {
		t.Fatalf("creation: last line %q\nall:\n%s", last, strings.Join(lines, "\n"))
	}
	d := s.detail("web")
	rev1 := d.Status.UpdateRevision
	if len(d.Pods) != 3 || d.Status.ReadyReplicas != 3 || rev1 == "" {
		t.Fatalf("after creation: %+v", d.Status)
	}
	out := s.mustRun(statusC, "web")
	for _, want := range []string{"web-0", "web-1", "web-2", "3 desired, 3 ready", "RollingUpdate (partition 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if out := s.mustRun(statusC); !regexp.MustCompile(`(?m)^web\s+default\s+3/3\s`).MatchString(out) {
		t.Errorf("status list:\n%s", out)
	}

	// Paused: a restart is refused; resume, then restart rolls a new
	// revision down to the partition, and rollout status follows it.
	s.mustRun(pauseC, "web")
	if code, _, errOut := s.cli(restartC, "web"); code != ExitError || !strings.Contains(errOut, "paused") {
		t.Fatalf("restart while paused: exit %d, %q", code, errOut)
	}
	s.mustRun(resumeC, "web")
	s.mustRun(restartC, "web")
	lines = s.follow("web")
	t.Logf("restart:\n%s", strings.Join(lines, "\n"))
	last = lines[len(lines)-1]
	if !strings.HasPrefix(last, `Partitioned rollout of statefulset "web" complete: 2 of 2 pods updated`) {
		t.Fatalf("restart rollout: last line %q\nall:\n%s", last, strings.Join(lines, "\n"))
	}
	d = s.detail("web")
	rev2 := d.Status.UpdateRevision
	revs := podRevisions(d)
	if rev2 == rev1 || revs[0] != rev1 || revs[1] != rev2 || revs[2] != rev2 {
		t.Fatalf("after the partitioned restart: pods %v, revisions %s -> %s", revs, rev1, rev2)
	}

	// History: two revisions; -revision shows the first one's template.
	out = s.mustRun(historyC, "web")
	if !strings.Contains(out, rev1) || !strings.Contains(out, rev2) {
		t.Errorf("history:\n%s", out)
	}
	out = s.mustRun(historyC, "-revision", "1", "web")
	if !strings.Contains(out, `"Group"`) {
		t.Errorf("history -revision 1:\n%s", out)
	}

	// Undo: back to the first revision; the agent sees a rollback (the same
	// revision name, renumbered), and the pods above the partition return.
	s.mustRun(undoC, "web")
	lines = s.follow("web")
	t.Logf("undo:\n%s", strings.Join(lines, "\n"))
	d = s.detail("web")
	revs = podRevisions(d)
	if d.Status.UpdateRevision != rev1 || revs[1] != rev1 || revs[2] != rev1 {
		t.Fatalf("after undo: update revision %s, pods %v; want all at %s", d.Status.UpdateRevision, revs, rev1)
	}
	var renumbered bool
	for _, r := range d.Revisions {
		if r.Name == rev1 && r.Number > 2 {
			renumbered = true
		}
	}
	if !renumbered {
		t.Errorf("undo made no rollback: revisions %+v", d.Revisions)
	}

	// A write that loses the check-and-set race writes nothing and says so.
	s.mu.Lock()
	s.beforeRegister = func() {
		other, err := s.sim.GetJob(context.Background(), "default", "web")
		if err != nil {
			t.Error(err)
			return
		}
		other.Meta["owner"] = "someone-else"
		if _, err := s.sim.RegisterJob(context.Background(), other, false, 0); err != nil {
			t.Error(err)
		}
	}
	s.mu.Unlock()
	code, _, errOut := s.cli(scaleC, "web", "5")
	if code != ExitConflict || !strings.Contains(errOut, "run the command again") {
		t.Fatalf("conflict: exit %d, stderr %q", code, errOut)
	}
	if d := s.detail("web"); d.Spec.Replicas != 3 {
		t.Fatalf("the conflicting scale was applied: replicas %d", d.Spec.Replicas)
	}

	// Scale down: the highest ordinal goes.
	s.mustRun(scaleC, "web", "2")
	s.follow("web")
	d = s.detail("web")
	if d.Spec.Replicas != 2 || len(d.Pods) != 2 || d.Status.ReadyReplicas != 2 {
		t.Fatalf("after scale: spec %d, %d pods, %d ready", d.Spec.Replicas, len(d.Pods), d.Status.ReadyReplicas)
	}

	// Approve: the agent takes the token as a valid annotation, and it
	// makes no new revision (rollout status waits until the agent has
	// observed the write).
	before, beforePods := d.Status.UpdateRevision, fmt.Sprint(podRevisions(d))
	s.mustRun(approveC, "web")
	s.follow("web")
	d = s.detail("web")
	if d.Status.UpdateRevision != before || fmt.Sprint(podRevisions(d)) != beforePods {
		t.Fatalf("after approve: update revision %s, pods %v; want %s and %s unchanged", d.Status.UpdateRevision, podRevisions(d), before, beforePods)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == "InvalidSpec" && c.Status {
			t.Fatalf("approve made the spec invalid: %s", c.Message)
		}
	}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestCrashCountedOnceItsPurgeSucceeds: the crash-loop backoff counted a
// failed pod before its purge was sent, so every failed retry of that purge
// counted the same failure again and lengthened the backoff. It is counted
// once Nomad has taken the purge: the outcome of each try is folded into
// the set's memory as the controller settles it.
func TestCrashCountedOnceItsPurgeSucceeds(t *testing.T) {
	ctx := context.Background()
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	control := &podControl{log: hclog.NewNullLogger(), nomad: nomad.NewCluster(sim), clock: func() time.Time { return now }, expectTTL: time.Minute}
	c := &controller{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, sets: newSetStates(nil), effector: control, expectTTL: time.Minute}
	st := &setState{}
	failed := reconciler.Pod{Ordinal: 0, Phase: reconciler.PhaseFailed, AllTerminal: true}
	act := reconciler.Action{Type: reconciler.ActionDeletePod, Ordinal: 0, Pod: failed, Cause: reconciler.CauseEnded, Purge: true}
	p := &pass{key: key, st: st, now: now, obs: nomad.Observation{Pods: []nomad.PodDetail{{Pod: failed, JobID: "web-0"}}}}
	if _, err := sim.RegisterJob(ctx, parentJob("web-0", nil, "v1"), false, 0); err != nil {
		t.Fatal(err)
	}

	sim.FailVerb(nomad.VerbDeregisterJob, 2, nomadsim.ServerError())
	var res acted
	for i := 0; i < 2; i++ {
		if err := c.settle(p, act, control.execute(ctx, p, act), &res); err == nil {
			t.Fatal("the purge did not fail as injected")
		}
	}
	if n := st.memory.Crashes[0].Count; n != 0 {
		t.Fatalf("two failed purges counted %d crashes, want none", n)
	}
	if err := c.settle(p, act, control.execute(ctx, p, act), &res); err != nil {
		t.Fatal(err)
	}
	if n := st.memory.Crashes[0].Count; n != 1 {
		t.Fatalf("the purge that went through counted %d crashes, want 1", n)
	}
}

// TestPostReadyCallsAreBounded: a pass used to start one goroutine, and one
// hook call, per pod whose post_ready hooks were due, however many; a set
// of a thousand fresh pods started a thousand calls at once. The asks are
// the reconciler's PostReady actions, carried out in groups of at most
// reconciler.MaxPostReadyCalls, and every pod is still asked.
func TestPostReadyCallsAreBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	var running, peak, asked atomic.Int64
	var mu sync.Mutex
	hooks := hookFunc(func(context.Context, plugin.Event, plugin.Pod) plugin.HookResult {
		n := running.Add(1)
		mu.Lock()
		peak.Store(max(peak.Load(), n))
		mu.Unlock()
		time.Sleep(time.Millisecond) // long enough for the calls to overlap
		running.Add(-1)
		asked.Add(1)
		return plugin.HookResult{Proceed: true}
	})
	control := &podControl{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, hooks: hooks}
	c := &controller{log: hclog.NewNullLogger(), clock: func() time.Time { return now }, sets: newSetStates(nil), hooks: hooks, effector: control}
	const pods = 5 * reconciler.MaxPostReadyCalls
	in := reconciler.Input{Spec: reconciler.Spec{Name: "web", Replicas: pods, PodManagementPolicy: reconciler.Parallel}, Now: now}
	for i := 0; i < pods; i++ {
		in.Pods = append(in.Pods, reconciler.Pod{Ordinal: i, Phase: reconciler.PhaseRunning, AllocID: fmt.Sprint("a", i), AwaitsPostReady: true})
	}
	in = atCurrentRevision(in)
	out := reconciler.Reconcile(in)
	// Only the asks: the rest of the decision (a revision to store, the
	// missing pods) is not this test's.
	out.Actions = slices.DeleteFunc(out.Actions, func(a reconciler.Action) bool { return a.Type != reconciler.ActionPostReady })
	if len(out.Actions) != pods {
		t.Fatalf("%d asks for %d pods awaiting their hooks", len(out.Actions), pods)
	}
	p := &pass{key: key, st: c.sets.of(key), now: now, spec: in.Spec}
	if _, err := c.act(context.Background(), p, out); err != nil {
		t.Fatal(err)
	}
	if got := asked.Load(); got != pods {
		t.Fatalf("%d of %d pods asked", got, pods)
	}
	if got := peak.Load(); got > reconciler.MaxPostReadyCalls || got < 2 {
		t.Fatalf("%d hook calls ran at once; want side by side, within the bound of %d", got, reconciler.MaxPostReadyCalls)
	}
	if n := len(p.st.memory.PostReady); n != pods {
		t.Fatalf("%d answers remembered, want %d", n, pods)
	}
}

// atCurrentRevision is in with its revision stored and its pods at it, so
// that the decision leaves them be.
func atCurrentRevision(in reconciler.Input) reconciler.Input {
	for _, a := range reconciler.Reconcile(in).Actions {
		if a.Type == reconciler.ActionCreateRevision {
			in.Revisions = append(in.Revisions, a.Revision)
			in.Previous.CurrentRevision, in.Previous.UpdateRevision = a.Revision.Name, a.Revision.Name
		}
	}
	in.Pods = slices.Clone(in.Pods)
	for i := range in.Pods {
		in.Pods[i].Revision = in.Previous.UpdateRevision
	}
	return in
}

// corruptRevisions is a store whose revision listing finds a corrupt value.
type corruptRevisions struct{ backend.Store }

func (s corruptRevisions) ListRevisions(context.Context, backend.SetKey) ([]reconciler.Revision, error) {
	return nil, &backend.CorruptValueError{Key: "nomad-statefulset/default/web/revisions/web-1", Err: errors.New("garbage")}
}

// TestCorruptRevisionLeavesTheSetUntouched: a corrupt stored revision is
// reported on the set and nothing is decided on a store that could not be
// read. (The split of observe into small steps once let the pass go on
// with no revisions, and it wrote a revision over the corrupt one; the
// e2e TestConsulCorruptValue caught it.)
func TestCorruptRevisionLeavesTheSetUntouched(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "1"}, "v1"))
	r.c.store = corruptRevisions{r.c.store}
	r.sync(t)
	if len(r.eff.calls) != 0 {
		t.Fatalf("acted on a set whose stored revisions are corrupt: %v", r.eff.calls)
	}
	if d, ok := r.c.sets.get(r.key); !ok || !strings.Contains(d.Error, "web-1") {
		t.Fatalf("the set's view does not name the corrupt key: %+v", d.Error)
	}
}

// TestActRunsAPrefix: once a step meets a wait, nothing after its group
// runs in the pass, whatever the action and ordinal (the filter that once
// chose which later actions could go on had a bug of its own: it let an
// ExpandVolume or a CheckDisruption of the held ordinal through). The
// reconciler decides again with the wait in the set's memory.
func TestActRunsAPrefix(t *testing.T) {
	r := newSyncRig(t, parentJob("web", map[string]string{"statefulset_replicas": "3"}, "v1"))
	r.eff.hold["CreateVolume 1"] = &waitError{reason: reconciler.HoldUnknownClass, msg: "no such class"}
	p := &pass{key: r.key, st: r.c.sets.of(r.key), now: r.now}
	out := reconciler.Output{Actions: []reconciler.Action{
		{Type: reconciler.ActionCreateVolume, Ordinal: 0},
		{Type: reconciler.ActionCreateVolume, Ordinal: 1},
		{Type: reconciler.ActionExpandVolume, Ordinal: 1},
		{Type: reconciler.ActionCreateVolume, Ordinal: 2},
		{Type: reconciler.ActionCreateRevision},
	}}
	res, err := r.c.act(context.Background(), p, out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"CreateVolume 0"}; !slices.Equal(r.eff.calls, want) {
		t.Fatalf("carried out %v, want %v", r.eff.calls, want)
	}
	if len(res.held) != 1 || res.held[0].Reason != reconciler.HoldUnknownClass || res.held[0].Until != r.now.Add(reconciler.UnknownClassRetry) {
		t.Fatalf("held %+v, want UnknownClass for the policy's %s", res.held, reconciler.UnknownClassRetry)
	}
	if hs := p.st.memory.Holds; len(hs) != 1 || hs[0].Ordinal != 1 || hs[0].Step != reconciler.StepCreate {
		t.Fatalf("the set's memory holds %+v", hs)
	}
}

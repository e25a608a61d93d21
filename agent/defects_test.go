package agent

import (
	"context"
	"errors"
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
// once Nomad has taken the purge.
func TestCrashCountedOnceItsPurgeSucceeds(t *testing.T) {
	ctx := context.Background()
	sim := nomadsim.NewNomad(fastSim())
	t.Cleanup(sim.Close)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	control := &podControl{log: hclog.NewNullLogger(), nomad: nomad.NewCluster(sim), clock: func() time.Time { return now }, expectTTL: time.Minute}
	st := &setState{}
	failed := reconciler.Pod{Ordinal: 0, Phase: reconciler.PhaseFailed, AllTerminal: true}
	act := reconciler.Action{Type: reconciler.ActionDeletePod, Ordinal: 0, Pod: failed, Cause: reconciler.CauseEnded, Purge: true}
	p := &pass{key: key, st: st, now: now, obs: nomad.Observation{Pods: []nomad.PodDetail{{Pod: failed, JobID: "web-0"}}}}
	if _, err := sim.RegisterJob(ctx, parentJob("web-0", nil, "v1"), false, 0); err != nil {
		t.Fatal(err)
	}

	sim.FailVerb(nomad.VerbDeregisterJob, 2, nomadsim.ServerError())
	for i := 0; i < 2; i++ {
		if _, err := control.execute(ctx, p, act); err == nil {
			t.Fatal("the purge did not fail as injected")
		}
	}
	if n := st.crashes[0].count; n != 0 {
		t.Fatalf("two failed purges counted %d crashes, want none", n)
	}
	if _, err := control.execute(ctx, p, act); err != nil {
		t.Fatal(err)
	}
	if n := st.crashes[0].count; n != 1 {
		t.Fatalf("the purge that went through counted %d crashes, want 1", n)
	}
}

// TestPostReadyCallsAreBounded: a pass used to start one goroutine, and one
// hook call, per pod whose post_ready hooks were due, however many; a set
// of a thousand fresh pods started a thousand calls at once. No more than
// maxPostReadyCalls run at once now, and every pod is still asked.
func TestPostReadyCallsAreBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := backend.SetKey{Namespace: "default", Name: "web"}
	var running, peak, asked atomic.Int64
	var mu sync.Mutex
	c := &controller{
		log: hclog.NewNullLogger(), clock: func() time.Time { return now }, sets: newSetStates(nil),
		hooks: hookFunc(func(context.Context, plugin.Event, plugin.Pod) plugin.HookResult {
			n := running.Add(1)
			mu.Lock()
			peak.Store(max(peak.Load(), n))
			mu.Unlock()
			time.Sleep(time.Millisecond) // long enough for the calls to overlap
			running.Add(-1)
			asked.Add(1)
			return plugin.HookResult{Proceed: true}
		}),
	}
	const pods = 5 * maxPostReadyCalls
	var obs nomad.Observation
	for i := 0; i < pods; i++ {
		d := nomad.PodDetail{
			Pod:   reconciler.Pod{Ordinal: i, Phase: reconciler.PhaseRunning},
			JobID: reconciler.PodName("web", i), AllocID: "a" + reconciler.PodName("web", i),
			Facts: reconciler.ReadinessFacts{Alloc: reconciler.AllocFacts{Live: true, HealthKnown: true, Healthy: true, HealthTime: now}},
		}
		d.Judge()
		obs.Pods = append(obs.Pods, d)
	}
	c.gatePostReady(context.Background(), c.sets.of(key), key, obs, now)
	if got := asked.Load(); got != pods {
		t.Fatalf("%d of %d pods asked", got, pods)
	}
	if got := peak.Load(); got > maxPostReadyCalls {
		t.Fatalf("%d hook calls ran at once, over the bound of %d", got, maxPostReadyCalls)
	}
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

// TestHeldStepHoldsEveryLaterActionOfItsOrdinal: once a step of an ordinal
// is held, none of that ordinal's later actions runs in the pass (an
// expansion of a volume that could not be made, a switchover or a check
// about a pod whose step waits), while other ordinals' actions and the
// revision and record actions go on. It used to name four action types
// only, and let an ExpandVolume or a CheckDisruption through.
func TestHeldStepHoldsEveryLaterActionOfItsOrdinal(t *testing.T) {
	held := map[int]bool{2: true}
	for _, tc := range []struct {
		typ     reconciler.ActionType
		ordinal int
		want    bool
	}{
		{reconciler.ActionExpandVolume, 2, true},
		{reconciler.ActionCreatePod, 2, true},
		{reconciler.ActionCheckDisruption, 2, true},
		{reconciler.ActionSwitchover, 2, true},
		{reconciler.ActionRestoreCount, 2, true},
		{reconciler.ActionExpandVolume, 1, false},
		{reconciler.ActionCreateRevision, 2, false},
		{reconciler.ActionRecordOrdinals, 2, false},
		{reconciler.ActionDeleteSetState, 0, true},
	} {
		if got := dependsOnHeld(reconciler.Action{Type: tc.typ, Ordinal: tc.ordinal}, held, 1); got != tc.want {
			t.Errorf("%s of ordinal %d after ordinal 2 was held: waits %v, want %v", tc.typ, tc.ordinal, got, tc.want)
		}
	}
}

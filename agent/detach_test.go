package agent

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// A parent that stops being annotated detaches its set (DESIGN §1): the
// agent writes nothing to Nomad while it stays so, through an agent restart
// (a new leader, which learns of the set only from the listing) and a purge
// of the unannotated parent, and annotating it again adopts every child as
// it is. The set has whenDeleted = Delete: had any of these deleted it, its
// volumes would be gone.
func TestAgentDetachesAParentThatLostItsAnnotation(t *testing.T) {
	for name, meta := range map[string]func(map[string]string){
		"mistyped True": func(m map[string]string) { m["statefulset"] = "True" },
		"mistyped yes":  func(m map[string]string) { m["statefulset"] = "yes" },
		"key removed":   func(m map[string]string) { delete(m, "statefulset") },
	} {
		t.Run(name, func(t *testing.T) {
			sim := nomadsim.NewNomad(fastSim())
			t.Cleanup(sim.Close)
			store := memory.NewStore()
			h := &harness{t: t, sim: sim, store: store}
			h.agent, h.stop = runAgent(t, testOptions(t, sim, store))
			annotated := parentJob("db", map[string]string{"statefulset_replicas": "3",
				"statefulset_volume_retention_when_deleted": "Delete", "statefulset_volume_retention_when_scaled": "Delete"}, "v1")
			h.register(annotated)
			h.waitConverged("db", 3, nil)
			key := backend.SetKey{Namespace: "default", Name: "db"}
			indexes := childIndexes(t, sim, "db", 3)
			volumes := len(sim.HostVolumes())

			unannotated := *annotated
			unannotated.Meta = maps.Clone(annotated.Meta)
			meta(unannotated.Meta)
			h.register(&unannotated)
			writes := sim.Writes()
			waitDetached(h, key, true)
			h.waitFor("the Detached event", 10*time.Second, func() (bool, string) {
				d := h.view("db")
				return hasEvent(d, string(reconciler.ConditionDetached)), fmt.Sprintf("%+v", d.Events)
			})

			// A new leader, which knows the set only from what Nomad lists.
			h.stop()
			h.agent, h.stop = runAgent(t, testOptions(t, sim, store))
			h.waitFor("the new leader to announce the set detached", 10*time.Second, func() (bool, string) {
				d := h.view("db")
				return hasEvent(d, string(reconciler.ConditionDetached)), fmt.Sprintf("%+v", d.Events)
			})

			// The unannotated parent is purged: still nothing is deleted.
			if err := sim.DeregisterJob(context.Background(), "default", "db", true); err != nil {
				t.Fatal(err)
			}
			writes++
			h.waitFor("the purge to be seen", 10*time.Second, func() (bool, string) {
				st, _, _ := store.GetStatus(context.Background(), key)
				c := conditionOf(st, reconciler.ConditionDetached)
				return c.Reason == reconciler.ReasonParentGoneWhileDetached, fmt.Sprintf("%+v", c)
			})
			time.Sleep(200 * time.Millisecond) // a pass that would act has had time to
			if got := sim.Writes(); got != writes {
				t.Fatalf("a detached set got %d Nomad writes (calls %v); want none", got-writes, sim.Calls())
			}
			if got := childIndexes(t, sim, "db", 3); !maps.Equal(got, indexes) {
				t.Fatalf("children changed while detached: %v, were %v", got, indexes)
			}
			if n := len(sim.HostVolumes()); n != volumes {
				t.Fatalf("%d volumes left of %d", n, volumes)
			}

			// Annotated again: adopted as it runs.
			h.register(annotated)
			waitDetached(h, key, false)
			h.waitConverged("db", 3, nil)
			if got := childIndexes(t, sim, "db", 3); !maps.Equal(got, indexes) {
				t.Fatalf("adopting re-registered children: %v, were %v", got, indexes)
			}
			// The status write is the pass's last action, and the event is
			// announced once the pass records its outcome, just after it.
			h.waitFor("the Adopted event", 10*time.Second, func() (bool, string) {
				d := h.view("db")
				return hasEvent(d, "Adopted"), fmt.Sprintf("%+v", d.Events)
			})
			revs, err := store.ListRevisions(context.Background(), key)
			if err != nil || len(revs) != 1 {
				t.Fatalf("revisions after adoption: %+v (%v), want the one kept", revs, err)
			}
		})
	}
}

// childIndexes returns the JobModifyIndex of each child of set, by job ID.
func childIndexes(t *testing.T, sim *nomadsim.Nomad, set string, n int) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for ord := 0; ord < n; ord++ {
		id := fmt.Sprintf("%s-%d", set, ord)
		j := sim.Job("default", id)
		if j == nil {
			t.Fatalf("child %s is gone", id)
		}
		out[id] = *j.JobModifyIndex
	}
	return out
}

// waitDetached waits until the stored status of key says detached (or not).
func waitDetached(h *harness, key backend.SetKey, detached bool) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("the set to be detached=%v", detached), 10*time.Second, func() (bool, string) {
		st, _, err := h.store.GetStatus(context.Background(), key)
		return err == nil && reconciler.StatusDetached(st) == detached, fmt.Sprintf("%+v %v", st.Conditions, err)
	})
}

// conditionOf returns st's condition of type typ (zero when absent).
func conditionOf(st reconciler.Status, typ reconciler.ConditionType) reconciler.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return reconciler.Condition{}
}

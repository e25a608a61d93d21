package reconciler

import (
	"testing"
	"time"
)

// baseInput is a converged 3-replica OrderedReady set at revision v1.
func baseInput() Input {
	v1 := Revision{Name: revName("web", "v1"), Hash: HashRevision([]byte("v1"), 0), Number: 1, Data: []byte("v1")}
	in := Input{
		Spec:         Spec{Name: "web", Replicas: 3, VolumeClaims: []string{"data"}, ProgressDeadline: time.Minute},
		TemplateData: []byte("v1"),
		Revisions:    []Revision{v1},
		Previous:     Status{CurrentRevision: v1.Name, UpdateRevision: v1.Name},
		Now:          epoch.Add(time.Hour),
	}
	for o := 0; o < 3; o++ {
		in.Pods = append(in.Pods, Pod{Ordinal: o, Revision: v1.Name, Phase: PhaseRunning, Ready: true,
			Created: epoch, ReadySince: epoch})
		in.Volumes = append(in.Volumes, Volume{Claim: "data", Ordinal: o, Name: VolumeName("data", "web", o)})
		in.Previous.Ordinals = append(in.Previous.Ordinals, OrdinalRecord{Ordinal: o, Revision: v1.Name, RevisionNumber: 1})
	}
	return in
}

func safe(t *testing.T, in Input) Output {
	t.Helper()
	out, err := checkSafety(in)
	if err != nil {
		t.Fatalf("%v\nactions: %+v", err, out.effects())
	}
	return out
}

func TestBadObservations(t *testing.T) {
	t.Run("steady input has no actions", func(t *testing.T) {
		if out := safe(t, baseInput()); len(out.effects()) != 0 {
			t.Fatalf("actions %+v", out.effects())
		}
	})
	t.Run("duplicate pods: the extra is deleted, nothing created", func(t *testing.T) {
		in := baseInput()
		extra := Pod{Ordinal: 1, Revision: "web-other", Phase: PhasePending, Created: epoch.Add(time.Minute)}
		in.Pods = append(in.Pods, extra)
		out := safe(t, in)
		if len(out.effects()) != 1 || out.effects()[0].Type != ActionDeletePod || out.effects()[0].Pod != extra {
			t.Fatalf("want the extra pod deleted, got %+v", out.effects())
		}
		if c := condition(out.Status, ConditionProgressing); c.Reason == ReasonComplete {
			t.Fatalf("complete with a duplicate: %+v", c)
		}
	})
	t.Run("duplicate pods both terminating: wait", func(t *testing.T) {
		in := baseInput()
		in.Pods[1].Terminating = true
		in.Pods = append(in.Pods, Pod{Ordinal: 1, Revision: in.Pods[1].Revision, Phase: PhaseRunning, Terminating: true})
		in.Spec.PodManagementPolicy = Parallel
		if out := safe(t, in); len(out.effects()) != 0 {
			t.Fatalf("actions %+v", out.effects())
		}
	})
	t.Run("unknown revision: replaced by the rolling update, not repaired", func(t *testing.T) {
		in := baseInput()
		in.Pods[2].Revision = "web-unknown"
		in.Pods[2].Drifted = true
		out := safe(t, in)
		if len(out.effects()) != 1 || out.effects()[0].Type != ActionDeletePod || out.effects()[0].Ordinal != 2 {
			t.Fatalf("actions %+v", out.effects())
		}
	})
	t.Run("garbage phase is treated as not running", func(t *testing.T) {
		in := baseInput()
		in.Pods[0].Phase = "Exploded"
		in.Pods[0].Ready = true
		out := safe(t, in)
		if len(out.effects()) != 0 || out.Status.ReadyReplicas != 2 {
			t.Fatalf("actions %+v, ready %d", out.effects(), out.Status.ReadyReplicas)
		}
	})
	t.Run("negative ordinal is ignored", func(t *testing.T) {
		in := baseInput()
		in.Pods = append(in.Pods, Pod{Ordinal: -1, Revision: "x", Phase: PhaseRunning})
		out := safe(t, in)
		if len(out.effects()) != 0 || out.Status.Replicas != 3 {
			t.Fatalf("actions %+v, replicas %d", out.effects(), out.Status.Replicas)
		}
	})
	t.Run("ordinal far out of range is condemned", func(t *testing.T) {
		in := baseInput()
		in.Pods = append(in.Pods, Pod{Ordinal: 1 << 40, Revision: "x", Phase: PhaseRunning, Ready: true, ReadySince: epoch})
		out := safe(t, in)
		if len(out.effects()) != 1 || out.effects()[0].Type != ActionDeletePod || out.effects()[0].Ordinal != 1<<40 {
			t.Fatalf("actions %+v", out.effects())
		}
	})
	t.Run("previous current revision unknown", func(t *testing.T) {
		in := baseInput()
		in.Previous.CurrentRevision = "web-gone"
		out := safe(t, in)
		if out.Status.CurrentRevision != in.Revisions[0].Name || len(out.effects()) != 0 {
			t.Fatalf("status %+v actions %+v", out.Status, out.effects())
		}
	})
	t.Run("absurd spec values", func(t *testing.T) {
		in := baseInput()
		in.Spec.Replicas = 1 << 62
		in.Spec.OrdinalsStart = -5
		in.Spec.Partition = -1
		in.Spec.MaxUnavailable = IntOrPercent{Value: -3, Percent: true}
		in.Spec.RevisionHistoryLimit = -1
		in.Spec.PodManagementPolicy = "Sideways"
		out := safe(t, in)
		if countActions(out, ActionCreatePod) != 1 || out.effects()[len(out.effects())-1].Ordinal != 3 {
			t.Fatalf("want one OrderedReady create of pod 3, got %d actions", len(out.effects()))
		}
	})
	t.Run("ready without ReadySince under minReadySeconds is not available", func(t *testing.T) {
		in := baseInput()
		in.Spec.MinReadySeconds = 5
		in.Pods[0].ReadySince = time.Time{}
		out := safe(t, in)
		if out.Status.AvailableReplicas != 2 || len(out.effects()) != 0 {
			t.Fatalf("available %d, actions %+v", out.Status.AvailableReplicas, out.effects())
		}
	})
	t.Run("empty input", func(t *testing.T) {
		out := safe(t, Input{})
		if countActions(out, ActionCreateRevision) != 1 || countActions(out, ActionCreatePod) != 0 {
			t.Fatalf("actions %+v", out.effects())
		}
	})
	t.Run("deleted set with pods at odd ordinals", func(t *testing.T) {
		in := baseInput()
		in.Spec.Deleted = true
		in.Spec.WhenDeleted = Delete
		in.Pods = append(in.Pods, Pod{Ordinal: -4, Phase: "??"}, Pod{Ordinal: 9, Terminating: true})
		out := safe(t, in)
		if len(out.effects()) != 0 {
			t.Fatalf("OrderedReady teardown must wait for the terminating highest pod: %+v", out.effects())
		}
	})
}

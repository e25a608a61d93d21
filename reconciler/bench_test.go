package reconciler

import (
	"testing"
)

// steadyInput is the observation of a converged set: every pod ready at the
// one revision, volumes present, status recorded. This is what almost every
// reconcile in a running cluster sees.
func steadyInput(b *testing.B, replicas int) Input {
	w := newWorld(Spec{Replicas: replicas, PodManagementPolicy: Parallel, VolumeClaims: []string{"data"},
		ProgressDeadline: 600e9}, "template")
	for i := 0; i < 50 && !w.converged(); i++ {
		if err := w.step(); err != nil {
			b.Fatal(err)
		}
		w.advanceAll()
	}
	if !w.converged() {
		b.Fatal("not converged")
	}
	if err := w.step(); err != nil {
		b.Fatal(err)
	}
	in := w.input()
	if out := Reconcile(in); len(out.Actions) != 0 {
		b.Fatalf("steady state has actions: %+v", out.Actions)
	}
	return in
}

func benchmarkSteady(b *testing.B, replicas int) {
	in := steadyInput(b, replicas)
	loop(b, in)
}

// loop times Reconcile(in), reporting allocations and the CPU time per op
// (cpu-ns/op) as well as the wall time.
func loop(b *testing.B, in Input) {
	b.ReportAllocs()
	cpu := processCPUTime()
	for b.Loop() {
		Reconcile(in)
	}
	b.ReportMetric(float64(processCPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkReconcileSteady10 is the goal of issue 2: <= 5µs, <= 10 allocs.
func BenchmarkReconcileSteady10(b *testing.B) { benchmarkSteady(b, 10) }

// BenchmarkReconcileSteady1000 is the goal of issue 2: <= 500µs.
func BenchmarkReconcileSteady1000(b *testing.B) { benchmarkSteady(b, 1000) }

// BenchmarkReconcileRollout1000 decides the first step of a rollout of a
// 1,000-replica set to a new template (a new revision, maxUnavailable 10%).
func BenchmarkReconcileRollout1000(b *testing.B) {
	in := steadyInput(b, 1000)
	in.TemplateData = []byte("template-v2")
	in.Spec.MaxUnavailable = IntOrPercent{Value: 10, Percent: true}
	if n := countActions(Reconcile(in), ActionDeletePod); n != 100 {
		b.Fatalf("rollout deletes %d pods, want 100", n)
	}
	loop(b, in)
}

// BenchmarkReconcileCreate1000 decides the creation of a 1,000-replica
// Parallel set from nothing (1,000 volumes and 1,000 pods).
func BenchmarkReconcileCreate1000(b *testing.B) {
	in := Input{Spec: Spec{Name: "web", Replicas: 1000, PodManagementPolicy: Parallel, VolumeClaims: []string{"data"}},
		TemplateData: []byte("template"), Now: epoch}
	loop(b, in)
}

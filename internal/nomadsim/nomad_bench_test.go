package nomadsim

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// The benchmarks measure the simulation's own cost per call, so that agent
// benchmarks run on it can subtract it, and its footprint at the scales the
// agent is benchmarked at.

// populate registers sets × children child jobs, each with its own host
// volume, and lets every allocation become healthy.
func populate(b *testing.B, sets, children int) *Nomad {
	b.Helper()
	s := NewNomad(NomadConfig{Manual: true})
	ctx := context.Background()
	for i := 0; i < sets; i++ {
		for c := 0; c < children; c++ {
			pod := fmt.Sprintf("set%d-%d", i, c)
			if _, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-" + pod}); err != nil {
				b.Fatal(err)
			}
			j := withVolume(testJob(pod), "data-"+pod)
			j.Meta["statefulset_parent"] = fmt.Sprintf("set%d", i)
			if _, err := s.RegisterJob(ctx, j, true, 0); err != nil {
				b.Fatal(err)
			}
		}
		s.Advance(0)
	}
	s.Settle()
	return s
}

func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// BenchmarkScale builds sets × 10 healthy children with volumes, and
// reports the heap the simulation holds and the cost of one full re-list
// (ListJobs of everything).
func BenchmarkScale(b *testing.B) {
	for _, sets := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("sets=%d", sets), func(b *testing.B) {
			before := heapMB()
			s := populate(b, sets, 10)
			heap := heapMB() - before
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				jobs, _, err := s.ListJobs(ctx, "*")
				if err != nil || len(jobs) != sets*10 {
					b.Fatalf("%d jobs, %v", len(jobs), err)
				}
			}
			b.StopTimer()
			b.ReportMetric(heap, "heap-MB")
			runtime.KeepAlive(s)
			s.Close()
		})
	}
}

func BenchmarkGetJob(b *testing.B) {
	s := populate(b, 100, 10)
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.GetJob(ctx, "default", "set7-3"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkListHostVolumes(b *testing.B) {
	s := populate(b, 100, 10)
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.ListHostVolumes(ctx, "default", "data-set7-"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegisterJob is one check-and-set update of a child job: the call
// alone, the scheduler's work left queued.
func BenchmarkRegisterJob(b *testing.B) { benchmarkRevisions(b, false) }

// BenchmarkRolloutLifecycle is one revision of a child end to end: the
// register, the plan, the old allocation stopping, the new one starting
// and becoming healthy, the deployment settling.
func BenchmarkRolloutLifecycle(b *testing.B) { benchmarkRevisions(b, true) }

// benchmarkRevisions registers a new revision of one child per iteration,
// and with settle runs the scheduler and clients to rest after each.
func benchmarkRevisions(b *testing.B, settle bool) {
	s := NewNomad(NomadConfig{Manual: true})
	defer s.Close()
	ctx := context.Background()
	j := testJob("web-0")
	resp, err := s.RegisterJob(ctx, j, true, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j.Meta["statefulset_revision"] = fmt.Sprint(i)
		resp, err = s.RegisterJob(ctx, j, true, resp.JobModifyIndex)
		if err != nil {
			b.Fatal(err)
		}
		if !settle {
			continue
		}
		s.Settle()
		if i%1000 == 999 {
			s.GC()
		}
	}
}

// BenchmarkEventStream measures events delivered to one subscriber per
// second while writes publish them, in typed and JSON payload modes.
func BenchmarkEventStream(b *testing.B) {
	for _, jsonPayloads := range []bool{false, true} {
		b.Run(fmt.Sprintf("json=%v", jsonPayloads), func(b *testing.B) {
			s := NewNomad(NomadConfig{Manual: true, JSONPayloads: jsonPayloads})
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := s.Events(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			j := testJob("web-0")
			done := make(chan int)
			b.ResetTimer()
			go func() {
				n := 0
				for ev := range ch {
					n += len(ev.Events)
					if n >= b.N {
						break
					}
				}
				done <- n
			}()
			for i := 0; i < b.N; i++ {
				j.Meta["statefulset_revision"] = fmt.Sprint(i)
				if _, err := s.RegisterJob(ctx, j, false, 0); err != nil {
					b.Fatal(err)
				}
			}
			n := <-done
			b.StopTimer()
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

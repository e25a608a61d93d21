package agent

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// streamScaleReplicas is the size of each set in BenchmarkEventStreamAtScale:
// issue 28's 200 sets × 5 (1,000 children) and 1,000 × 5 (5,000).
const streamScaleReplicas = 5

// BenchmarkEventStreamAtScale is issue 28's question on the simulated Nomad:
// does the agent read Nomad's event stream fast enough when every child of
// 1,000 (or 5,000) is created at once, and then rolled at once? The
// simulator keeps Nomad's default event buffer of 100 indexes and, as
// Nomad's broker does, ends the subscription of a reader that falls
// further behind ("event dropped from buffer"); each such loss is a
// re-list. One op is the whole scenario (create, then roll every set);
// the figures are the reported metrics:
//   - create-s, rollout-s: wall time until every set is ready at its new
//     revision;
//   - create-drops, rollout-drops: streams lost to the buffer in each
//     phase, and create-resets, rollout-resets the streams lost for any
//     reason;
//   - rollout-getjob/child: GetJob calls of the rollout per child (the
//     goal is at most one, and none on the stream's path: the watcher asks
//     for a stopped child's fate from its settle goroutine);
//   - create-calls/child, rollout-calls/child: every Nomad call per child;
//   - create-indexes/s, rollout-indexes/s: the Raft indexes the simulator
//     made per second in each phase, which is how fast the reader must
//     keep up (Nomad's buffer holds 100 of them);
//   - create-relists, rollout-relists: full re-lists of Nomad for any
//     reason (a lost stream, or the controller's request when a write was
//     not seen in time or met a conflict).
//
// NSS_BENCH_LOG=warn shows the agent's warnings, which say why it re-listed.
// NSS_BENCH_STREAM_STALL=100ms holds the simulator's events for that long
// once a second (a busy Nomad encoding the stream late), and
// NSS_BENCH_UNPACED=1 keeps the agent's writes from waiting for the
// stream (create-holds, rollout-holds count the writes that did), and
// NSS_BENCH_PACE_BUFFER sets the event_buffer_size they are paced by
// (default 100, the simulator's). NSS_BENCH_STREAM_RATE=1000 lets the
// agent's stream carry at most that many batches a second (a slow link,
// or a busy server).
// NSS_BENCH_STREAM_SETS (a comma list, default 200,1000) picks the sizes.
func BenchmarkEventStreamAtScale(b *testing.B) {
	if os.Getenv("NSS_BENCH_SIM_SERVE") != "" {
		serveBenchSim()
	}
	b.Setenv("NSS_BENCH_DROP_SLOW", "1")
	sizes := []int{200, 1000}
	if v := os.Getenv("NSS_BENCH_STREAM_SETS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NSS_BENCH_STREAM_SETS=%q: want a comma list of positive set counts", v)
			}
			sizes = append(sizes, n)
		}
	}
	for _, sets := range sizes {
		b.Run(fmt.Sprintf("children=%d", sets*streamScaleReplicas), func(b *testing.B) {
			var r streamScaleResult
			for i := 0; i < b.N; i++ {
				r = runStreamScale(b, sets)
			}
			children := float64(sets * streamScaleReplicas)
			b.ReportMetric(r.create.Seconds(), "create-s")
			b.ReportMetric(r.rollout.Seconds(), "rollout-s")
			b.ReportMetric(float64(r.createResets[nomad.ResetBufferOverflow]), "create-drops")
			b.ReportMetric(float64(r.rolloutResets[nomad.ResetBufferOverflow]), "rollout-drops")
			b.ReportMetric(float64(sumResets(r.createResets)), "create-resets")
			b.ReportMetric(float64(sumResets(r.rolloutResets)), "rollout-resets")
			b.ReportMetric(float64(r.rolloutCalls["GetJob"])/children, "rollout-getjob/child")
			b.ReportMetric(float64(sumCalls(r.createCalls)-sets)/children, "create-calls/child")
			b.ReportMetric(float64(sumCalls(r.rolloutCalls)-sets)/children, "rollout-calls/child")
			b.ReportMetric(r.createIndexRate, "create-indexes/s")
			b.ReportMetric(r.rolloutIndexRate, "rollout-indexes/s")
			b.ReportMetric(float64(r.createHolds), "create-holds")
			b.ReportMetric(float64(r.rolloutHolds), "rollout-holds")
			b.ReportMetric(float64(r.createRelists), "create-relists")
			b.ReportMetric(float64(r.rolloutRelists), "rollout-relists")
			b.Logf("children=%d: create %v, resets %v, calls %v; rollout %v, resets %v, calls %v",
				int(children), r.create.Round(time.Millisecond), r.createResets, r.createCalls,
				r.rollout.Round(time.Millisecond), r.rolloutResets, r.rolloutCalls)
		})
	}
}

// streamScaleResult is one run of BenchmarkEventStreamAtScale.
type streamScaleResult struct {
	create, rollout               time.Duration
	createResets, rolloutResets   map[string]uint64
	createCalls, rolloutCalls     map[string]int
	createRelists, rolloutRelists int64
	// createIndexRate and rolloutIndexRate are the simulator's Raft
	// indexes per second in each phase.
	createIndexRate, rolloutIndexRate float64
	// createHolds and rolloutHolds count the writes held for the event
	// stream (StreamPacer) in each phase.
	createHolds, rolloutHolds uint64
}

func runStreamScale(b *testing.B, sets int) streamScaleResult {
	b.Helper()
	var r streamScaleResult
	sim := startBenchSim(b)
	defer sim.Close()
	api := sim.api()
	if os.Getenv("NSS_BENCH_UNPACED") == "1" {
		api = unpacedAPI{api}
	}
	stall := benchStreamStall(b, sim)
	if rate := benchStreamRate(b); rate > 0 {
		api = &slowStream{API: api, perBatch: time.Second / time.Duration(rate)}
	}
	a, c, stop := runBenchAgent(b, api)
	defer stop()
	// from is each set's update revision before a phase: a phase has
	// ended once every set is rolled to another one.
	from := map[string]string{}
	phase := func(image string) (time.Duration, map[string]uint64, map[string]int, int64, float64, uint64) {
		resets0, relists0, index0 := c.watcher().Resets(), c.watcher().Relists(), sim.Index()
		holds0 := a.nomad.WritePacing().Holds
		sim.ResetCalls()
		stalls := make(chan struct{})
		stalled := stallEverySecond(sim, stall, stalls)
		t0 := time.Now()
		for i := 0; i < sets; i++ {
			j := parentJob(fmt.Sprintf("set%05d", i), map[string]string{
				"statefulset_replicas":              strconv.Itoa(streamScaleReplicas),
				"statefulset_pod_management_policy": "Parallel",
				"statefulset_max_unavailable":       "100%",
			}, image)
			if _, err := sim.api().RegisterJob(context.Background(), j, false, 0); err != nil {
				b.Fatal(err)
			}
		}
		waitUntil(b, fmt.Sprintf("%d sets at %q", sets, image), 30*time.Minute, 20*time.Millisecond, func() bool {
			return allRolled(c, sets, streamScaleReplicas, from)
		})
		took := time.Since(t0)
		close(stalls)
		<-stalled
		for _, d := range c.sets.list().Sets {
			d, _ := c.sets.get(backend.SetKey{Namespace: d.Namespace, Name: d.Name})
			from[d.Name] = d.Status.UpdateRevision
		}
		resets := c.watcher().Resets()
		for reason, n := range resets0 {
			resets[reason] -= n
		}
		rate := float64(sim.Index()-index0) / took.Seconds()
		return took, resets, sim.Calls(), c.watcher().Relists() - relists0, rate, a.nomad.WritePacing().Holds - holds0
	}
	r.create, r.createResets, r.createCalls, r.createRelists, r.createIndexRate, r.createHolds = phase("v1")
	r.rollout, r.rolloutResets, r.rolloutCalls, r.rolloutRelists, r.rolloutIndexRate, r.rolloutHolds = phase("v2")
	return r
}

// allRolled reports whether every set has its replicas ready at one
// revision, its update revision, and that revision is not the one it had
// before (from, by set name): a create or a rollout has ended.
func allRolled(c *controller, sets, replicas int, from map[string]string) bool {
	return everySet(c, sets, func(name string, st client.Status) bool {
		return st.UpdateRevision != from[name] && st.Replicas == replicas && st.ReadyReplicas == replicas &&
			st.UpdatedReplicas == replicas && st.CurrentRevision == st.UpdateRevision
	})
}

func sumResets(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// unpacedAPI hides the simulator's write indexes (nomad.WriteIndexer)
// from the agent, whose writes then never wait for the event stream
// (NSS_BENCH_UNPACED=1): the benchmark's control.
type unpacedAPI struct{ nomad.API }

// benchStreamStall reads NSS_BENCH_STREAM_STALL: how long the simulator
// holds its events once a second during each phase, as a busy Nomad
// encodes the stream late (0: never).
func benchStreamStall(b *testing.B, sim *benchSim) time.Duration {
	b.Helper()
	v := os.Getenv("NSS_BENCH_STREAM_STALL")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d >= time.Second {
		b.Fatalf("NSS_BENCH_STREAM_STALL=%q: want a duration between 0 and 1s, such as 100ms", v)
	}
	if sim.local == nil {
		b.Fatalf("NSS_BENCH_STREAM_STALL needs the simulator in this process (NSS_BENCH_SIM=inprocess), which it pauses")
	}
	return d
}

// stallEverySecond holds sim's events for stall once a second until stop
// is closed; the returned channel closes once the events flow again.
func stallEverySecond(sim *benchSim, stall time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	if stall == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sim.local.PauseEvents()
			select {
			case <-stop:
			case <-time.After(stall):
			}
			sim.local.ResumeEvents()
		}
	}()
	return done
}

// benchStreamRate reads NSS_BENCH_STREAM_RATE: at most how many event
// batches (Raft indexes) a second the agent's stream carries, as across a
// slow link or from a busy server (0: as fast as it is read).
func benchStreamRate(b *testing.B) int {
	b.Helper()
	v := os.Getenv("NSS_BENCH_STREAM_RATE")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("NSS_BENCH_STREAM_RATE=%q: want a positive number of batches a second", v)
	}
	return n
}

// slowStream relays each event stream at most one batch every perBatch:
// Nomad's subscription then trails its buffer's head as it does behind a
// slow reader, and drops the stream when it falls a buffer behind.
type slowStream struct {
	nomad.API
	perBatch time.Duration
}

// LastWriteIndex passes the simulator's on, unless it is hidden
// (NSS_BENCH_UNPACED).
func (s *slowStream) LastWriteIndex() uint64 {
	if w, ok := s.API.(nomad.WriteIndexer); ok {
		return w.LastWriteIndex()
	}
	return 0
}

// Events implements nomad.API.
func (s *slowStream) Events(ctx context.Context, index uint64) (<-chan *api.Events, error) {
	in, err := s.API.Events(ctx, index)
	if err != nil {
		return nil, err
	}
	out := make(chan *api.Events)
	go func() {
		defer close(out)
		next := time.Now()
		for evs := range in {
			// Sleep in steps of a millisecond or more: the timer's
			// resolution, and the rate stays exact on average.
			next = next.Add(s.perBatch)
			if d := time.Until(next); d >= time.Millisecond {
				time.Sleep(d)
			}
			select {
			case out <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

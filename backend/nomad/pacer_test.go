package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// TestStreamPacerHoldsWritesThatOutrunTheStream: a write waits while the
// followed stream trails the newest write, the writes in flight counted,
// by a quarter of the buffer or more, and goes as soon as the stream
// catches up, a write in flight returns, the stream is lost, or the hold's
// bound passes; a write never waits when no stream is followed.
func TestStreamPacerHoldsWritesThatOutrunTheStream(t *testing.T) {
	cases := []struct {
		name string
		// setup brings the pacer (buffer 20, limit 5) to the state under
		// test.
		setup func(p *nomad.StreamPacer)
		// release, when set, is done while a write waits, and must end
		// the wait without an error.
		release func(p *nomad.StreamPacer)
		// cancel ends the waiting write's context instead.
		cancel   bool
		wantHold bool
	}{
		{name: "no stream followed yet", setup: func(p *nomad.StreamPacer) { p.Wrote(100) }},
		{name: "within the limit", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(14) }},
		{name: "the stream catches up", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(16) },
			release: func(p *nomad.StreamPacer) { p.Saw(12) }, wantHold: true},
		{name: "writes in flight count as ahead", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(12); goAhead(p, 3) },
			release: func(p *nomad.StreamPacer) { p.Done(12) }, wantHold: true},
		{name: "writes in flight do not count without a stream", setup: func(p *nomad.StreamPacer) { p.Wrote(12); goAhead(p, 10) }},
		{name: "the stream is lost", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(40) },
			release: func(p *nomad.StreamPacer) { p.Lost() }, wantHold: true},
		{name: "the hold's bound passes", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(40); p.SetMaxHold(time.Millisecond) },
			wantHold: true},
		{name: "the write's context ends", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(40) },
			cancel: true, wantHold: true},
		{name: "a listing after a loss", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(40); p.Lost(); p.Follow(38) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := nomad.NewStreamPacer(20)
			if p.Limit() != 5 {
				t.Fatalf("limit %d with a buffer of 20, want 5", p.Limit())
			}
			tc.setup(p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Wait(ctx) }()
			if tc.wantHold {
				waitFor(t, "the write to be held", func() bool { n, _ := p.Holds(); return n == 1 })
			}
			switch {
			case tc.release != nil:
				tc.release(p)
			case tc.cancel:
				cancel()
			}
			err := <-done
			if tc.cancel != errors.Is(err, context.Canceled) {
				t.Fatalf("Wait returned %v, cancelled %v", err, tc.cancel)
			}
			if n, _ := p.Holds(); (n == 1) != tc.wantHold {
				t.Fatalf("%d holds, want held %v", n, tc.wantHold)
			}
		})
	}
}

// goAhead lets n writes go (Wait) and leaves them in flight.
func goAhead(p *nomad.StreamPacer, n int) {
	for range n {
		if err := p.Wait(context.Background()); err != nil {
			panic(err) // a background context never ends
		}
	}
}

// slowWrites is the simulated Nomad with registrations that take 5 ms.
type slowWrites struct{ *nomadsim.Nomad }

// RegisterJob implements nomad.API.
func (s slowWrites) RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	time.Sleep(5 * time.Millisecond)
	return s.Nomad.RegisterJob(ctx, job, enforce, modifyIndex)
}

// hideWriteIndex is an API that does not tell its writes' indexes, as any
// API that is not a WriteIndexer: the pacer never holds a write.
type hideWriteIndex struct{ nomad.API }

// TestPacedWritesKeepTheStream replays the burst that made a real Nomad
// drop the daemon's stream (issue 28): the stream stalls (here: the
// simulated Nomad holds its events) while writes go on, and Nomad, which
// keeps only its last event_buffer_size indexes (here 20), ends the
// subscription of a reader that falls further behind. Unpaced, the writes
// run 40 indexes ahead and the stream is lost: a reset and a re-list.
// Paced, the writers wait once they are a quarter of the buffer ahead,
// and go on when the stream moves again; nothing is lost and all 40 writes
// land. With 8 writers at once, as the agent's workers write, the writes
// in flight count: without them, each writer that found the stream within
// the limit would go, and 8 writers could run 7 indexes past it.
func TestPacedWritesKeepTheStream(t *testing.T) {
	const buffer, writes = 20, 40
	const limit = buffer / 4
	cases := []struct {
		paced   bool
		writers int
	}{{false, 1}, {true, 1}, {true, 8}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("paced=%v,writers=%d", tc.paced, tc.writers), func(t *testing.T) {
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true, EventBufferSize: buffer, DropSlowSubscribers: true})
			defer sim.Close()
			// Each write takes a while, as a real one does, so that the
			// writers' calls overlap.
			var a nomad.API = slowWrites{sim}
			if !tc.paced {
				a = hideWriteIndex{slowWrites{sim}}
			}
			cluster := nomad.NewCluster(a, nomad.WithEventBufferSize(buffer))
			term := cluster.NewTerm(backend.TermConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = term.Run(ctx) }()
			waitFor(t, "the first listing", func() bool { ok, _ := term.Healthy(); return ok })

			sim.PauseEvents()
			var landed, next atomic.Int64
			done := make(chan error, tc.writers)
			for range tc.writers {
				go func() {
					for i := next.Add(1) - 1; i < writes; i = next.Add(1) - 1 {
						if _, err := cluster.API().RegisterJob(ctx, parentOf(fmt.Sprintf("set%d", i)), false, 0); err != nil {
							done <- err
							return
						}
						landed.Add(1)
					}
					done <- nil
				}()
			}
			wait := func() {
				for range tc.writers {
					if err := <-done; err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.paced {
				// Every writer waits once the limit's writes are ahead
				// of the stalled stream; then no write is in flight.
				waitFor(t, "every writer held for the stream", func() bool { return cluster.WritePacing().Holds >= uint64(tc.writers) })
				if n := landed.Load(); n > limit {
					t.Fatalf("%d writes landed while the stream was stalled, want at most %d", n, limit)
				}
			} else {
				wait()
			}
			sim.ResumeEvents()
			if tc.paced {
				wait()
			}
			waitFor(t, "every write in the cache", func() bool {
				for i := range writes {
					if term.Observe(backend.SetKey{Namespace: "default", Name: fmt.Sprintf("set%d", i)}, nil, sim.Now()).Parent == nil {
						return false
					}
				}
				return true
			})
			lost := term.Resets()[nomad.ResetBufferOverflow]
			if tc.paced && lost != 0 {
				t.Fatalf("the paced writes lost the stream %d times", lost)
			}
			if !tc.paced && lost == 0 {
				t.Fatalf("the unpaced writes did not lose the stream: the test no longer shows what pacing prevents")
			}
		})
	}
}

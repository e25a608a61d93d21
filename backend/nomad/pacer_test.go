package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// TestStreamPacerHoldsWritesThatOutrunTheStream: a write waits while the
// followed stream trails the newest write by more than half the buffer,
// and goes as soon as the stream catches up, the stream is lost, or the
// hold's bound passes; a write never waits when no stream is followed.
func TestStreamPacerHoldsWritesThatOutrunTheStream(t *testing.T) {
	cases := []struct {
		name string
		// setup brings the pacer (buffer 10, limit 5) to the state under
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
		{name: "within the limit", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(15) }},
		{name: "the stream catches up", setup: func(p *nomad.StreamPacer) { p.Follow(10); p.Wrote(16) },
			release: func(p *nomad.StreamPacer) { p.Saw(11) }, wantHold: true},
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
			p := nomad.NewStreamPacer(10)
			if p.Limit() != 5 {
				t.Fatalf("limit %d with a buffer of 10, want 5", p.Limit())
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

// hideWriteIndex is an API that does not tell its writes' indexes, as any
// API that is not a WriteIndexer: the pacer never holds a write.
type hideWriteIndex struct{ nomad.API }

// TestPacedWritesKeepTheStream replays the burst that made a real Nomad
// drop the daemon's stream (issue 28): the stream stalls (here: the
// simulated Nomad holds its events) while writes go on, and Nomad, which
// keeps only its last event_buffer_size indexes (here 10), ends the
// subscription of a reader that falls further behind. Unpaced, the writes
// run 30 indexes ahead and the stream is lost: a reset and a re-list.
// Paced, the writer waits once it is half the buffer ahead, and goes on
// when the stream moves again; nothing is lost and all 30 writes land.
func TestPacedWritesKeepTheStream(t *testing.T) {
	const buffer, writes = 10, 30
	for _, paced := range []bool{false, true} {
		t.Run(fmt.Sprintf("paced=%v", paced), func(t *testing.T) {
			sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true, EventBufferSize: buffer, DropSlowSubscribers: true})
			defer sim.Close()
			var a nomad.API = sim
			if !paced {
				a = hideWriteIndex{sim}
			}
			cluster := nomad.NewCluster(a, nomad.WithEventBufferSize(buffer))
			term := cluster.NewTerm(backend.TermConfig{ResyncInterval: time.Hour}, hclog.NewNullLogger(), func(backend.SetKey) {})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = term.Run(ctx) }()
			waitFor(t, "the first listing", func() bool { ok, _ := term.Healthy(); return ok })

			sim.PauseEvents()
			var landed atomic.Int64
			done := make(chan error, 1)
			go func() {
				for i := range writes {
					if _, err := cluster.API().RegisterJob(ctx, parentOf(fmt.Sprintf("set%d", i)), false, 0); err != nil {
						done <- err
						return
					}
					landed.Add(1)
				}
				done <- nil
			}()
			if paced {
				waitFor(t, "a write held for the stream", func() bool { return cluster.WritePacing().Holds > 0 })
				// The limit's 5 writes ahead of the stream, and the one
				// that found the stream within it.
				if n := landed.Load(); n > int64(buffer/2+1) {
					t.Fatalf("%d writes landed while the stream was stalled, want at most %d", n, buffer/2+1)
				}
			} else if err := <-done; err != nil {
				t.Fatal(err)
			}
			sim.ResumeEvents()
			if paced {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
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
			if paced && lost != 0 {
				t.Fatalf("the paced writes lost the stream %d times", lost)
			}
			if !paced && lost == 0 {
				t.Fatalf("the unpaced writes did not lose the stream: the test no longer shows what pacing prevents")
			}
		})
	}
}

//go:build realagents

package nomad_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestRealNomadSubscriptionStartsWhereTheWatcherNeedsIt checks on a real
// Nomad what StreamFromNewest stands on. Nomad's broker starts a
// subscription at an index its buffer no longer holds at the oldest event it
// holds (where a reader has no room before the next event drops it), and
// one at StreamFromNewest at the newest event it holds, from which the
// stream goes on.
func TestRealNomadSubscriptionStartsWhereTheWatcherNeedsIt(t *testing.T) {
	const buffer = 8
	n := testagent.Nomad(t, testagent.WithConfig(fmt.Sprintf("server {\n  event_buffer_size = %d\n}", buffer)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	register := func(i int) uint64 {
		t.Helper()
		j := realJob(parentOf(fmt.Sprintf("other-%d", i)), "default")
		j.Meta = nil
		resp, err := client.RegisterJob(ctx, j, false, 0)
		if err != nil {
			t.Fatalf("registering job %d: %v", i, err)
		}
		return resp.JobModifyIndex
	}
	first := register(0)
	for i := 1; i < 3*buffer; i++ {
		register(i)
	}
	// Each job of count 0 is evaluated once; wait until Nomad is done.
	var held []uint64
	testagent.Eventually(t, time.Minute, "Nomad to stop writing", func() error {
		got, err := batches(ctx, client, first, time.Second)
		if err != nil {
			// A reader at the oldest event held is dropped by the next
			// event Nomad appends (what StreamFromNewest avoids): Nomad
			// was still writing.
			held = nil
			return err
		}
		if len(got) == 0 || len(held) == 0 || got[len(got)-1] != held[len(held)-1] {
			held = got
			return fmt.Errorf("still writing: batches %v", got)
		}
		// This read began after Nomad's last write: it holds only what
		// the buffer kept. The one before may have read on while Nomad
		// wrote (28 batches through a buffer of 8, in a CI run).
		held = got
		return nil
	})
	// Nomad 1.10.5 holds one index more than event_buffer_size once it
	// has dropped any: eventBuffer.advanceHead counts the buffer's first,
	// empty, item out when it drops it, though appendItem never counted
	// it in (nomad/stream/event_buffer.go). A CI run read 9 through 8.
	oldest, newest := held[0], held[len(held)-1]
	if oldest <= first || len(held) > buffer+1 {
		t.Fatalf("subscribed at %d, no longer held: the stream started at %d and delivered %d batches %v; want it to start at the oldest held, past %d, and at most %d batches",
			first, oldest, len(held), held, first, buffer+1)
	}

	fromNewest, err := client.Events(ctx, nomad.StreamFromNewest)
	if err != nil {
		t.Fatalf("subscribing at StreamFromNewest: %v", err)
	}
	if got := next(t, fromNewest); got != newest {
		t.Fatalf("subscribed at StreamFromNewest: the stream started at %d, want the newest held, %d (held: %v)", got, newest, held)
	}
	after := register(3 * buffer)
	for got := next(t, fromNewest); got != after; got = next(t, fromNewest) {
		if got > after {
			t.Fatalf("subscribed at StreamFromNewest: the stream skipped the next write's index %d (got %d)", after, got)
		}
	}
}

// batches subscribes at index and returns the indexes the stream delivered
// until none came for quiet, each once, or why the stream ended first.
func batches(ctx context.Context, client *nomad.Client, index uint64, quiet time.Duration) ([]uint64, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Events(sctx, index)
	if err != nil {
		return nil, fmt.Errorf("subscribing at %d: %w", index, err)
	}
	var out []uint64
	for {
		select {
		case evs, ok := <-stream:
			if !ok {
				return nil, fmt.Errorf("the stream from %d ended", index)
			}
			if evs.Err != nil {
				return nil, fmt.Errorf("the stream from %d ended: %w", index, evs.Err)
			}
			// Nomad may send one index's events in more than one message.
			if !evs.IsHeartbeat() && (len(out) == 0 || out[len(out)-1] != evs.Index) {
				out = append(out, evs.Index)
			}
		case <-time.After(quiet):
			return out, nil
		}
	}
}

// next returns the index of the stream's next batch of events.
func next(t *testing.T, stream <-chan *api.Events) uint64 {
	t.Helper()
	for {
		select {
		case evs, ok := <-stream:
			if !ok || evs.Err != nil {
				t.Fatalf("the stream ended: %v", evs)
			}
			if !evs.IsHeartbeat() {
				return evs.Index
			}
		case <-time.After(time.Minute):
			t.Fatal("no event within a minute")
		}
	}
}

package nomadsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// guard bounds how long a test waits for something that must happen. It is
// a hang detector, not a timing assertion: passing runs never get near it.
const guard = 30 * time.Second

func subscribe(t testing.TB, s *Nomad, index uint64) (<-chan *api.Events, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Events(ctx, index)
	if err != nil {
		cancel()
		t.Fatalf("subscribe at %d: %v", index, err)
	}
	return ch, cancel
}

// lastPublished is the index of the newest published event.
func (s *Nomad) lastPublished() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tail.events.Index
}

// drain reads from ch until it has delivered everything published so far.
func drain(s *Nomad, ch <-chan *api.Events) []*api.Events {
	want := s.lastPublished()
	var out []*api.Events
	if want == 0 {
		return nil
	}
	timeout := time.After(guard)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
			if ev.Index >= want {
				return out
			}
		case <-timeout:
			panic("event stream stalled")
		}
	}
}

func indexes(evs []*api.Events) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Index
	}
	return out
}

func TestEventsOrderAndPayloads(t *testing.T) {
	for _, jsonPayloads := range []bool{false, true} {
		name := "typed"
		if jsonPayloads {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			s := manual(t, func(c *NomadConfig) { c.JSONPayloads = jsonPayloads })
			ch, cancel := subscribe(t, s, 0)
			defer cancel()
			ctx := context.Background()
			r := register(t, s, testJob("web-0"), true, 0)
			s.Settle()
			vol, err := s.CreateHostVolume(ctx, &api.HostVolume{Name: "data-web-0"})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteHostVolume(ctx, "default", vol.ID); err != nil {
				t.Fatal(err)
			}
			evs := drain(s, ch)

			var last uint64
			var sawAlloc, sawDeployment, sawHealthy, sawStable, sawVolume, sawVolumeDeleted bool
			for _, batch := range evs {
				if batch.Index <= last {
					t.Fatalf("index %d after %d", batch.Index, last)
				}
				last = batch.Index
				for _, e := range batch.Events {
					if e.Index != batch.Index {
						t.Fatalf("event index %d in batch %d", e.Index, batch.Index)
					}
					// JSON payloads are what nomad.Client delivers: each
					// object's raw JSON, decoded once by the watcher.
					for k, v := range e.Payload {
						if _, raw := v.(json.RawMessage); raw != jsonPayloads {
							t.Fatalf("payload %s is a %T with JSONPayloads %v", k, v, jsonPayloads)
						}
					}
					switch e.Topic {
					case api.TopicJob:
						var j *api.Job
						err := nomad.DecodePayload(&e, "Job", &j)
						if err != nil || j == nil || *j.ID != "web-0" || e.Key != "web-0" {
							t.Fatalf("job payload: %+v %v", j, err)
						}
						if e.Index == r.JobModifyIndex && (e.Type != "JobRegistered" || *j.JobModifyIndex != r.JobModifyIndex) {
							t.Fatalf("register event: %s %+v", e.Type, j)
						}
						if j.Stable != nil && *j.Stable {
							sawStable = e.Type == "DeploymentStatusUpdate"
						}
					case api.TopicAllocation:
						var a *api.Allocation
						err := nomad.DecodePayload(&e, "Allocation", &a)
						if err != nil || a == nil || a.ID != e.Key || a.JobID != "web-0" || a.Job != nil {
							t.Fatalf("alloc payload: %+v %v", a, err)
						}
						sawAlloc = true
						if a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy {
							sawHealthy = e.Type == "AllocationUpdated"
						}
					case api.TopicDeployment:
						var d *api.Deployment
						err := nomad.DecodePayload(&e, "Deployment", &d)
						if err != nil || d == nil || d.JobID != "web-0" {
							t.Fatalf("deployment payload: %+v %v", d, err)
						}
						sawDeployment = true
					case TopicHostVolume:
						if e.Payload["Volume"] == nil {
							t.Fatalf("volume payload: %+v", e.Payload)
						}
						if e.Type == "HostVolumeRegistered" && e.Key == vol.ID {
							sawVolume = true
						}
						if e.Type == "HostVolumeDeleted" && e.Key == "" {
							sawVolumeDeleted = true
						}
					default:
						t.Fatalf("unexpected topic %s", e.Topic)
					}
				}
			}
			if !sawAlloc || !sawDeployment || !sawHealthy || !sawStable || !sawVolume || !sawVolumeDeleted {
				t.Fatalf("missing events: alloc %v deployment %v healthy %v stable %v volume %v deleted %v",
					sawAlloc, sawDeployment, sawHealthy, sawStable, sawVolume, sawVolumeDeleted)
			}
		})
	}
}

// TestEventsStartIndex checks where a subscription starts, against Nomad's
// eventBuffer.StartAtClosest, including the silent gap when the index is
// older than the buffer.
func TestEventsStartIndex(t *testing.T) {
	s := manual(t, func(c *NomadConfig) { c.EventBufferSize = 5 })
	// Ten registers publish indexes 1..10 (their plans wait for the
	// clock, which does not move). Like Nomad's, the buffer trims to
	// EventBufferSize items after an append and so keeps 5..10.
	for i := 0; i < 10; i++ {
		register(t, s, testJob(fmt.Sprintf("web-%d", i)), true, 0)
	}
	if got := s.OldestEventIndex(); got != 5 {
		t.Fatalf("oldest retained index %d, want 5", got)
	}
	cases := []struct {
		name  string
		index uint64
		first uint64
	}{
		{"zero starts at the oldest retained", 0, 5},
		{"an exact index is delivered again", 8, 8},
		{"the newest index is delivered again", 10, 10},
		{"beyond the newest replays the newest", 50, 10},
		{"older than the buffer starts at its oldest: a gap", 2, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch, cancel := subscribe(t, s, tc.index)
			defer cancel()
			evs := drain(s, ch)
			if len(evs) == 0 || evs[0].Index != tc.first {
				t.Fatalf("from %d got %v, want first %d", tc.index, indexes(evs), tc.first)
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].Index != evs[i-1].Index+1 {
					t.Fatalf("not contiguous: %v", indexes(evs))
				}
			}
		})
	}
}

func TestEventsCloseAndReconnect(t *testing.T) {
	s := manual(t)
	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	register(t, s, testJob("web-0"), true, 0)
	first := drain(s, ch)
	s.CloseEventStreams(nil)
	ev, ok := <-ch
	if !ok || !errors.Is(ev.Err, ErrStreamClosed) {
		t.Fatalf("closing event: %+v %v", ev, ok)
	}
	if _, ok := <-ch; ok {
		t.Fatal("stream still open after its error")
	}
	register(t, s, testJob("web-1"), true, 0)
	// Resubscribing from the last seen index replays it, then goes on.
	ch2, cancel2 := subscribe(t, s, first[len(first)-1].Index)
	defer cancel2()
	evs := drain(s, ch2)
	if len(evs) != 2 || evs[0].Index != first[len(first)-1].Index {
		t.Fatalf("after reconnect: %v", indexes(evs))
	}

	// Cancelling the context closes the channel without an error event.
	cancel2()
	for ev := range ch2 {
		if ev.Err != nil {
			t.Fatalf("error after cancel: %v", ev.Err)
		}
	}
}

func TestEventsPauseAndDrop(t *testing.T) {
	s := manual(t)
	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	s.PauseEvents()
	register(t, s, testJob("web-0"), true, 0)
	register(t, s, testJob("web-1"), true, 0)
	select {
	case ev := <-ch:
		t.Fatalf("delivered while paused: %+v", ev)
	default:
	}
	s.ResumeEvents()
	evs := drain(s, ch)
	if len(evs) != 2 || evs[0].Index != 1 || evs[1].Index != 2 {
		t.Fatalf("after resume: %v", indexes(evs))
	}

	s.DropEvents(1)
	register(t, s, testJob("web-2"), true, 0) // index 3, dropped
	register(t, s, testJob("web-3"), true, 0) // index 4
	evs = drain(s, ch)
	if len(evs) != 1 || evs[0].Index != 4 {
		t.Fatalf("after a drop: %v", indexes(evs))
	}
	if s.Job("default", "web-2") == nil {
		t.Fatal("a dropped event lost its write")
	}
}

func TestEventsSlowStreamInRealTime(t *testing.T) {
	s := NewNomad(NomadConfig{})
	defer s.Close()
	s.SetEventDelay(20 * time.Millisecond)
	ch, cancel := subscribe(t, s, 0)
	defer cancel()
	r := register(t, s, testJob("web-0"), true, 0)
	evs := drain(s, ch)
	// Order, not timing, is asserted: the delay may only hold events back.
	if len(evs) == 0 || evs[0].Index != r.JobModifyIndex {
		t.Fatalf("slow stream: %v", indexes(evs))
	}
}

// TestSlowSubscriberIsDropped: with DropSlowSubscribers, a reader that falls
// more than the buffer behind loses its subscription with Nomad's "event
// dropped from buffer", after what it was already handed, in order; a
// reader that keeps up, or a simulator without the option, loses nothing.
func TestSlowSubscriberIsDropped(t *testing.T) {
	const buffer, writes = 5, 40
	for _, tc := range []struct {
		name     string
		drop     bool
		keepUp   bool
		wantDrop bool
	}{
		{"a lagging reader is dropped", true, false, true},
		{"a reader that keeps up is not", true, true, false},
		{"without the option a lagging reader only lags", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := manual(t, func(c *NomadConfig) { c.EventBufferSize, c.DropSlowSubscribers = buffer, tc.drop })
			ch, cancel := subscribe(t, s, 0)
			defer cancel()
			var got []*api.Events
			for i := 0; i < writes; i++ {
				register(t, s, testJob(fmt.Sprintf("web-%d", i)), true, 0)
				if tc.keepUp {
					got = append(got, drain(s, ch)...)
				}
			}
			var err error
			timeout := time.After(guard)
		read:
			for len(got) == 0 || got[len(got)-1].Index != s.lastPublished() {
				select {
				case ev, ok := <-ch:
					if !ok {
						break read
					}
					if ev.Err != nil {
						err = ev.Err
						break read
					}
					got = append(got, ev)
				case <-timeout:
					t.Fatal("event stream stalled")
				}
			}
			if tc.wantDrop != errors.Is(err, ErrEventDropped) {
				t.Fatalf("stream error %v, want dropped: %v (read %v)", err, tc.wantDrop, indexes(got))
			}
			if !tc.wantDrop && (len(got) == 0 || got[len(got)-1].Index != s.lastPublished()) {
				t.Fatalf("read %v, want every index up to %d", indexes(got), s.lastPublished())
			}
			for i := 1; i < len(got); i++ {
				if got[i].Index != got[i-1].Index+1 {
					t.Fatalf("not contiguous: %v", indexes(got))
				}
			}
		})
	}
}

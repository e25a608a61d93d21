package nomadsim

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// TopicHostVolume is the event topic of dynamic host volumes. The api
// package (at the pinned version) has no constant for it; Nomad's server
// calls it "HostVolume". Its payload is under the key "Volume", which
// api.Event has no accessor for.
const TopicHostVolume api.Topic = "HostVolume"

// ErrStreamClosed ends an event stream closed by CloseEventStreams without
// an error of its own: the server closed the subscription, as Nomad does on
// leader changes, and the client should subscribe again.
var ErrStreamClosed = errors.New("subscription closed by server, client should resubscribe")

// ErrEventDropped ends a subscription whose reader fell behind the event
// buffer (NomadConfig.DropSlowSubscribers), in the words of Nomad's broker.
var ErrEventDropped = errors.New("event dropped from buffer")

// eventItem is one published index in the event buffer. next is written
// before ready is closed, and read only after, so the channel orders them.
// dropped is closed when the buffer trims the item.
type eventItem struct {
	events  *api.Events
	at      time.Time
	next    *eventItem
	ready   chan struct{}
	dropped chan struct{}
}

func newEventItem(ev *api.Events) *eventItem {
	return &eventItem{events: ev, at: time.Now(), ready: make(chan struct{}), dropped: make(chan struct{})}
}

// subscription is one open Events stream.
type subscription struct {
	closed chan struct{}
	err    error
}

// payload wraps an object under its payload key: typed (a copy, made by
// copyOf unless nil, so that later writes do not show through), or, with
// NomadConfig.JSONPayloads, as the JSON that nomad.Client keeps of it, which
// needs no copy. Callers hold s.mu.
func (s *Nomad) payload(key string, obj any, copyOf func() any) map[string]any {
	if !s.cfg.JSONPayloads {
		if copyOf != nil {
			obj = copyOf()
		}
		return map[string]any{key: obj}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		panic("memory: encoding an event payload: " + err.Error())
	}
	return map[string]any{key: json.RawMessage(b)}
}

// publish appends one index's events to the buffer and wakes subscribers.
// Callers hold s.mu.
func (s *Nomad) publish(ev *api.Events) {
	if s.dropEvents > 0 {
		s.dropEvents--
		return
	}
	item := newEventItem(ev)
	s.tail.next = item
	close(s.tail.ready)
	s.tail = item
	s.bufLen++
	for s.bufLen > s.cfg.EventBufferSize {
		close(s.head.dropped)
		s.head = s.head.next
		s.bufLen--
	}
}

// Events implements nomad.API with the semantics of Nomad's event broker:
//   - index 0 starts at the oldest retained index;
//   - otherwise the stream starts at the retained index equal to index (so
//     that index is delivered again), else at the closest one after it, else
//     (index beyond the newest) at the newest one, which is then replayed;
//   - an index older than the buffer silently starts at its oldest entry:
//     the events in between are gone, a gap the caller cannot see;
//   - a slow reader delays only itself, unless DropSlowSubscribers: then a
//     reader whose last item left the buffer gets ErrEventDropped, as
//     Nomad's bufferItem.Next returns it.
//
// The channel closes when ctx is done. When the stream is ended by the
// server (CloseEventStreams, SetUnreachable) it first carries one
// api.Events whose Err says why.
func (s *Nomad) Events(ctx context.Context, index uint64) (_ <-chan *api.Events, err error) {
	defer nomad.TraceCall(ctx, nomad.VerbEvents, &err)
	if err := s.enterRead(ctx, nomad.VerbEvents); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, UnreachableError(nomad.VerbEvents)
	}
	start := s.head
	if index != 0 {
		start = s.startAtClosest(index)
	}
	sub := &subscription{closed: make(chan struct{})}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()

	out := make(chan *api.Events, 10)
	go s.stream(ctx, sub, start, out)
	return out, nil
}

// startAtClosest is eventBuffer.StartAtClosest. Callers hold s.mu.
func (s *Nomad) startAtClosest(index uint64) *eventItem {
	item := s.head
	if index <= item.events.Index {
		return item
	}
	for {
		prev := item
		if item == s.tail {
			return prev
		}
		item = item.next
		if index <= item.events.Index {
			return item
		}
	}
}

// stream feeds one subscription from start onwards.
func (s *Nomad) stream(ctx context.Context, sub *subscription, item *eventItem, out chan<- *api.Events) {
	defer close(out)
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	first := true
	for {
		if !first {
			select {
			case <-item.ready:
			case <-ctx.Done():
				return
			case <-sub.closed:
				s.endStream(ctx, sub, out)
				return
			}
			// Checked after ready, as Nomad does, so that a trimmed item
			// is never mistaken for one still held.
			if s.cfg.DropSlowSubscribers && isClosed(item.dropped) {
				select {
				case out <- &api.Events{Err: ErrEventDropped}:
				case <-ctx.Done():
				}
				return
			}
			item = item.next
		}
		first = false
		if len(item.events.Events) == 0 {
			continue // the buffer's initial sentinel
		}
		if !s.waitToDeliver(ctx, sub, item) {
			if isClosed(sub.closed) {
				s.endStream(ctx, sub, out)
			}
			return
		}
		select {
		case out <- item.events:
		case <-ctx.Done():
			return
		case <-sub.closed:
			s.endStream(ctx, sub, out)
			return
		}
	}
}

// waitToDeliver holds an item while events are paused and until the
// configured lag has passed since it was published. It reports false when
// the stream ended meanwhile.
func (s *Nomad) waitToDeliver(ctx context.Context, sub *subscription, item *eventItem) bool {
	for {
		gate, delay := *s.gate.Load(), time.Duration(s.eventDelay.Load())
		select {
		case <-gate:
		case <-ctx.Done():
			return false
		case <-sub.closed:
			return false
		}
		wait := time.Until(item.at.Add(delay))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		case <-sub.closed:
			t.Stop()
			return false
		}
		// Re-check the gate: events may have been paused while waiting.
	}
}

func (s *Nomad) endStream(ctx context.Context, sub *subscription, out chan<- *api.Events) {
	s.mu.Lock()
	err := sub.err
	s.mu.Unlock()
	if err == nil {
		err = ErrStreamClosed
	}
	select {
	case out <- &api.Events{Err: err}:
	case <-ctx.Done():
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// CloseEventStreams ends every open event stream, as a server does on a
// leader change or a dropped connection: each stream delivers one
// api.Events with Err (err, or ErrStreamClosed when nil) and closes. The
// caller is expected to re-list and subscribe again.
func (s *Nomad) CloseEventStreams(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.err = err
		close(sub.closed)
		delete(s.subs, sub)
	}
}

// PauseEvents holds back event delivery: writes go on and their events
// queue up until ResumeEvents, a deterministic lagging stream.
func (s *Nomad) PauseEvents() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isClosed(*s.gate.Load()) {
		gate := make(chan struct{})
		s.gate.Store(&gate)
	}
}

// ResumeEvents delivers the events held back by PauseEvents, in order.
func (s *Nomad) ResumeEvents() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gate := *s.gate.Load(); !isClosed(gate) {
		close(gate)
	}
}

// SetEventDelay makes every event reach subscribers d (of real time) after
// it was published: a slow stream. Zero turns it off.
func (s *Nomad) SetEventDelay(d time.Duration) {
	s.eventDelay.Store(int64(d))
}

// DropEvents makes the next n published indexes vanish from the stream
// (their writes still happen): a gap that only a re-list repairs. Dropped
// indexes are not in the buffer either, so a resubscription cannot recover
// them.
func (s *Nomad) DropEvents(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropEvents += n
}

// OldestEventIndex returns the oldest index the event buffer still holds (0
// when empty): a subscription from an older index has a gap.
func (s *Nomad) OldestEventIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head.events.Index == 0 && s.head.next != nil && s.head != s.tail {
		return s.head.next.events.Index
	}
	return s.head.events.Index
}

package nomad

import (
	"context"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// maxPumpBacklog bounds the event batches the pump holds for the watcher.
// Past it the pump stops reading, so Nomad ends the stream of a reader
// that fell too far behind (a visible reset, then a re-list) rather than
// the daemon's memory growing without end.
const maxPumpBacklog = 100_000

// eventPump reads one subscription into memory as fast as Nomad writes it.
// The watcher opens the subscription before it lists and reads the
// backlog after: Nomad starts a subscription at the closest index it still
// holds and says nothing of the events it no longer has, so a subscription
// opened after a listing that outlasted Nomad's buffer silently missed
// whatever changed meanwhile. Opened first and read at once, every change
// is in the listing or on the stream, and a long listing does not leave
// the stream unread for Nomad to drop.
type eventPump struct {
	mu      sync.Mutex
	backlog []*api.Events
	// ended is set once the subscription's channel closed.
	ended bool
	// ready has a token while the backlog may hold something new.
	ready chan struct{}
	// room is signalled when the watcher takes the backlog.
	room *sync.Cond
	// saw is told each batch's index as it is read.
	saw func(index uint64)
}

// startPump starts reading stream until it closes or ctx is done. It
// tells saw the index of each batch as soon as it has read it, before
// the watcher folds it: that is how far the stream has got from Nomad's
// point of view.
func startPump(ctx context.Context, stream <-chan *api.Events, saw func(index uint64)) *eventPump {
	p := &eventPump{ready: make(chan struct{}, 1), saw: saw}
	p.room = sync.NewCond(&p.mu)
	go p.run(ctx, stream)
	// A full pump waits for room; ctx's end must wake it.
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.room.Broadcast()
	})
	return p
}

func (p *eventPump) run(ctx context.Context, stream <-chan *api.Events) {
	defer func() {
		p.mu.Lock()
		p.ended = true
		p.mu.Unlock()
		p.signal()
	}()
	for evs := range stream {
		if evs.IsHeartbeat() && evs.Err == nil {
			continue
		}
		if evs.Err == nil {
			p.saw(evs.Index)
		}
		p.mu.Lock()
		for len(p.backlog) >= maxPumpBacklog && ctx.Err() == nil {
			p.room.Wait()
		}
		p.backlog = append(p.backlog, evs)
		p.mu.Unlock()
		p.signal()
	}
}

func (p *eventPump) signal() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// take returns the batches read since the last take, oldest first, and
// whether the subscription has ended after them.
func (p *eventPump) take() ([]*api.Events, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.backlog
	p.backlog = nil
	p.room.Broadcast()
	return out, p.ended
}

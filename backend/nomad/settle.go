package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxPendingSettles bounds the deregistered jobs waiting for Nomad to say
// whether they were stopped or purged. Beyond it the watcher re-lists,
// which settles them all in a few calls.
const maxPendingSettles = 10_000

// settleRequest is one deregister event whose outcome Nomad must tell.
type settleRequest struct {
	namespace, id string
	// index is the event's.
	index uint64
	// held is set when the cache holds the job unsettled at index.
	held bool
}

// settleQueue holds the settle requests not yet asked, at most one per job:
// a newer deregister of a job replaces the older one, whose answer it would
// make moot. Adding is constant time, so the event loop never waits on it.
type settleQueue struct {
	mu      sync.Mutex
	pending map[string]settleRequest
	// order holds the keys of pending, oldest first; a key whose request
	// was dropped is skipped when it comes up.
	order []string
	// wake has a token while pending may be non-empty.
	wake chan struct{}
	// busy counts the requests taken and not yet applied.
	busy atomic.Int64
}

func newSettleQueue() *settleQueue {
	return &settleQueue{pending: map[string]settleRequest{}, wake: make(chan struct{}, 1)}
}

// add queues r, unless a newer request of its job is queued. It returns
// false when the queue is full.
func (q *settleQueue) add(r settleRequest) bool {
	key := r.namespace + "/" + r.id
	q.mu.Lock()
	defer q.mu.Unlock()
	old, queued := q.pending[key]
	switch {
	case queued && old.index > r.index:
		return true
	case !queued && len(q.pending) >= maxPendingSettles:
		return false
	}
	if !queued {
		q.order = append(q.order, key)
	}
	q.pending[key] = r
	q.signal()
	return true
}

// signal leaves a token in wake. The caller holds mu.
func (q *settleQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest request, counting it busy, and passes the wake-up
// on to another worker while more wait.
func (q *settleQueue) pop() (settleRequest, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		key := q.order[0]
		q.order = q.order[1:]
		r, ok := q.pending[key]
		if !ok {
			continue
		}
		delete(q.pending, key)
		q.busy.Add(1)
		if len(q.pending) > 0 {
			q.signal()
		}
		return r, true
	}
	q.order = nil // let the emptied backing array go
	return settleRequest{}, false
}

// Settling counts the deregistered jobs whose stop-or-purge Nomad has not
// told the cache yet: queued, or asked and not yet applied. A test waits
// for zero to know the cache has taken in everything Nomad said.
func (w *Watcher) Settling() int {
	w.settles.mu.Lock()
	n := len(w.settles.pending)
	w.settles.mu.Unlock()
	return n + int(w.settles.busy.Load())
}

// dropThrough forgets the requests of events at or below index: a listing
// at index already told how they ended.
func (q *settleQueue) dropThrough(index uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, r := range q.pending {
		if r.index <= index {
			delete(q.pending, key)
		}
	}
	q.order = slices.DeleteFunc(q.order, func(key string) bool {
		_, ok := q.pending[key]
		return !ok
	})
}

// settleInFlight is how many deregistered jobs settle asks Nomad about at
// once. One at a time fell behind a rollout of 5,000 children: the jobs
// stayed stopping long enough for the controller's expectations to expire
// and ask for re-lists. A few in flight keep up without crowding Nomad's
// HTTP server, which the event stream shares.
const settleInFlight = 8

// settle asks Nomad, off the event loop and settleInFlight at a time,
// whether each deregistered job it is handed was stopped or purged, and
// applies the answer to the cache, until ctx is done. A job stays stopping
// in the cache until then, which is the safe reading of either.
func (w *Watcher) settle(ctx context.Context) {
	var wg sync.WaitGroup
	for range settleInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.settleWorker(ctx)
		}()
	}
	wg.Wait()
}

// settleWorker settles queued requests one by one until ctx is done. When
// Nomad does not answer, the request goes back to the queue and the worker
// waits a backoff before it asks again.
func (w *Watcher) settleWorker(ctx context.Context) {
	backoff := w.cfg.MinBackoff
	for {
		r, ok := w.settles.pop()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-w.settles.wake:
			}
			continue
		}
		err := w.settleOne(ctx, r)
		if err == nil {
			w.settles.busy.Add(-1)
			backoff = w.cfg.MinBackoff
			continue
		}
		if !w.settles.add(r) {
			w.RequestResync() // a re-list settles what no longer fits
		}
		w.settles.busy.Add(-1)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("could not ask Nomad whether a deregistered job was stopped or purged; it stays stopping meanwhile",
			"job", r.namespace+"/"+r.id, "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, w.cfg.MaxBackoff)
	}
}

// settleOne asks Nomad how deregistered job r ended and applies the answer.
func (w *Watcher) settleOne(ctx context.Context, r settleRequest) error {
	job, err := w.api.GetJob(ctx, r.namespace, r.id)
	if errors.Is(err, ErrNotFound) {
		job, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("reading job %s/%s: %w", r.namespace, r.id, err)
	}
	if k, ok := w.cache.settleDeregister(r.namespace, r.id, r.index, r.held, job, w.cfg.Clock()); ok {
		w.onChange(k)
	}
	return nil
}

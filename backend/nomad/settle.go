package nomad

import (
	"context"
	"errors"
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
	q.pending[key] = r
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// take empties the queue and returns what it held.
func (q *settleQueue) take() []settleRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]settleRequest, 0, len(q.pending))
	for _, r := range q.pending {
		out = append(out, r)
	}
	clear(q.pending)
	q.busy.Store(int64(len(out)))
	return out
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
}

// settle asks Nomad, one job at a time and off the event loop, whether each
// deregistered job it is handed was stopped or purged, and applies the
// answer to the cache, until ctx is done. A job stays stopping in the cache
// until then, which is the safe reading of either. When Nomad does not
// answer, the requests wait and are asked again after a backoff.
func (w *Watcher) settle(ctx context.Context) {
	backoff := w.cfg.MinBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.settles.wake:
		}
		reqs := w.settles.take()
		for i, r := range reqs {
			job, err := w.api.GetJob(ctx, r.namespace, r.id)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrNotFound) {
				job, err = nil, nil
			}
			if err != nil {
				for _, again := range reqs[i:] {
					if !w.settles.add(again) {
						w.RequestResync() // a re-list settles what no longer fits
					}
				}
				w.settles.busy.Store(0)
				w.log.Warn("could not ask Nomad whether a deregistered job was stopped or purged; it stays stopping meanwhile",
					"job", r.namespace+"/"+r.id, "pending", len(reqs)-i, "error", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, w.cfg.MaxBackoff)
				break
			}
			backoff = w.cfg.MinBackoff
			if k, ok := w.cache.settleDeregister(r.namespace, r.id, r.index, r.held, job, w.cfg.Clock()); ok {
				w.onChange(k)
			}
			w.settles.busy.Add(-1)
		}
	}
}

package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// queue is a work queue of set keys with the semantics of the Kubernetes
// workqueue: a key waiting in the queue is held once however often it is
// added; a key being processed is never handed to a second worker, and if it
// is added meanwhile it is processed again afterwards; failed keys are
// retried after a per-key exponential backoff; and keys can be added after a
// delay.
type queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	order      []string
	queued     map[string]bool
	processing map[string]bool
	// dirty marks keys added while they were being processed.
	dirty    map[string]bool
	failures map[string]int
	// timers holds, per key, the pending AddAfter with its deadline.
	timers   map[string]*delayed
	shutdown bool
	// idle, while a WaitIdle waits, is closed (and cleared) whenever the
	// queue may have become idle. Only tests wait, so in production it
	// stays nil and costs a nil check per Done.
	idle chan struct{}

	baseDelay time.Duration
	maxDelay  time.Duration
	// now and afterFunc are time.Now and time.AfterFunc; tests replace
	// them to drive the timers by hand.
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) stopper
}

// stopper is what the queue needs of a timer.
type stopper interface{ Stop() bool }

// delayed is one pending AddAfter.
type delayed struct {
	at    time.Time
	timer stopper
}

func newQueue(baseDelay, maxDelay time.Duration) *queue {
	q := &queue{
		queued:     map[string]bool{},
		processing: map[string]bool{},
		dirty:      map[string]bool{},
		failures:   map[string]int{},
		timers:     map[string]*delayed{},
		baseDelay:  baseDelay,
		maxDelay:   maxDelay,
		now:        time.Now,
		afterFunc:  func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key unless it is already waiting.
func (q *queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *queue) addLocked(key string) {
	if q.shutdown {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	if q.queued[key] {
		return
	}
	q.queued[key] = true
	q.order = append(q.order, key)
	q.cond.Signal()
}

// AddAfter queues key after d. Of two pending AddAfter for one key the
// earlier deadline wins: AddAfter(20ms) then AddAfter(1h) queues the key in
// 20ms (and once).
func (q *queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := q.now().Add(d)
	if old, ok := q.timers[key]; ok {
		if !at.Before(old.at) {
			return
		}
		old.timer.Stop()
	}
	w := &delayed{at: at}
	w.timer = q.afterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		// A timer stopped too late to stop its callback must neither queue
		// the key early nor drop the timer that replaced it.
		if q.timers[key] != w {
			return
		}
		delete(q.timers, key)
		q.addLocked(key)
	})
	q.timers[key] = w
}

// AddRateLimited queues key after its backoff, which doubles per failure.
func (q *queue) AddRateLimited(key string) {
	q.mu.Lock()
	n := q.failures[key]
	q.failures[key] = n + 1
	q.mu.Unlock()
	q.AddAfter(key, reconciler.Exponential(q.baseDelay, q.maxDelay, n))
}

// Forget clears key's failure count after a success.
func (q *queue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, key)
}

// Get blocks until a key is available and marks it as being processed. It
// returns false once the queue is shut down.
func (q *queue) Get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", false
	}
	key := q.order[0]
	q.order[0] = ""
	q.order = q.order[1:]
	delete(q.queued, key)
	q.processing[key] = true
	return key, true
}

// Done marks key as processed; if it was added meanwhile it is queued again.
func (q *queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		delete(q.dirty, key)
		q.addLocked(key)
	}
	q.wakeIdleLocked()
}

// errQueueShutDown is WaitIdle's answer once the queue is shut down: what
// it still held will never be processed, so it is not idle, just stopped.
var errQueueShutDown = errors.New("the work queue is shut down")

// WaitIdle blocks until the queue is idle: no key waiting, none being
// processed, and no delayed key (AddAfter, a retry) due within `within` of
// the queue's clock. A worker adds the work a key leads to (the set queued
// again, a retry) before it calls Done, so an idle queue has processed
// everything it was given and everything that led to; what it will do later
// is only its delayed keys due after the horizon. Tests use it to assert
// that something did not happen once it provably could have. Pass 0 to
// leave out every delayed key not yet due; with a hand-driven clock those
// fire only when the test advances it. It returns ctx's error if ctx ends
// first, and errQueueShutDown once the queue is shut down.
func (q *queue) WaitIdle(ctx context.Context, within time.Duration) error {
	for {
		q.mu.Lock()
		if q.shutdown {
			q.mu.Unlock()
			return errQueueShutDown
		}
		if q.idleLocked(q.now().Add(within)) {
			q.mu.Unlock()
			return nil
		}
		if q.idle == nil {
			q.idle = make(chan struct{})
		}
		wake := q.idle
		q.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// idleLocked reports whether nothing is waiting or being processed and no
// delayed key is due at or before horizon. Callers hold q.mu.
func (q *queue) idleLocked(horizon time.Time) bool {
	if len(q.order) > 0 || len(q.processing) > 0 {
		return false
	}
	for _, w := range q.timers {
		if !w.at.After(horizon) {
			return false
		}
	}
	return true
}

// wakeIdleLocked wakes the WaitIdle callers to look again. The queue can
// become idle only when a key is done or the queue shuts down: a delayed
// key that fires is queued first. Callers hold q.mu.
func (q *queue) wakeIdleLocked() {
	if q.idle != nil {
		close(q.idle)
		q.idle = nil
	}
}

// Delayed returns the deadline of every pending AddAfter, by key: what the
// queue will do later without being told. Tests read it to show that a set
// is not scheduled to be looked at again.
func (q *queue) Delayed() map[string]time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]time.Time, len(q.timers))
	for k, w := range q.timers {
		out[k] = w.at
	}
	return out
}

// Len returns the number of keys waiting (the queue depth).
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// ShutDown wakes every worker and makes Get return false.
func (q *queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for _, w := range q.timers {
		w.timer.Stop()
	}
	q.cond.Broadcast()
	q.wakeIdleLocked()
}

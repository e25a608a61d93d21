package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func TestQueueDeduplicatesWaitingKeys(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	q.Add("a")
	q.Add("a")
	q.Add("b")
	if got := q.Len(); got != 2 {
		t.Fatalf("queue depth = %d, want 2 (a twice is one entry)", got)
	}
	k1, _ := q.Get()
	k2, _ := q.Get()
	if k1 != "a" || k2 != "b" {
		t.Fatalf("got %q then %q, want a then b (FIFO)", k1, k2)
	}
}

func TestQueueNeverHandsOutAKeyTwiceAtOnce(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	q.Add("a")
	k, _ := q.Get()
	q.Add("a") // added while being processed
	if got := q.Len(); got != 0 {
		t.Fatalf("a key being processed must not be queued again yet; depth = %d", got)
	}
	q.Done(k)
	if got := q.Len(); got != 1 {
		t.Fatalf("a key added during processing must be requeued on Done; depth = %d", got)
	}
}

func TestQueueConcurrentWorkersNeverOverlapOnAKey(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	var inFlight sync.Map
	var overlaps, processed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, ok := q.Get()
				if !ok {
					return
				}
				if _, loaded := inFlight.LoadOrStore(k, true); loaded {
					overlaps.Add(1)
				}
				time.Sleep(50 * time.Microsecond)
				inFlight.Delete(k)
				processed.Add(1)
				q.Done(k)
			}
		}()
	}
	keys := []string{"a", "b", "c"}
	for i := 0; i < 3000; i++ {
		q.Add(keys[i%len(keys)])
	}
	// Until every key is done, not merely taken: a key still being
	// processed could yet overlap with its requeued self.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.WaitIdle(ctx, 0); err != nil {
		t.Fatalf("the workers never drained the queue: %v", err)
	}
	q.ShutDown()
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d times a key was processed by two workers at once", overlaps.Load())
	}
	if processed.Load() == 0 {
		t.Fatal("nothing was processed")
	}
}

func TestQueueRateLimitedRetriesAndForgetResets(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	q.AddRateLimited("k")
	q.AddRateLimited("k")
	q.mu.Lock()
	n := q.failures["k"]
	q.mu.Unlock()
	if n != 2 {
		t.Fatalf("failures = %d after two rate-limited adds, want 2", n)
	}
	k, ok := q.Get() // the delayed add arrives
	if !ok || k != "k" {
		t.Fatalf("got %q %v, want the rate-limited key", k, ok)
	}
	q.Done(k)
	q.Forget("k")
	q.mu.Lock()
	n = q.failures["k"]
	q.mu.Unlock()
	if n != 0 {
		t.Fatalf("Forget left %d failures", n)
	}
}

func TestQueueShutDownReleasesWorkers(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	done := make(chan bool)
	go func() {
		_, ok := q.Get()
		done <- ok
	}()
	q.ShutDown()
	if ok := <-done; ok {
		t.Fatal("Get returned a key after ShutDown")
	}
}

func TestPodStateAvailableAfterMinReadySeconds(t *testing.T) {
	since := time.Unix(1000, 0)
	ready := reconciler.Pod{Phase: reconciler.PhaseRunning, Ready: true, ReadySince: since}
	for _, tc := range []struct {
		minReady int
		now      time.Time
		want     string
	}{
		{0, since, "Available"},
		{10, since.Add(9 * time.Second), "Ready"},
		{10, since.Add(10 * time.Second), "Available"},
	} {
		if got := podState(ready, tc.minReady, tc.now); got != tc.want {
			t.Errorf("min_ready_seconds %d at +%v: %s, want %s", tc.minReady, tc.now.Sub(since), got, tc.want)
		}
	}
	if got := podState(reconciler.Pod{Phase: reconciler.PhaseRunning, Ready: true, Terminating: true}, 0, since); got != "Terminating" {
		t.Errorf("a terminating pod reads %s", got)
	}
}

// fakeTimers drives the queue's timers by hand: no real time passes.
type fakeTimers struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (ft *fakeTimers) install(q *queue) {
	q.now = func() time.Time { return ft.now }
	q.afterFunc = func(d time.Duration, f func()) stopper {
		t := &fakeTimer{at: ft.now.Add(d), f: f}
		ft.timers = append(ft.timers, t)
		return t
	}
}

// TestAddAfterKeepsTheEarlierDeadline is issue 17's second defect: the
// comment promised the earlier of two deadlines, the code kept the later
// (AddAfter(20ms) then AddAfter(1h) waited an hour), and a timer that had
// already fired when it was replaced deleted its replacement.
func TestAddAfterKeepsTheEarlierDeadline(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	ft := &fakeTimers{now: time.Unix(1000, 0)}
	ft.install(q)

	q.AddAfter("k", 20*time.Millisecond)
	q.AddAfter("k", time.Hour)
	if w := q.timers["k"]; w == nil || !w.at.Equal(ft.now.Add(20*time.Millisecond)) {
		t.Fatalf("pending deadline %+v, want now+20ms", w)
	}
	if len(ft.timers) != 1 {
		t.Fatalf("%d timers armed, want the first one only", len(ft.timers))
	}

	// A shorter delay replaces the pending one.
	q.AddAfter("k", 5*time.Millisecond)
	if len(ft.timers) != 2 || !ft.timers[0].stopped {
		t.Fatalf("the earlier deadline did not replace the later one: %+v", ft.timers)
	}
	// The replaced timer had already fired: its callback runs anyway. It
	// must not drop the replacement, nor queue the key.
	ft.timers[0].f()
	if q.timers["k"] == nil || q.Len() != 0 {
		t.Fatalf("a stale timer dropped its replacement (%v) or queued the key (%d queued)", q.timers["k"], q.Len())
	}
	ft.timers[1].f()
	if q.Len() != 1 || q.timers["k"] != nil {
		t.Fatalf("after the deadline: %d queued, timer %v", q.Len(), q.timers["k"])
	}
}

// isIdle asks q whether it is idle without waiting: WaitIdle looks before
// it waits, so with a context already done it answers at once.
func isIdle(q *queue, within time.Duration) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return q.WaitIdle(ctx, within) == nil
}

// TestWaitIdleCountsQueuedAndInFlightKeys: a key is work from Add until its
// Done, and a key added while it was processed is more work, not a
// duplicate to forget.
func TestWaitIdleCountsQueuedAndInFlightKeys(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	if !isIdle(q, 0) {
		t.Fatal("a new queue is not idle")
	}
	q.Add("a")
	if isIdle(q, 0) {
		t.Fatal("idle with a key waiting")
	}
	k, _ := q.Get()
	if isIdle(q, 0) {
		t.Fatal("idle with a key being processed")
	}
	q.Add("a") // the pass queues its set again
	q.Done(k)
	if isIdle(q, 0) {
		t.Fatal("idle although a key was added while it was processed")
	}
	k, _ = q.Get()
	q.Done(k)
	if !isIdle(q, 0) {
		t.Fatal("not idle once every key is done")
	}
}

// TestWaitIdleHorizonCountsDelayedKeysDueWithinIt: a delayed key due within
// the horizon is work to come; one due later is left out, until its time
// comes and it is queued.
func TestWaitIdleHorizonCountsDelayedKeysDueWithinIt(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	ft := &fakeTimers{now: time.Unix(1000, 0)}
	ft.install(q)
	q.AddAfter("k", time.Second)
	if !isIdle(q, 0) {
		t.Fatal("a key delayed by a second counts as work due now")
	}
	if !isIdle(q, 999*time.Millisecond) {
		t.Fatal("a key delayed by a second counts within 999ms")
	}
	if isIdle(q, time.Second) {
		t.Fatal("a key due within the horizon is left out")
	}
	if d := q.Delayed(); len(d) != 1 || !d["k"].Equal(ft.now.Add(time.Second)) {
		t.Fatalf("Delayed() = %v, want k at now+1s", d)
	}
	ft.now = ft.now.Add(time.Second)
	ft.timers[0].f()
	if isIdle(q, 0) {
		t.Fatal("idle with the delayed key queued")
	}
	if len(q.Delayed()) != 0 {
		t.Fatalf("a fired key is still delayed: %v", q.Delayed())
	}
	k, _ := q.Get()
	q.Done(k)
	if !isIdle(q, time.Hour) {
		t.Fatal("not idle once the delayed key is done")
	}
}

// TestWaitIdleWakesWhenTheLastKeyIsDone: a waiter sleeps until the work
// ends, and a shutdown releases it with an error rather than a false idle.
func TestWaitIdleWakesWhenTheLastKeyIsDone(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	q.Add("a")
	k, _ := q.Get()
	waitIdle := func() chan error {
		ch := make(chan error, 1)
		go func() { ch <- q.WaitIdle(context.Background(), 0) }()
		// Until the waiter sleeps, so that what wakes it is tested, not its
		// first look.
		deadline := time.Now().Add(10 * time.Second)
		for {
			q.mu.Lock()
			asleep := q.idle != nil
			q.mu.Unlock()
			if asleep {
				return ch
			}
			if time.Now().After(deadline) {
				t.Fatal("WaitIdle never slept on a busy queue")
			}
			time.Sleep(time.Millisecond)
		}
	}
	done := waitIdle()
	q.Done(k)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitIdle after the last Done: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitIdle did not wake when the last key was done")
	}

	q.Add("b")
	stopped := waitIdle()
	q.ShutDown()
	select {
	case err := <-stopped:
		if !errors.Is(err, errQueueShutDown) {
			t.Fatalf("WaitIdle across a shutdown: %v, want errQueueShutDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ShutDown did not release WaitIdle")
	}
}

// TestWaitIdleEndsWithItsContext: a queue that never drains does not hold
// its waiter past the deadline.
func TestWaitIdleEndsWithItsContext(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second)
	q.Add("a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := q.WaitIdle(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle on a queue nobody works: %v, want the deadline", err)
	}
}

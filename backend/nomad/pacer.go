package nomad

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// DefaultEventBufferSize is Nomad's default event_buffer_size: how many
// Raft indexes a server keeps for its event stream's subscribers.
const DefaultEventBufferSize = 100

// maxWriteHold bounds how long one write waits for the stream. A stream
// that delivers nothing for this long is stalled, not slow: holding the
// daemon's writes longer would not save it, and Nomad will say so.
const maxWriteHold = 5 * time.Second

// WriteIndexer is an API that tells the highest Raft index any of its
// writes has returned: a sample of the newest index Nomad has written,
// taken at no cost from the answers to the daemon's own writes.
type WriteIndexer interface {
	LastWriteIndex() uint64
}

// StreamPacer holds the daemon's writes to Nomad while its event stream
// trails them, the writes in flight counted, by more than a quarter of the
// servers' event_buffer_size.
//
// Nomad keeps the events of the last event_buffer_size indexes for its
// subscribers and ends the stream of one that falls further behind (a
// reset, then a re-list of every job). An index that published no event
// takes no room (stream/event_buffer.go; EventBroker.Publish skips it), so
// counting indexes, as the pacer does, over-counts the buffer: it errs
// toward waiting. In a burst (hundreds of children registered at
// once) the daemon's writes, and what Nomad writes because of them
// (evaluations, plans, allocation updates), can come faster than the
// stream is read: across a slow link, or from a busy server. The daemon
// cannot make Nomad encode faster, but it can stop adding to the gap:
// before each write it waits until the stream has delivered the index
// of every earlier write but the last limit, counting the writes still
// in flight as ahead (the daemon's workers write at once, and none of
// their indexes is known until it returns). It is client-go's
// client-side rate limiting, with the stream's progress in place of a
// fixed rate: a stream that keeps up is never waited for, one that is
// slow sets the pace. It cannot absorb a stall: while the reader stands
// still, what Nomad writes on its own for writes already made keeps
// filling the buffer (BENCHMARKS.md, "1,000 children against Nomad alone"); only the buffer's size
// helps there.
//
// The watcher tells it what the stream delivered (Saw) and whether one is
// being followed at all (Follow, Lost): without a stream there is
// nothing to wait for, and a write is never held for more than
// maxWriteHold.
type StreamPacer struct {
	limit uint64
	// maxHold is maxWriteHold, shorter in tests.
	maxHold time.Duration
	log     hclog.Logger
	// logged is when a hold was last logged (unix nanoseconds): a burst
	// holds many writes, and says so once every holdLogEvery.
	logged atomic.Int64

	mu sync.Mutex
	// head is the highest index a write returned, seen the highest index
	// the stream delivered.
	head, seen uint64
	// following is set while a stream is followed from a listing.
	following bool
	// inflight counts the writes Wait let go that have not returned
	// (Done).
	inflight uint64
	// moved is closed, and replaced, whenever seen, following or the
	// writes in flight change.
	moved chan struct{}

	holds atomic.Uint64
	held  atomic.Int64 // nanoseconds
	// maxBehind is the most the stream trailed a write that was about to
	// be made.
	maxBehind atomic.Uint64
}

// NewStreamPacer returns a pacer for servers whose event_buffer_size is
// bufferSize (DefaultEventBufferSize when not positive). It lets writes
// run ahead of the stream by a quarter of it: the rest is room for what
// Nomad writes after them (each child registered is followed by its
// evaluation's and its allocation's updates) and for everyone else's
// writes. With half, and the writes in flight not counted, a real Nomad
// on a fast host dropped the stream in 5 of 12 creates of 1,000 children,
// each time in the first 200 ms of the burst; with this, in none of 9
// (BENCHMARKS.md, "1,000 children against Nomad alone", and its history).
func NewStreamPacer(bufferSize int) *StreamPacer {
	if bufferSize <= 0 {
		bufferSize = DefaultEventBufferSize
	}
	return &StreamPacer{limit: uint64(max(bufferSize/4, 1)), maxHold: maxWriteHold, log: hclog.NewNullLogger(), moved: make(chan struct{})}
}

// holdLogEvery is how often holds are logged at most.
const holdLogEvery = 10 * time.Second

// logHold says, at most once every holdLogEvery, that writes wait for the
// stream, or went ahead without it.
func (p *StreamPacer) logHold(ahead uint64, gaveUp bool) {
	now := time.Now().UnixNano()
	last := p.logged.Load()
	if now-last < int64(holdLogEvery) || !p.logged.CompareAndSwap(last, now) {
		return
	}
	if gaveUp {
		p.log.Warn("a write waited for Nomad's event stream and went ahead without it: the stream is stalled, and Nomad may drop it (event_buffer_size)",
			"waited", p.maxHold, "ahead", ahead, "limit", p.limit)
		return
	}
	p.log.Info("writes to Nomad wait for its event stream, which trails them; they go on as it catches up",
		"ahead", ahead, "limit", p.limit)
}

// Limit is how many indexes the daemon's writes may run ahead of its
// event stream.
func (p *StreamPacer) Limit() uint64 { return p.limit }

// wake tells waiters to look again. Callers hold p.mu.
func (p *StreamPacer) wake() {
	close(p.moved)
	p.moved = make(chan struct{})
}

// Done records the end of a write that Wait let go, and the index Nomad
// returned for it (or the newest any write returned, if it failed).
func (p *StreamPacer) Done(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.head = max(p.head, index)
	if p.inflight > 0 {
		p.inflight--
	}
	p.wake()
}

// Saw records the index of a batch of events the stream delivered.
func (p *StreamPacer) Saw(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if index > p.seen {
		p.seen = index
		p.wake()
	}
}

// Follow says a stream is followed again, from a listing at index.
func (p *StreamPacer) Follow(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = max(p.seen, index)
	p.following = true
	p.wake()
}

// Lost says the stream ended: writes are not held until Follow.
func (p *StreamPacer) Lost() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.following = false
	p.wake()
}

// ahead is how far the daemon's writes are ahead of the stream: the
// indexes the stream trails the newest returned write by, and one for
// each write in flight (0 when no stream is followed). Callers hold p.mu.
func (p *StreamPacer) ahead() uint64 {
	if !p.following {
		return 0
	}
	return p.head - min(p.seen, p.head) + p.inflight
}

// Wait returns once the stream trails the daemon's writes, those in
// flight counted, by less than the limit, no stream is followed, or
// maxWriteHold has passed; or with ctx's error when ctx ends first. A nil
// return counts the caller's write as in flight until it calls Done.
func (p *StreamPacer) Wait(ctx context.Context) error {
	var start time.Time
	var deadline <-chan time.Time
	defer func() {
		if deadline != nil {
			p.held.Add(int64(time.Since(start)))
		}
	}()
	for {
		p.mu.Lock()
		ahead := p.ahead()
		if deadline == nil && ahead > p.maxBehind.Load() {
			p.maxBehind.Store(ahead) // under p.mu: no lost update
		}
		if ahead < p.limit || !p.following {
			p.inflight++
			p.mu.Unlock()
			return nil
		}
		moved := p.moved
		p.mu.Unlock()
		if deadline == nil {
			start = time.Now()
			t := time.NewTimer(p.maxHold)
			defer t.Stop()
			deadline = t.C
			p.holds.Add(1)
			p.logHold(ahead, false)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			p.logHold(ahead, true)
			p.mu.Lock()
			p.inflight++
			p.mu.Unlock()
			return nil
		case <-moved:
		}
	}
}

// MaxBehind returns the most the daemon's writes were ahead of the stream
// when a write was about to be made: the indexes the stream trailed the
// newest write by, and the writes then in flight.
func (p *StreamPacer) MaxBehind() uint64 { return p.maxBehind.Load() }

// Holds returns how many writes waited for the stream, and for how long
// in all.
func (p *StreamPacer) Holds() (uint64, time.Duration) {
	return p.holds.Load(), time.Duration(p.held.Load())
}

// pacedAPI is an API whose writes to Nomad's state wait for the stream
// (StreamPacer.Wait) and report the index Nomad returned (Wrote).
// ExecAlloc writes nothing Nomad stores, and is not paced.
type pacedAPI struct {
	API
	pacer *StreamPacer
	// indexer is the API's WriteIndexer; nil when it has none, and then
	// nothing is held: the pacer never learns a write's index.
	indexer WriteIndexer
}

func newPacedAPI(a API, p *StreamPacer) *pacedAPI {
	indexer, _ := a.(WriteIndexer)
	return &pacedAPI{API: a, pacer: p, indexer: indexer}
}

// paced runs one write between the pacer's wait and its note of the
// index the write returned.
func paced[T any](ctx context.Context, p *pacedAPI, write func() (T, error)) (T, error) {
	if p.indexer == nil {
		return write()
	}
	if err := p.pacer.Wait(ctx); err != nil {
		var zero T
		return zero, fmt.Errorf("waiting for Nomad's event stream to catch up before a write: %w", err)
	}
	out, err := write()
	p.pacer.Done(p.indexer.LastWriteIndex())
	return out, err
}

// RegisterJob implements API.
func (p *pacedAPI) RegisterJob(ctx context.Context, job *api.Job, enforce bool, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	return paced(ctx, p, func() (*api.JobRegisterResponse, error) { return p.API.RegisterJob(ctx, job, enforce, modifyIndex) })
}

// DeregisterJob implements API.
func (p *pacedAPI) DeregisterJob(ctx context.Context, namespace, id string, purge bool) error {
	_, err := paced(ctx, p, func() (struct{}, error) { return struct{}{}, p.API.DeregisterJob(ctx, namespace, id, purge) })
	return err
}

// CreateHostVolume implements API.
func (p *pacedAPI) CreateHostVolume(ctx context.Context, vol *api.HostVolume) (*api.HostVolume, error) {
	return paced(ctx, p, func() (*api.HostVolume, error) { return p.API.CreateHostVolume(ctx, vol) })
}

// DeleteHostVolume implements API.
func (p *pacedAPI) DeleteHostVolume(ctx context.Context, namespace, id string) error {
	_, err := paced(ctx, p, func() (struct{}, error) { return struct{}{}, p.API.DeleteHostVolume(ctx, namespace, id) })
	return err
}

// EvaluateJob implements API.
func (p *pacedAPI) EvaluateJob(ctx context.Context, namespace, id string) error {
	_, err := paced(ctx, p, func() (struct{}, error) { return struct{}{}, p.API.EvaluateJob(ctx, namespace, id) })
	return err
}

package consul

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Defaults of ElectorConfig, and the bounds Consul puts on them.
//
// The timing rule the defaults satisfy, and that Validate enforces:
//
// Let t_ok be the moment this agent sent a session renewal (or the lock
// acquire) that Consul then accepted. The session was valid at some instant
// after t_ok, so whatever invalidates it later (TTL expiry, a failed node
// health check, an operator's `consul session destroy`, a Consul restart that
// loses it) happens at some T_inv > t_ok. Consul then refuses the lock to
// every other session until T_inv + LockDelay > t_ok + LockDelay.
//
// This agent cancels lead's context no later than t_ok + Lease, where
//
//	Lease = min(SessionTTL, LockDelay - StopTimeout)
//
// (the lease timer; sooner when the monitor sees the key change hands or
// fails MonitorRetries times in a row), and lead must return within
// StopTimeout of that. So this agent has stopped by
//
//	t_ok + Lease + StopTimeout  <=  t_ok + LockDelay  <  T_inv + LockDelay,
//
// before anyone else can hold the lock. With the defaults: Lease =
// min(15s, 15s-3s) = 12s, renewals every Lease/3 = 4s (two may fail before
// the lease runs out), the monitor gives up after 3 x 2s = 6s < 12s, and
// lead has 3s to stop: 12s + 3s = 15s = LockDelay.
//
// The rule rests on Consul honouring lock-delay, which its docs call "not a
// bulletproof method" (it is kept in the servers' memory; a full Consul
// restart forgets it). That is why every store write is also fenced by a
// check-session op, and Nomad writes by EnforceRegister.
const (
	// DefaultSessionTTL is the session TTL (high_availability { session_ttl }).
	DefaultSessionTTL = 15 * time.Second
	// DefaultLockDelay is the session lock-delay (high_availability { lock_delay }).
	DefaultLockDelay = 15 * time.Second
	// DefaultMonitorRetries is how many consecutive failed reads of the lock
	// key the monitor tolerates (high_availability { monitor_retries }).
	DefaultMonitorRetries = 3
	// DefaultMonitorRetryTime is the pause between the monitor's retries.
	DefaultMonitorRetryTime = 2 * time.Second
	// DefaultStopTimeout is how long lead may take to return after its
	// context is cancelled.
	DefaultStopTimeout = 3 * time.Second
	// DefaultSessionName names the session in `consul operator`/UI output.
	DefaultSessionName = "nomad-statefulset leader"

	// MinSessionTTL and MaxSessionTTL are Consul's bounds on a session TTL.
	MinSessionTTL = 10 * time.Second
	// MaxSessionTTL is Consul's upper bound on a session TTL.
	MaxSessionTTL = 24 * time.Hour
	// MaxLockDelay is Consul's upper bound on lock-delay.
	MaxLockDelay = 60 * time.Second
	// MinLease is the shortest lease Validate accepts: renewals every
	// Lease/3 must still leave room for a round trip to Consul.
	MinLease = 1500 * time.Millisecond

	// acquireRetry is the pause between acquire attempts while the key is
	// free but a lock-delay is in force, and after an error.
	acquireRetry = time.Second
	// maxBackoff caps the pause after repeated Consul errors.
	maxBackoff = 10 * time.Second
	// releaseTimeout bounds the release of the lock on shutdown.
	releaseTimeout = 5 * time.Second
)

// ElectorConfig configures leader election. Zero fields take the defaults.
type ElectorConfig struct {
	// LockKey is the KV key of the lock, e.g. DefaultLockKey(prefix). Required.
	LockKey string
	// SessionName names the Consul session. Default DefaultSessionName.
	SessionName string
	// SessionTTL is the session TTL, 10s to 24h. Default 15s.
	SessionTTL time.Duration
	// LockDelay is the session lock-delay, up to 60s: how long after the
	// session's invalidation Consul keeps the lock from everyone else.
	// Default 15s. It must exceed StopTimeout by at least MinLease.
	LockDelay time.Duration
	// MonitorRetries is how many consecutive failed reads of the lock key
	// the monitor tolerates before it gives leadership up. 0 means the
	// default, 3.
	MonitorRetries int
	// MonitorRetryTime is the pause between the monitor's retries. Default
	// 2s. MonitorRetries x MonitorRetryTime must be less than Lease().
	MonitorRetryTime time.Duration
	// StopTimeout is how long lead may take to return after its context is
	// cancelled. Default 3s. It is a promise the caller makes: the elector
	// cannot stop lead, it only logs an error when the promise is broken,
	// and the store refuses lead's writes from the moment of cancellation.
	StopTimeout time.Duration
	// Value is written into the lock key while held (for operators: who is
	// leader). Default "<hostname> pid <pid>".
	Value []byte
}

// WithDefaults returns the config with every zero field set to its default.
func (c ElectorConfig) WithDefaults() ElectorConfig {
	if c.SessionName == "" {
		c.SessionName = DefaultSessionName
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.LockDelay == 0 {
		c.LockDelay = DefaultLockDelay
	}
	if c.MonitorRetries == 0 {
		c.MonitorRetries = DefaultMonitorRetries
	}
	if c.MonitorRetryTime == 0 {
		c.MonitorRetryTime = DefaultMonitorRetryTime
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Value == nil {
		host, _ := os.Hostname()
		c.Value = []byte(fmt.Sprintf("%s pid %d", host, os.Getpid()))
	}
	return c
}

// Lease returns how long after its last accepted renewal the leader keeps
// acting without another: min(SessionTTL, LockDelay - StopTimeout).
func (c ElectorConfig) Lease() time.Duration {
	lease := c.LockDelay - c.StopTimeout
	if c.SessionTTL < lease {
		lease = c.SessionTTL
	}
	return lease
}

// RenewInterval returns how often the session is renewed: Lease()/3, so two
// renewals in a row may fail before the lease runs out.
func (c ElectorConfig) RenewInterval() time.Duration { return c.Lease() / 3 }

// CheckTiming checks the timing rule described at DefaultSessionTTL on c as
// it is (no defaults applied): the leader must have stopped acting before
// the lock-delay lets another agent in, and its lock monitor must give up
// within the lease. It is the one copy of the rule: the agent's config
// validation reports its error with the file position.
func (c ElectorConfig) CheckTiming() error {
	lease := c.Lease()
	if c.LockDelay-c.StopTimeout < MinLease {
		return fmt.Errorf("lock_delay %s must exceed the agent's stop timeout %s by at least %s: "+
			"the leader must have stopped acting (lease + stop timeout) before the lock-delay lets another agent in, "+
			"and a lease of %s leaves no room to renew the session", c.LockDelay, c.StopTimeout, MinLease, lease)
	}
	// In float seconds: a huge retry count would overflow a Duration.
	if mon := float64(c.MonitorRetries) * c.MonitorRetryTime.Seconds(); mon >= lease.Seconds() {
		return fmt.Errorf("monitor_retries x monitor_retry_time = %d x %s = %gs must be less than the lease "+
			"min(session_ttl %s, lock_delay %s - stop timeout %s) = %s: "+
			"otherwise a leader cut off from Consul would keep acting after it must already have stopped",
			c.MonitorRetries, c.MonitorRetryTime, mon, c.SessionTTL, c.LockDelay, c.StopTimeout, lease)
	}
	return nil
}

// Validate checks the config (after WithDefaults) against Consul's bounds
// and the timing rule described at DefaultSessionTTL.
func (c ElectorConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.LockKey == "" {
		errs = append(errs, errors.New("the lock key is empty"))
	}
	if c.SessionTTL < MinSessionTTL || c.SessionTTL > MaxSessionTTL {
		errs = append(errs, fmt.Errorf("session_ttl %s is outside Consul's range %s to %s", c.SessionTTL, MinSessionTTL, MaxSessionTTL))
	}
	if c.LockDelay < 0 || c.LockDelay > MaxLockDelay {
		errs = append(errs, fmt.Errorf("lock_delay %s is outside Consul's range 0s to %s", c.LockDelay, MaxLockDelay))
	}
	if c.StopTimeout < 0 {
		errs = append(errs, fmt.Errorf("stop_timeout %s is negative", c.StopTimeout))
	}
	if c.MonitorRetries < 0 || c.MonitorRetryTime < 0 {
		errs = append(errs, fmt.Errorf("monitor_retries %d and monitor_retry_time %s must not be negative", c.MonitorRetries, c.MonitorRetryTime))
	}
	if err := c.CheckTiming(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid high_availability config: %w", err)
	}
	return nil
}

// Elector is a backend.Elector on a Consul lock (a session and KV acquire).
// It is also the Fence of the leader's store: FenceToken returns the lock
// key and the current session only while this agent leads.
type Elector struct {
	client *api.Client
	cfg    ElectorConfig
	logger hclog.Logger

	running atomic.Bool
	leader  atomic.Bool

	mu      sync.Mutex
	session string    // the session holding the lock in the current term
	since   time.Time // when the current term began
	terms   uint64
	// problem is why the last attempt to create a session or take the lock
	// failed (Consul unreachable, or denied by ACLs), nil once one succeeds.
	problem error
}

var (
	_ backend.Elector = (*Elector)(nil)
	_ Fence           = (*Elector)(nil)
)

// NewElector returns an elector for cfg (zero fields take the defaults). An
// invalid config is reported by Run, and by cfg.Validate beforehand.
// logger may be nil.
func NewElector(client *api.Client, cfg ElectorConfig, logger hclog.Logger) *Elector {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Elector{client: client, cfg: cfg.WithDefaults(), logger: logger.Named("leader")}
}

// Config returns the elector's config with the defaults applied.
func (e *Elector) Config() ElectorConfig { return e.cfg }

// IsLeader implements backend.Elector.
func (e *Elector) IsLeader() bool { return e.leader.Load() }

// Terms returns how many times this elector has gained leadership.
func (e *Elector) Terms() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.terms
}

// Fence returns the fence for a Store used by this agent's leader: the
// elector itself.
func (e *Elector) Fence() Fence { return e }

// FenceToken implements Fence: the lock key and the current term's session,
// with ok false whenever this agent is not leading.
func (e *Elector) FenceToken() (key, session string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.LockKey, e.session, e.leader.Load() && e.session != ""
}

// LeaderSince returns when this agent gained leadership in the current
// term, or the zero time when it is not leading.
func (e *Elector) LeaderSince() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leader.Load() {
		return time.Time{}
	}
	return e.since
}

// Err returns why the elector can currently neither lead nor follow: the
// last error creating a session or taking the lock (Consul unreachable, or
// the token denied), or nil once an attempt succeeds. The agent shows it in
// /v1/health, because a denied token is retried, not fatal.
func (e *Elector) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.problem
}

func (e *Elector) setProblem(err error) {
	e.mu.Lock()
	e.problem = err
	e.mu.Unlock()
}

func (e *Elector) setLeader(session string) {
	e.mu.Lock()
	e.session = session
	if session != "" {
		e.terms++
		e.since = time.Now()
		e.problem = nil
	}
	e.leader.Store(session != "")
	e.mu.Unlock()
}

// Run implements backend.Elector. It returns nil when ctx is done, or an
// error at once if the config is invalid or Run is already running. When
// lead returns while this agent still leads, the lock is released and the
// elector campaigns again after a pause.
//
// Consul errors, a denied token included, are retried with backoff and
// reported by Err: an operator fixes a token's policy in Consul without
// restarting the agent, and an agent that exited on a denial would only be
// restarted by its supervisor into the same denial, a crash loop.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	if err := e.cfg.Validate(); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leader election: Run is already running")
	}
	defer e.running.Store(false)
	e.logger.Info("campaigning for leadership", "lock_key", e.cfg.LockKey,
		"session_ttl", e.cfg.SessionTTL, "lock_delay", e.cfg.LockDelay, "lease", e.cfg.Lease(),
		"monitor_retries", e.cfg.MonitorRetries, "monitor_retry_time", e.cfg.MonitorRetryTime,
		"stop_timeout", e.cfg.StopTimeout)

	var sess *session
	defer func() {
		if sess != nil {
			sess.close()
		}
	}()
	backoff := acquireRetry
	for ctx.Err() == nil {
		if sess == nil || sess.isGone() {
			if sess != nil {
				sess.close()
			}
			var err error
			sess, err = e.newSession(ctx)
			if isPermissionDenied(err) {
				err = e.deniedError(permSession, err)
			}
			if err != nil {
				e.setProblem(err)
				e.logger.Warn("cannot create a Consul session; retrying", "error", err, "retry_in", backoff)
				sleep(ctx, backoff)
				backoff = nextBackoff(backoff)
				continue
			}
		}
		if err := e.acquire(ctx, sess); err != nil {
			if isPermissionDenied(err) {
				err = e.deniedError(fmt.Sprintf(permLockKey, e.cfg.LockKey), err)
			}
			if ctx.Err() == nil {
				e.setProblem(err)
				e.logger.Warn("cannot acquire the leader lock; retrying", "error", err, "retry_in", backoff)
				sleep(ctx, backoff)
				backoff = nextBackoff(backoff)
			}
			continue
		}
		backoff = acquireRetry
		outcome := e.term(ctx, sess, lead)
		switch {
		case ctx.Err() != nil:
			if outcome.leadStopped {
				e.release(sess)
				sess = nil
			} else {
				// lead is still running: keep the lock until the session
				// expires, so the lock-delay still protects its writes.
				sess.abandon()
				sess = nil
				return errors.New("leader election: lead did not stop within stop_timeout; left the lock to expire")
			}
		case outcome.invalidated:
			sess.close()
			sess = nil
		case outcome.leadReturned:
			e.release(sess)
			sess = nil
			sleep(ctx, acquireRetry)
		}
		// Otherwise (lease expired, monitor gave up): keep the session. If
		// Consul still has it, the next acquire takes the lock straight
		// back; if not, the keeper notices and a new session is made.
	}
	return nil
}

// isPermissionDenied reports whether Consul refused a request for lack of
// ACL rights (or an unknown token).
func isPermissionDenied(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) && se.Code == 403 {
		return true
	}
	return err != nil && (strings.Contains(err.Error(), "Permission denied") || strings.Contains(err.Error(), "ACL not found"))
}

// The rights election needs, as deniedError names them.
const (
	permSession = `session:write (ACL rule session_prefix "" { policy = "write" })`
	permLockKey = `key:write on the lock key %q (ACL rule key_prefix "<kv_prefix>/" { policy = "write" })`
)

// deniedError is the error when the Consul token lacks a right election
// needs; missing names that right. It is logged at error level, and Run
// retries, since the policy can be fixed in Consul while the agent runs.
func (e *Elector) deniedError(missing string, err error) error {
	e.logger.Error("Consul denied leader election; the token lacks a right; fix its ACL policy (retrying)", "missing", missing, "lock_key", e.cfg.LockKey, "error", err)
	return fmt.Errorf("leader election: Consul denied the request; the token lacks %s: %w", missing, err)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func nextBackoff(d time.Duration) time.Duration {
	if d *= 2; d > maxBackoff {
		d = maxBackoff
	}
	return d
}

// newSession creates a session and starts renewing it.
func (e *Elector) newSession(ctx context.Context) (*session, error) {
	id, _, err := e.client.Session().Create(&api.SessionEntry{
		Name:      e.cfg.SessionName,
		TTL:       e.cfg.SessionTTL.String(),
		LockDelay: e.cfg.LockDelay,
		Behavior:  api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("creating session for lock %s: %w", e.cfg.LockKey, err)
	}
	s := &session{
		id:     id,
		client: e.client,
		logger: e.logger.With("session", id),
		gone:   make(chan struct{}),
		done:   make(chan struct{}),
		lastOK: time.Now(), // no earlier than the create was sent
	}
	kctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.keep(kctx, e.cfg.RenewInterval())
	e.logger.Debug("created session", "session", id)
	return s, nil
}

// acquire blocks until sess holds the lock, ctx is done, or an error.
func (e *Elector) acquire(ctx context.Context, sess *session) error {
	logged := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sess.isGone() {
			return errSessionGone
		}
		sent := time.Now()
		ok, _, err := e.client.KV().Acquire(&api.KVPair{Key: e.cfg.LockKey, Value: e.cfg.Value, Session: sess.id},
			(&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("acquiring %s: %w", e.cfg.LockKey, err)
		}
		e.setProblem(nil) // following (or about to lead) is not a problem
		if ok {
			// Consul checked the session in the same raft write: as good
			// as a renewal for the lease.
			sess.touch(sent)
			return nil
		}
		// Held by another session, or free under a lock-delay.
		pair, meta, err := e.client.KV().Get(e.cfg.LockKey, consistent(ctx))
		if err != nil {
			return fmt.Errorf("reading %s: %w", e.cfg.LockKey, err)
		}
		if pair == nil || pair.Session == "" {
			sleep(ctx, acquireRetry) // a lock-delay is in force
			continue
		}
		if !logged {
			e.logger.Info("the lock is held by another agent; following", "holder_session", pair.Session, "holder", string(pair.Value))
			logged = true
		}
		// Wait for the key to change (or the wait time to pass) and try again.
		if _, _, err := e.client.KV().Get(e.cfg.LockKey, (&api.QueryOptions{
			RequireConsistent: true, WaitIndex: meta.LastIndex, WaitTime: e.cfg.SessionTTL,
		}).WithContext(ctx)); err != nil {
			return fmt.Errorf("watching %s: %w", e.cfg.LockKey, err)
		}
	}
}

var errSessionGone = errors.New("the session was invalidated")

// termOutcome says how a leadership term ended.
type termOutcome struct {
	invalidated  bool // the session no longer holds the lock, or no longer exists
	leadReturned bool // lead returned on its own while still leading
	leadStopped  bool // lead has returned (always true unless shutting down)
}

// term runs lead while sess holds the lock and returns when leadership is
// lost, lead returns, or ctx is done. lead's context is cancelled the moment
// any of these is seen, and the fence closes before that.
func (e *Elector) term(ctx context.Context, sess *session, lead func(ctx context.Context) error) termOutcome {
	leadCtx, cancelLead := context.WithCancel(ctx)
	defer cancelLead()
	monCtx, stopMonitor := context.WithCancel(ctx)
	defer stopMonitor()

	e.setLeader(sess.id)
	started := time.Now()
	e.logger.Info("gained leadership", "session", sess.id, "term", e.Terms())

	lost := make(chan monitorResult, 1)
	go e.monitor(monCtx, sess.id, lost)
	leadDone := make(chan error, 1)
	go func() { leadDone <- lead(leadCtx) }()

	lease := e.cfg.Lease()
	timer := time.NewTimer(time.Until(sess.lastRenewed().Add(lease)))
	defer timer.Stop()

	var out termOutcome
	var reason string
	var leadErr error
	leadReturned := false
wait:
	for {
		select {
		case <-ctx.Done():
			reason = "shutting down"
			break wait
		case r := <-lost:
			reason, out.invalidated = r.reason, r.invalidated
			break wait
		case <-sess.gone:
			reason, out.invalidated = "the session was invalidated", true
			break wait
		case <-timer.C:
			if left := time.Until(sess.lastRenewed().Add(lease)); left > 0 {
				timer.Reset(left)
				continue
			}
			reason = fmt.Sprintf("no session renewal accepted within the lease (%s)", lease)
			break wait
		case leadErr = <-leadDone:
			leadReturned, out.leadReturned = true, true
			reason = "lead returned"
			break wait
		}
	}
	// Close the fence first, then cancel: from here on the store refuses
	// this agent's writes without asking Consul.
	e.setLeader("")
	cancelLead()
	stopMonitor()
	level := hclog.Warn
	if ctx.Err() != nil {
		level = hclog.Info
	}
	e.logger.Log(level, "lost leadership; cancelled all leader work", "reason", reason, "held_for", time.Since(started).Round(time.Millisecond))

	if !leadReturned {
		grace := time.NewTimer(e.cfg.StopTimeout)
		select {
		case leadErr = <-leadDone:
			grace.Stop()
		case <-grace.C:
			e.logger.Error("leader work did not stop within stop_timeout; its writes are fenced off, "+
				"but the lock-delay arithmetic no longer covers it", "stop_timeout", e.cfg.StopTimeout)
			if ctx.Err() != nil {
				return out
			}
			leadErr = <-leadDone
		}
	}
	out.leadStopped = true
	if leadErr != nil && !errors.Is(leadErr, context.Canceled) {
		e.logger.Error("leader work returned an error", "error", leadErr)
	}
	return out
}

type monitorResult struct {
	reason      string
	invalidated bool
}

// monitor watches the lock key with consistent blocking queries and reports
// when sessionID no longer holds it, or after MonitorRetries failed reads in
// a row.
func (e *Elector) monitor(ctx context.Context, sessionID string, lost chan<- monitorResult) {
	var waitIndex uint64
	failures := 0
	for ctx.Err() == nil {
		pair, meta, err := e.client.KV().Get(e.cfg.LockKey, (&api.QueryOptions{
			RequireConsistent: true, WaitIndex: waitIndex, WaitTime: e.cfg.Lease(),
		}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if failures > e.cfg.MonitorRetries {
				lost <- monitorResult{reason: fmt.Sprintf("cannot read the lock key after %d retries: %v", e.cfg.MonitorRetries, err)}
				return
			}
			e.logger.Warn("reading the lock key failed; retrying", "error", err, "retry", failures, "of", e.cfg.MonitorRetries)
			sleep(ctx, e.cfg.MonitorRetryTime)
			continue
		}
		failures = 0
		if pair == nil || pair.Session != sessionID {
			holder := ""
			if pair != nil {
				holder = pair.Session
			}
			lost <- monitorResult{reason: fmt.Sprintf("the lock key is now held by session %q", holder), invalidated: true}
			return
		}
		if meta.LastIndex < waitIndex {
			waitIndex = 0
		} else {
			waitIndex = meta.LastIndex
		}
	}
}

// release gives the lock up cleanly (no lock-delay for the next leader) and
// destroys the session. Only called once lead has returned.
func (e *Elector) release(sess *session) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, _, err := e.client.KV().Release(&api.KVPair{Key: e.cfg.LockKey, Session: sess.id}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		e.logger.Warn("releasing the leader lock failed; it frees when the session expires", "error", err)
	}
	sess.close()
}

// session is one Consul session and the goroutine that renews it.
type session struct {
	id     string
	client *api.Client
	logger hclog.Logger
	stop   context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	lastOK time.Time // when the last accepted renewal (or acquire) was sent

	gone     chan struct{} // closed when Consul no longer knows the session
	goneOnce sync.Once
}

func (s *session) touch(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.lastOK) {
		s.lastOK = sent
	}
	s.mu.Unlock()
}

func (s *session) lastRenewed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOK
}

func (s *session) markGone() { s.goneOnce.Do(func() { close(s.gone) }) }

func (s *session) isGone() bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}

// keep renews the session every interval until ctx is done, retrying
// failures every interval/4, and marks it gone when Consul says it is.
func (s *session) keep(ctx context.Context, interval time.Duration) {
	defer close(s.done)
	retry := interval / 4
	next := interval
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, interval)
		entry, _, err := s.client.Session().Renew(s.id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.logger.Warn("renewing the session failed; retrying", "error", err, "since_last_renewal", time.Since(s.lastRenewed()).Round(time.Millisecond))
			next = retry
		case entry == nil:
			s.logger.Warn("Consul no longer knows the session")
			s.markGone()
			return
		default:
			s.touch(sent)
			next = interval
		}
	}
}

// close stops renewing and destroys the session (best effort).
func (s *session) close() {
	s.stop()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := s.client.Session().Destroy(s.id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		s.logger.Debug("destroying the session failed; it expires on its own", "error", err)
	}
}

// abandon stops renewing but leaves the session to expire.
func (s *session) abandon() {
	s.stop()
	<-s.done
}

// Package consul keeps nomad-statefulset's state in Consul: each set's
// revision history and status in the KV store (Store), and the choice of
// the one agent that acts, through a Consul lock (Elector).
//
// KV layout, one subtree per namespace and set (every path segment is
// URL-path-escaped, so a "/" in a name cannot break out of its subtree):
//
//	<prefix>/<namespace>/<set>/status             {"v":1,"status":{...}}
//	<prefix>/<namespace>/<set>/revisions/<name>   {"v":1,"revision":{...}}
//
// The status value holds the conditions. The default prefix is
// DefaultPrefix. The leader lock key (DefaultLockKey) lives beside the sets
// under the same prefix, so one ACL key_prefix rule covers everything.
//
// Every write is a Consul transaction: a check-and-set on the key's
// ModifyIndex (or a delete-tree for DeleteSet), preceded, when the store is
// fenced, by a check-session op on the leader key. A write by an agent that
// has lost leadership therefore fails with backend.ErrNotLeader even if that
// agent has not yet noticed. Every read is consistent (RequireConsistent).
package consul

import (
	"context"
	"errors"
	"fmt"
	"github.com/nomad-statefulset/nomad-statefulset/backend/internal/codec"
	"net/url"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// DefaultPrefix is the KV prefix used when none is configured (consul
// { kv_prefix }).
const DefaultPrefix = "nomad-statefulset"

// DefaultLockKey returns the leader lock key for a KV prefix: "<prefix>/leader".
// It cannot collide with a set's keys, which are always three or more
// segments below the prefix.
func DefaultLockKey(prefix string) string {
	return normalizePrefix(prefix) + "/leader"
}

// Fence tells a Store which lock must still be held for a write to go
// through. The Elector is one; StaticFence is another.
type Fence interface {
	// FenceToken returns the leader key and the ID of the session that
	// holds it in the current leadership term. ok is false when this agent
	// is not the leader; the store then refuses the write with
	// backend.ErrNotLeader without asking Consul.
	FenceToken() (key, session string, ok bool)
}

// StaticFence is a Fence with a fixed key and session, for a caller that
// manages its own session (and for tests that play a deposed leader).
type StaticFence struct {
	// Key is the leader key.
	Key string
	// Session is the session ID that must hold Key.
	Session string
}

// FenceToken implements Fence; ok is false when Session is empty.
func (f StaticFence) FenceToken() (key, session string, ok bool) {
	return f.Key, f.Session, f.Session != ""
}

// Store is a backend.Store in Consul KV. It is safe for concurrent use.
//
// Check-and-set: the store remembers the ModifyIndex of every key it has read
// or written, and conditions its next write of that key on it. If anyone else
// changed the key in between, the write fails with backend.ErrConflict and
// the remembered index is dropped, so the caller's re-read (which the
// contract asks for) picks up the current value. A key the store has not seen
// is read (consistently) just before it is written.
type Store struct {
	kv     *api.KV
	prefix string
	fence  Fence
	logger hclog.Logger

	mu      sync.Mutex
	indexes map[string]uint64 // key -> last ModifyIndex seen
}

var _ backend.Store = (*Store)(nil)

// NewStore returns a store that keeps its state under prefix (DefaultPrefix
// if empty). If fence is nil, writes are only checked-and-set; otherwise
// each write also checks that fence's session still holds the leader key.
// logger may be nil.
func NewStore(client *api.Client, prefix string, fence Fence, logger hclog.Logger) *Store {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Store{
		kv:      client.KV(),
		prefix:  normalizePrefix(prefix),
		fence:   fence,
		logger:  logger.Named("consul_store"),
		indexes: make(map[string]uint64),
	}
}

// Prefix returns the KV prefix the store uses.
func (s *Store) Prefix() string { return s.prefix }

func normalizePrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return DefaultPrefix
	}
	return p
}

// escape makes a name into one KV path segment.
func escape(seg string) string {
	e := url.PathEscape(seg)
	if strings.Trim(e, ".") == "" { // "", "." and ".." are not path segments
		e = strings.ReplaceAll(e, ".", "%2E")
	}
	return e
}

func (s *Store) setPrefix(set backend.SetKey) string {
	return s.prefix + "/" + escape(set.Namespace) + "/" + escape(set.Name) + "/"
}

func (s *Store) statusKey(set backend.SetKey) string { return s.setPrefix(set) + "status" }

func (s *Store) revisionsPrefix(set backend.SetKey) string { return s.setPrefix(set) + "revisions/" }

// SetPrefix returns the KV subtree that holds a set's state, ending in "/".
func (s *Store) SetPrefix(set backend.SetKey) string { return s.setPrefix(set) }

func consistent(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
}

func (s *Store) remember(key string, index uint64) {
	s.mu.Lock()
	s.indexes[key] = index
	s.mu.Unlock()
}

func (s *Store) forget(key string) {
	s.mu.Lock()
	delete(s.indexes, key)
	s.mu.Unlock()
}

func (s *Store) forgetPrefix(prefix string) {
	s.mu.Lock()
	for k := range s.indexes {
		if strings.HasPrefix(k, prefix) {
			delete(s.indexes, k)
		}
	}
	s.mu.Unlock()
}

// expectedIndex returns the ModifyIndex a write of key must be conditioned
// on: the remembered one, or the current one read now (0 if the key does
// not exist).
func (s *Store) expectedIndex(ctx context.Context, key string) (uint64, error) {
	s.mu.Lock()
	idx, ok := s.indexes[key]
	s.mu.Unlock()
	if ok {
		return idx, nil
	}
	pair, _, err := s.kv.Get(key, consistent(ctx))
	if err != nil {
		return 0, fmt.Errorf("reading %s before writing it: %w", key, err)
	}
	if pair == nil {
		return 0, nil
	}
	return pair.ModifyIndex, nil
}

// fenceOps returns the check-session op that must start a write, nothing for
// an unfenced store, or backend.ErrNotLeader if the fence says this agent is
// not the leader.
func (s *Store) fenceOps() (api.KVTxnOps, error) {
	if s.fence == nil {
		return nil, nil
	}
	key, session, ok := s.fence.FenceToken()
	if !ok {
		return nil, backend.ErrNotLeader
	}
	return api.KVTxnOps{{Verb: api.KVCheckSession, Key: key, Session: session}}, nil
}

// write runs ops as one transaction behind the fence and returns the
// resulting pairs by key. what names the write for errors.
func (s *Store) write(ctx context.Context, what string, ops ...*api.KVTxnOp) (map[string]*api.KVPair, error) {
	fenceOps, err := s.fenceOps()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	all := append(fenceOps, ops...)
	ok, resp, _, err := s.kv.Txn(all, (&api.QueryOptions{}).WithContext(ctx))
	if isPermissionDenied(err) {
		return nil, fmt.Errorf("%s: Consul denied the write; the token needs key write on the prefix %q and read on the leader key: %w", what, s.prefix+"/", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: consul transaction: %w", what, err)
	}
	if !ok {
		return nil, s.txnError(what, len(fenceOps) > 0, resp)
	}
	out := make(map[string]*api.KVPair, len(resp.Results))
	for _, p := range resp.Results {
		if p != nil {
			out[p.Key] = p
		}
	}
	return out, nil
}

// txnError turns a rolled-back transaction into ErrNotLeader (the fence op
// failed), a permission error, or ErrConflict (a check-and-set lost).
func (s *Store) txnError(what string, fenced bool, resp *api.KVTxnResponse) error {
	var msgs []string
	notLeader, denied := false, false
	if resp != nil {
		for _, e := range resp.Errors {
			msgs = append(msgs, e.What)
			switch {
			case strings.Contains(e.What, "Permission denied") || strings.Contains(e.What, "ACL not found"):
				denied = true
			case fenced && e.OpIndex == 0:
				notLeader = true
			}
		}
	}
	detail := strings.Join(msgs, "; ")
	switch {
	case denied:
		return fmt.Errorf("%s: Consul denied the write; the token needs key write on the prefix %q and read on the leader key: %s", what, s.prefix+"/", detail)
	case notLeader:
		s.logger.Warn("fenced write refused: this agent no longer holds the leader lock", "write", what, "consul_error", detail)
		return fmt.Errorf("%s: %w (%s)", what, backend.ErrNotLeader, detail)
	default:
		return fmt.Errorf("%s: %w (%s)", what, backend.ErrConflict, detail)
	}
}

// ListRevisions implements backend.Store. If any revision of the set does
// not decode, the call fails with a *backend.CorruptValueError naming its
// key; other sets are unaffected.
func (s *Store) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	if err := set.Validate(); err != nil {
		return nil, fmt.Errorf("listing revisions: %w", err)
	}
	prefix := s.revisionsPrefix(set)
	pairs, _, err := s.kv.List(prefix, consistent(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing revisions of %s from consul: %w", set, err)
	}
	out := make([]reconciler.Revision, 0, len(pairs))
	seen := make(map[string]uint64, len(pairs))
	for _, p := range pairs {
		seen[p.Key] = p.ModifyIndex
		r, err := s.decodeRevisionPair(set, prefix, p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	s.forgetPrefix(prefix)
	for k, idx := range seen {
		s.remember(k, idx)
	}
	return out, nil
}

// decodeRevisionPair decodes a revision stored at p.Key below revPrefix; a
// value that does not decode is a CorruptValueError naming its key.
func (s *Store) decodeRevisionPair(set backend.SetKey, revPrefix string, p *api.KVPair) (reconciler.Revision, error) {
	name, uerr := url.PathUnescape(strings.TrimPrefix(p.Key, revPrefix))
	if uerr != nil {
		name = ""
	}
	r, err := codec.DecodeRevision(p.Value, name)
	if err != nil {
		s.logger.Warn("corrupt revision value", "set", set.String(), "key", p.Key, "error", err)
		return r, fmt.Errorf("listing revisions of %s: %w", set, &backend.CorruptValueError{Key: p.Key, Err: err})
	}
	return r, nil
}

// decodeStatusPair decodes a set's status value; a value that does not
// decode is a CorruptValueError naming its key.
func (s *Store) decodeStatusPair(set backend.SetKey, p *api.KVPair) (reconciler.Status, error) {
	st, err := codec.DecodeStatus(p.Value)
	if err != nil {
		s.logger.Warn("corrupt status value", "set", set.String(), "key", p.Key, "error", err)
		return st, fmt.Errorf("reading status of %s: %w", set, &backend.CorruptValueError{Key: p.Key, Err: err})
	}
	return st, nil
}

// ReadSet implements backend.SetReader with one consistent read of the
// set's subtree: its status and its revisions. Keys of the subtree that are
// neither are left alone, as ListRevisions and GetStatus leave them.
func (s *Store) ReadSet(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, reconciler.Status, bool, error) {
	if err := set.Validate(); err != nil {
		return nil, reconciler.Status{}, false, fmt.Errorf("reading the state of a set: %w", err)
	}
	prefix, revPrefix, statusKey := s.setPrefix(set), s.revisionsPrefix(set), s.statusKey(set)
	pairs, _, err := s.kv.List(prefix, consistent(ctx))
	if err != nil {
		return nil, reconciler.Status{}, false, fmt.Errorf("reading the state of %s from consul: %w", set, err)
	}
	revs := make([]reconciler.Revision, 0, len(pairs))
	var status reconciler.Status
	found := false
	seen := make(map[string]uint64, len(pairs))
	for _, p := range pairs {
		switch {
		case p.Key == statusKey:
			st, err := s.decodeStatusPair(set, p)
			if err != nil {
				return nil, reconciler.Status{}, false, err
			}
			status, found = st, true
		case strings.HasPrefix(p.Key, revPrefix):
			r, err := s.decodeRevisionPair(set, revPrefix, p)
			if err != nil {
				return nil, reconciler.Status{}, false, err
			}
			revs = append(revs, r)
		default:
			continue
		}
		seen[p.Key] = p.ModifyIndex
	}
	// What the two reads would remember: every revision's index, and the
	// status's or that there is none.
	s.forgetPrefix(revPrefix)
	s.forget(statusKey)
	for k, idx := range seen {
		s.remember(k, idx)
	}
	return revs, status, found, nil
}

// PutRevision implements backend.Store as a check-and-set.
func (s *Store) PutRevision(ctx context.Context, set backend.SetKey, rev reconciler.Revision) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("storing revision %q: %w", rev.Name, err)
	}
	if rev.Name == "" {
		return fmt.Errorf("storing a revision of %s: the revision has no name", set)
	}
	what := fmt.Sprintf("storing revision %q of %s", rev.Name, set)
	raw, err := codec.EncodeRevision(rev)
	if err != nil {
		return fmt.Errorf("%s: encoding: %w", what, err)
	}
	return s.cas(ctx, what, s.revisionsPrefix(set)+escape(rev.Name), raw)
}

// GetStatus implements backend.Store. A status that does not decode fails
// the call with a *backend.CorruptValueError naming its key.
func (s *Store) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	if err := set.Validate(); err != nil {
		return reconciler.Status{}, false, fmt.Errorf("reading status: %w", err)
	}
	key := s.statusKey(set)
	p, _, err := s.kv.Get(key, consistent(ctx))
	if err != nil {
		return reconciler.Status{}, false, fmt.Errorf("reading status of %s from consul: %w", set, err)
	}
	if p == nil {
		s.forget(key)
		return reconciler.Status{}, false, nil
	}
	s.remember(key, p.ModifyIndex)
	st, err := s.decodeStatusPair(set, p)
	if err != nil {
		return reconciler.Status{}, false, err
	}
	return st, true, nil
}

// PutStatus implements backend.Store as a check-and-set.
func (s *Store) PutStatus(ctx context.Context, set backend.SetKey, status reconciler.Status) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("storing status: %w", err)
	}
	what := fmt.Sprintf("storing status of %s", set)
	raw, err := codec.EncodeStatus(status)
	if err != nil {
		return fmt.Errorf("%s: encoding: %w", what, err)
	}
	return s.cas(ctx, what, s.statusKey(set), raw)
}

// cas writes value to key conditioned on the key's expected ModifyIndex.
func (s *Store) cas(ctx context.Context, what, key string, value []byte) error {
	idx, err := s.expectedIndex(ctx, key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	res, err := s.write(ctx, what, &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: value, Index: idx})
	if err != nil {
		s.forget(key)
		return err
	}
	if p := res[key]; p != nil {
		s.remember(key, p.ModifyIndex)
	} else {
		s.forget(key)
	}
	s.logger.Trace("wrote", "key", key, "cas_index", idx)
	return nil
}

// DeleteRevision implements backend.Store as a check-and-set delete.
func (s *Store) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("deleting revision %q: %w", name, err)
	}
	if name == "" {
		return nil
	}
	what := fmt.Sprintf("deleting revision %q of %s", name, set)
	key := s.revisionsPrefix(set) + escape(name)
	idx, err := s.expectedIndex(ctx, key)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if idx == 0 {
		// Missing: nothing to delete. Still honour the fence, so that a
		// deposed leader learns it is deposed from every write it tries.
		if _, err := s.fenceOps(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	_, err = s.write(ctx, what, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: idx})
	s.forget(key)
	return err
}

// DeleteSet implements backend.Store: it deletes the set's whole subtree in
// one fenced transaction.
func (s *Store) DeleteSet(ctx context.Context, set backend.SetKey) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("deleting set state: %w", err)
	}
	prefix := s.setPrefix(set)
	_, err := s.write(ctx, fmt.Sprintf("deleting state of %s", set), &api.KVTxnOp{Verb: api.KVDeleteTree, Key: prefix})
	s.forgetPrefix(prefix)
	return err
}

// ListSets implements backend.Store. It reads keys only, so a corrupt value
// does not hide its set.
func (s *Store) ListSets(ctx context.Context) ([]backend.SetKey, error) {
	root := s.prefix + "/"
	keys, _, err := s.kv.Keys(root, "", consistent(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing sets from consul under %s: %w", root, err)
	}
	seen := make(map[backend.SetKey]bool)
	out := []backend.SetKey{}
	for _, k := range keys {
		parts := strings.Split(strings.TrimPrefix(k, root), "/")
		// <ns>/<set>/status or <ns>/<set>/revisions/<name>; anything else
		// (the leader key, strays) is not a set.
		if !(len(parts) == 3 && parts[2] == "status") && !(len(parts) == 4 && parts[2] == "revisions") {
			continue
		}
		ns, err1 := url.PathUnescape(parts[0])
		name, err2 := url.PathUnescape(parts[1])
		if err := errors.Join(err1, err2); err != nil || ns == "" || name == "" {
			s.logger.Warn("ignoring a key that is not a set's", "key", k)
			continue
		}
		set := backend.SetKey{Namespace: ns, Name: name}
		if !seen[set] {
			seen[set] = true
			out = append(out, set)
		}
	}
	return out, nil
}

// Close implements backend.Store. The Consul client is the caller's and is
// left open.
func (s *Store) Close() error { return nil }

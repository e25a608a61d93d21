// Package bolt is the embedded, persistent backend.Store used by -dev and by
// single agents without Consul. It keeps every set's revision history and
// status in one bbolt file, so they survive a restart.
//
// Layout inside the file:
//
//	meta/format                    "1"
//	sets/<namespace>/<set>/status  {"v":1,"status":{...}}
//	sets/<namespace>/<set>/revisions/<name>  {"v":1,"revision":{...}}
//
// where sets, <namespace>, <set> and revisions are nested buckets. The value
// format is the one backend/consul writes.
package bolt

import (
	"context"
	stderrors "errors"
	"fmt"
	"github.com/nomad-statefulset/nomad-statefulset/backend/internal/codec"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// LockTimeout is how long Open waits for the file lock that another process
// holds before giving up with a clear error.
const LockTimeout = 2 * time.Second

var (
	bucketMeta      = []byte("meta")
	bucketSets      = []byte("sets")
	bucketRevisions = []byte("revisions")
	keyFormat       = []byte("format")
	keyStatus       = []byte("status")
)

// Store is a backend.Store on a bbolt file. It is safe for concurrent use;
// bbolt serialises writers, so it never returns backend.ErrConflict.
type Store struct {
	db   *bbolt.DB
	path string
}

var _ backend.Store = (*Store)(nil)

// Open opens, or creates, the store file at path. Parent directories are
// created. If another process holds the file open, Open fails after
// LockTimeout with an error that says so.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("opening state store: no file path given")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("opening state store %s: creating its directory: %w", path, err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: LockTimeout})
	if stderrors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("opening state store %s: the file is locked by another process "+
			"(is another nomad-statefulset agent using the same data directory?), gave up after %s: %w", path, LockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening state store %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		want := []byte(strconv.Itoa(codec.FormatVersion))
		switch got := meta.Get(keyFormat); {
		case got == nil:
			if err := meta.Put(keyFormat, want); err != nil {
				return err
			}
		case string(got) != string(want):
			return fmt.Errorf("the file has format %q and this release reads format %q", got, want)
		}
		_, err = tx.CreateBucketIfNotExists(bucketSets)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening state store %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// setBucket returns the set's bucket, or nil when the set has no state.
func setBucket(tx *bbolt.Tx, set backend.SetKey) *bbolt.Bucket {
	ns := tx.Bucket(bucketSets).Bucket([]byte(set.Namespace))
	if ns == nil {
		return nil
	}
	return ns.Bucket([]byte(set.Name))
}

func createSetBucket(tx *bbolt.Tx, set backend.SetKey) (*bbolt.Bucket, error) {
	ns, err := tx.Bucket(bucketSets).CreateBucketIfNotExists([]byte(set.Namespace))
	if err != nil {
		return nil, err
	}
	return ns.CreateBucketIfNotExists([]byte(set.Name))
}

// dropIfEmpty removes the set's bucket, and its namespace's, once they hold
// nothing, so ListSets reports only sets with state.
func dropIfEmpty(tx *bbolt.Tx, set backend.SetKey) error {
	ns := tx.Bucket(bucketSets).Bucket([]byte(set.Namespace))
	if ns == nil {
		return nil
	}
	if b := ns.Bucket([]byte(set.Name)); b != nil {
		if b.Get(keyStatus) != nil {
			return nil
		}
		if revs := b.Bucket(bucketRevisions); revs != nil {
			if k, _ := revs.Cursor().First(); k != nil {
				return nil
			}
		}
		if err := ns.DeleteBucket([]byte(set.Name)); err != nil {
			return err
		}
	}
	if k, _ := ns.Cursor().First(); k == nil {
		return tx.Bucket(bucketSets).DeleteBucket([]byte(set.Namespace))
	}
	return nil
}

func (s *Store) view(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

func (s *Store) update(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

func (s *Store) revisionKey(set backend.SetKey, name string) string {
	return fmt.Sprintf("%s:sets/%s/%s/revisions/%s", s.path, set.Namespace, set.Name, name)
}

// ListRevisions implements backend.Store. A revision that does not decode
// fails the call with a *backend.CorruptValueError naming it.
func (s *Store) ListRevisions(ctx context.Context, set backend.SetKey) ([]reconciler.Revision, error) {
	if err := set.Validate(); err != nil {
		return nil, fmt.Errorf("listing revisions: %w", err)
	}
	out := []reconciler.Revision{}
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		b := setBucket(tx, set)
		if b == nil {
			return nil
		}
		revs := b.Bucket(bucketRevisions)
		if revs == nil {
			return nil
		}
		return revs.ForEach(func(k, v []byte) error {
			// bbolt values are only valid inside the transaction; the
			// decoder copies what it keeps.
			r, err := codec.DecodeRevision(v, string(k))
			if err != nil {
				return &backend.CorruptValueError{Key: s.revisionKey(set, string(k)), Err: err}
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing revisions of %s: %w", set, err)
	}
	return out, nil
}

// PutRevision implements backend.Store.
func (s *Store) PutRevision(ctx context.Context, set backend.SetKey, rev reconciler.Revision) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("storing revision %q: %w", rev.Name, err)
	}
	if rev.Name == "" {
		return fmt.Errorf("storing a revision of %s: the revision has no name", set)
	}
	raw, err := codec.EncodeRevision(rev)
	if err != nil {
		return fmt.Errorf("storing revision %q of %s: encoding: %w", rev.Name, set, err)
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		b, err := createSetBucket(tx, set)
		if err != nil {
			return err
		}
		revs, err := b.CreateBucketIfNotExists(bucketRevisions)
		if err != nil {
			return err
		}
		return revs.Put([]byte(rev.Name), raw)
	})
	if err != nil {
		return fmt.Errorf("storing revision %q of %s: %w", rev.Name, set, err)
	}
	return nil
}

// DeleteRevision implements backend.Store.
func (s *Store) DeleteRevision(ctx context.Context, set backend.SetKey, name string) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("deleting revision %q: %w", name, err)
	}
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := setBucket(tx, set)
		if b == nil || name == "" {
			return nil
		}
		if revs := b.Bucket(bucketRevisions); revs != nil {
			if err := revs.Delete([]byte(name)); err != nil {
				return err
			}
		}
		return dropIfEmpty(tx, set)
	})
	if err != nil {
		return fmt.Errorf("deleting revision %q of %s: %w", name, set, err)
	}
	return nil
}

// GetStatus implements backend.Store. A status that does not decode fails
// the call with a *backend.CorruptValueError naming it.
func (s *Store) GetStatus(ctx context.Context, set backend.SetKey) (reconciler.Status, bool, error) {
	if err := set.Validate(); err != nil {
		return reconciler.Status{}, false, fmt.Errorf("reading status: %w", err)
	}
	var (
		st    reconciler.Status
		found bool
	)
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		b := setBucket(tx, set)
		if b == nil {
			return nil
		}
		raw := b.Get(keyStatus)
		if raw == nil {
			return nil
		}
		var err error
		st, err = codec.DecodeStatus(raw)
		if err != nil {
			return &backend.CorruptValueError{
				Key: fmt.Sprintf("%s:sets/%s/%s/status", s.path, set.Namespace, set.Name), Err: err}
		}
		found = true
		return nil
	})
	if err != nil {
		return reconciler.Status{}, false, fmt.Errorf("reading status of %s: %w", set, err)
	}
	return st, found, nil
}

// PutStatus implements backend.Store.
func (s *Store) PutStatus(ctx context.Context, set backend.SetKey, status reconciler.Status) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("storing status: %w", err)
	}
	raw, err := codec.EncodeStatus(status)
	if err != nil {
		return fmt.Errorf("storing status of %s: encoding: %w", set, err)
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		b, err := createSetBucket(tx, set)
		if err != nil {
			return err
		}
		return b.Put(keyStatus, raw)
	})
	if err != nil {
		return fmt.Errorf("storing status of %s: %w", set, err)
	}
	return nil
}

// DeleteSet implements backend.Store.
func (s *Store) DeleteSet(ctx context.Context, set backend.SetKey) error {
	if err := set.Validate(); err != nil {
		return fmt.Errorf("deleting set state: %w", err)
	}
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		ns := tx.Bucket(bucketSets).Bucket([]byte(set.Namespace))
		if ns == nil || ns.Bucket([]byte(set.Name)) == nil {
			return nil
		}
		if err := ns.DeleteBucket([]byte(set.Name)); err != nil {
			return err
		}
		return dropIfEmpty(tx, set)
	})
	if err != nil {
		return fmt.Errorf("deleting state of %s: %w", set, err)
	}
	return nil
}

// ListSets implements backend.Store.
func (s *Store) ListSets(ctx context.Context) ([]backend.SetKey, error) {
	out := []backend.SetKey{}
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketSets).ForEachBucket(func(ns []byte) error {
			return tx.Bucket(bucketSets).Bucket(ns).ForEachBucket(func(name []byte) error {
				out = append(out, backend.SetKey{Namespace: string(ns), Name: string(name)})
				return nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing sets: %w", err)
	}
	return out, nil
}

// Close implements backend.Store: it releases the file and its lock.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing state store %s: %w", s.path, err)
	}
	return nil
}

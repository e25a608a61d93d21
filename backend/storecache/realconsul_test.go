//go:build realagents

package storecache_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storecache"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// These tests put the cache in front of the Consul store on a real Consul
// agent (internal/testagent), as the agent does. A missing consul binary
// fails them with testagent's message; run `make tools` first.

// TestStoreContractOnRealConsul: in front of the fenced Consul store, the
// cache is a store.
func TestStoreContractOnRealConsul(t *testing.T) {
	agent := testagent.Consul(t)
	storetest.Run(t, func(t *testing.T) backend.Store {
		prefix := "contract/" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		key := consul.DefaultLockKey(prefix)
		return storecache.New(consul.NewStore(agent.Client, prefix, consul.StaticFence{Key: key, Session: agent.HoldLock(t, key)}, hclog.NewNullLogger()))
	})
}

// TestCacheOnRealConsulHealsAfterAConflict: another writer changes a set's
// status in Consul (a hand edit, a second agent). The cache still serves
// what it read, but its next write is a check-and-set on the index it
// read, which Consul refuses; the next read then returns what Consul
// holds, and the write after it goes through.
func TestCacheOnRealConsulHealsAfterAConflict(t *testing.T) {
	agent := testagent.Consul(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "heal"
	key := consul.DefaultLockKey(prefix)
	fence := consul.StaticFence{Key: key, Session: agent.HoldLock(t, key)}
	cached := storecache.New(consul.NewStore(agent.Client, prefix, fence, hclog.NewNullLogger()))
	other := consul.NewStore(agent.Client, prefix, fence, hclog.NewNullLogger())

	if err := cached.PutStatus(ctx, web, status(3, "web-a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.GetStatus(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := other.PutStatus(ctx, web, status(9, "web-z")); err != nil {
		t.Fatal(err)
	}
	if st, _, err := cached.GetStatus(ctx, web); err != nil || st.Replicas != 3 {
		t.Fatalf("before its next write the cache serves %+v (%v), want what it wrote", st, err)
	}
	if err := cached.PutStatus(ctx, web, status(4, "web-a")); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("a write over the other writer's: %v, want ErrConflict", err)
	}
	st, _, err := cached.GetStatus(ctx, web)
	if err != nil || st.Replicas != 9 || st.UpdateRevision != "web-z" {
		t.Fatalf("after the conflict the cache reads %+v (%v), want the other writer's", st, err)
	}
	if err := cached.PutStatus(ctx, web, status(4, "web-z")); err != nil {
		t.Fatalf("the write after the re-read: %v", err)
	}
}

// TestCacheOnRealConsulReturnsWhatConsulReturns: what the cache keeps of a
// write is what a fresh read of Consul returns, times and all.
func TestCacheOnRealConsulReturnsWhatConsulReturns(t *testing.T) {
	agent := testagent.Consul(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "same"
	cached := storecache.New(consul.NewStore(agent.Client, prefix, nil, hclog.NewNullLogger()))
	fresh := consul.NewStore(agent.Client, prefix, nil, hclog.NewNullLogger())
	// A status and a revision stamped with the local clock, monotonic
	// reading and all, as the agent's are.
	now := time.Now()
	st := status(5, "web-b")
	st.LastProgressTime = now
	st.Conditions[0].LastTransitionTime = now
	rev := revision("web-b", 2)
	rev.CreatedAt = now
	if err := cached.PutRevision(ctx, web, revision("web-a", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := cached.ListRevisions(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := cached.PutRevision(ctx, web, rev); err != nil {
		t.Fatal(err)
	}
	if err := cached.PutStatus(ctx, web, st); err != nil {
		t.Fatal(err)
	}
	gotRevs, gotSt, _ := read(t, cached)
	wantRevs, err := fresh.ListRevisions(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	wantSt, _, err := fresh.GetStatus(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotSt, wantSt) {
		t.Fatalf("the cache returns the status\n%+v\nConsul returns\n%+v", gotSt, wantSt)
	}
	if !reflect.DeepEqual(byName(gotRevs), byName(wantRevs)) {
		t.Fatalf("the cache returns the revisions\n%+v\nConsul returns\n%+v", gotRevs, wantRevs)
	}
}

func byName(revs []reconciler.Revision) map[string]reconciler.Revision {
	out := map[string]reconciler.Revision{}
	for _, r := range revs {
		out[r.Name] = r
	}
	return out
}

package memory

import (
	"context"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/storetest"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) backend.Store { return NewStore() })
}

func TestStoreClosed(t *testing.T) {
	s := NewStore()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.PutStatus(context.Background(), backend.SetKey{Namespace: "default", Name: "web"}, reconciler.Status{}); err == nil {
		t.Fatal("PutStatus on a closed store: no error")
	}
}

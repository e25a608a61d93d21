package codec

import (
	"reflect"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestRecreateStoppedRoundTrip: the record that a Recreate stopped an
// ordinal's pod survives the store, and splits a run of records, so that a
// new leader knows the stop is under way and asks nothing again.
func TestRecreateStoppedRoundTrip(t *testing.T) {
	recs := []reconciler.OrdinalRecord{
		{Ordinal: 0, Revision: "web-a", RevisionNumber: 1, RecreateStopped: true},
		{Ordinal: 1, Revision: "web-a", RevisionNumber: 1, RecreateStopped: true},
		{Ordinal: 2, Revision: "web-a", RevisionNumber: 1},
	}
	raw, err := EncodeStatus(reconciler.Status{Ordinals: recs})
	if err != nil {
		t.Fatal(err)
	}
	st, err := DecodeStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Ordinals, recs) {
		t.Fatalf("records %+v, want %+v", st.Ordinals, recs)
	}
}

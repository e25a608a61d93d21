package codec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestOrdinalRecordsRoundTrip: the records come back as they were stored,
// and a set of many ordinals at one revision is stored as one run, so that
// a large set's status stays far below Consul's value size limit.
func TestOrdinalRecordsRoundTrip(t *testing.T) {
	var recs []reconciler.OrdinalRecord
	for o := 0; o < 10000; o++ {
		recs = append(recs, reconciler.OrdinalRecord{Ordinal: o, Revision: "web-abc", RevisionNumber: 3})
	}
	recs = append(recs,
		reconciler.OrdinalRecord{Ordinal: 10000, Revision: "web-abc", RevisionNumber: 3, Condemned: true, DeleteVolumes: true},
		reconciler.OrdinalRecord{Ordinal: 10002, Condemned: true},
		reconciler.OrdinalRecord{Ordinal: 10003, Revision: "web-abc", RevisionNumber: 3, Replaced: "2026-11-24T10:00:00Z"})
	raw, err := EncodeStatus(reconciler.Status{Replicas: 10000, Ordinals: recs})
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 1024 {
		t.Fatalf("status of 10,004 records is %d bytes, want runs (< 1 KiB)", len(raw))
	}
	st, err := DecodeStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Ordinals, recs) {
		t.Fatalf("records changed in the round trip")
	}
}

// TestOrdinalRecordsCorrupt: runs out of order, overlapping, negative or
// too large are reported, not expanded.
func TestOrdinalRecordsCorrupt(t *testing.T) {
	for _, tc := range []struct{ runs, want string }{
		{`[{"from":3,"to":1}]`, "out of order"},
		{`[{"from":0,"to":4},{"from":4,"to":6}]`, "out of order"},
		{`[{"from":-1,"to":1}]`, "negative"},
		{`[{"from":0,"to":999999999}]`, "more than"},
	} {
		raw := `{"v":1,"status":{"ordinals":` + tc.runs + `}}`
		if _, err := DecodeStatus([]byte(raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeStatus(%s) = %v, want an error containing %q", tc.runs, err, tc.want)
		}
	}
}

// TestOldStatusReadsWithoutRecords: a status written before records existed
// (with populated_ordinals_end) reads as one without records.
func TestOldStatusReadsWithoutRecords(t *testing.T) {
	old, _ := json.Marshal(map[string]any{"v": 1, "status": map[string]any{"replicas": 3, "populated_ordinals_end": 3}})
	st, err := DecodeStatus(old)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 3 || st.Ordinals != nil {
		t.Fatalf("old status read as %+v", st)
	}
}

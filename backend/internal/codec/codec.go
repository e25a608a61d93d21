// Package codec is the stored form of revisions and status, shared by every
// persistent store (backend/consul and backend/bolt) so that both write the
// same versioned format.
package codec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// FormatVersion is the version of the stored value format, written as the
// "v" field of every value. A later release that changes the format bumps it
// and migrates older values; this release reports any other version as a
// *backend.CorruptValueError rather than guess.
const FormatVersion = 1

// The records below are the stored form. They are separate from the
// reconciler types on purpose: a change to those types must not silently
// change what is on disk.

type revisionRecord struct {
	V        int         `json:"v"`
	Revision *revisionV1 `json:"revision"`
}

type revisionV1 struct {
	Name       string    `json:"name"`
	Hash       string    `json:"hash"`
	Number     int64     `json:"number"`
	Data       []byte    `json:"data"`
	CreatedAt  time.Time `json:"created_at"`
	JobVersion uint64    `json:"job_version"`
}

type statusRecord struct {
	V      int       `json:"v"`
	Status *statusV1 `json:"status"`
}

type statusV1 struct {
	ObservedGeneration uint64        `json:"observed_generation"`
	Replicas           int           `json:"replicas"`
	ReadyReplicas      int           `json:"ready_replicas"`
	AvailableReplicas  int           `json:"available_replicas"`
	CurrentReplicas    int           `json:"current_replicas"`
	UpdatedReplicas    int           `json:"updated_replicas"`
	CurrentRevision    string        `json:"current_revision"`
	UpdateRevision     string        `json:"update_revision"`
	CollisionCount     int           `json:"collision_count"`
	Conditions         []conditionV1 `json:"conditions"`
	LastProgressTime   time.Time     `json:"last_progress_time"`
	// Ordinals was added within format 1 (it replaced
	// populated_ordinals_end, which is now ignored): absent reads as no
	// records, which keeps every volume and lets the next reconcile record
	// the members afresh. Runs of consecutive ordinals with the same record
	// are stored once, so a set of any size at one revision is one entry.
	Ordinals []ordinalRunV1 `json:"ordinals,omitempty"`
	// ApprovalUsed was added within format 1: absent reads as no token
	// used, so an approval given before an upgrade is good once more.
	ApprovalUsed string `json:"approval_used,omitempty"`
}

// ordinalRunV1 is the record of the ordinals From..To (inclusive).
type ordinalRunV1 struct {
	From           int    `json:"from"`
	To             int    `json:"to"`
	Revision       string `json:"revision,omitempty"`
	RevisionNumber int64  `json:"revision_number,omitempty"`
	Condemned      bool   `json:"condemned,omitempty"`
	DeleteVolumes  bool   `json:"delete_volumes,omitempty"`
	Replaced       string `json:"replaced,omitempty"`
	// RecreateStopped was added within format 1: absent reads as no
	// Recreate under way, which at worst asks the disruption check once
	// more.
	RecreateStopped bool `json:"recreate_stopped,omitempty"`
}

// maxStoredOrdinals bounds how many ordinals a stored status may expand to,
// so that a corrupt value cannot make the reader allocate without limit.
const maxStoredOrdinals = 1 << 20

func encodeOrdinals(recs []reconciler.OrdinalRecord) []ordinalRunV1 {
	var runs []ordinalRunV1
	for _, r := range recs {
		if n := len(runs); n > 0 {
			last := &runs[n-1]
			if last.To+1 == r.Ordinal && last.Revision == r.Revision && last.RevisionNumber == r.RevisionNumber &&
				last.Condemned == r.Condemned && last.DeleteVolumes == r.DeleteVolumes && last.Replaced == r.Replaced &&
				last.RecreateStopped == r.RecreateStopped {
				last.To = r.Ordinal
				continue
			}
		}
		runs = append(runs, ordinalRunV1{From: r.Ordinal, To: r.Ordinal, Revision: r.Revision,
			RevisionNumber: r.RevisionNumber, Condemned: r.Condemned, DeleteVolumes: r.DeleteVolumes, Replaced: r.Replaced,
			RecreateStopped: r.RecreateStopped})
	}
	return runs
}

func decodeOrdinals(runs []ordinalRunV1) ([]reconciler.OrdinalRecord, error) {
	var recs []reconciler.OrdinalRecord
	next := -1
	for _, run := range runs {
		if run.From < 0 || run.To < run.From || run.From <= next {
			return nil, fmt.Errorf("ordinal run %d..%d is out of order or negative", run.From, run.To)
		}
		if len(recs)+(run.To-run.From+1) > maxStoredOrdinals {
			return nil, fmt.Errorf("ordinal records cover more than %d ordinals", maxStoredOrdinals)
		}
		for o := run.From; o <= run.To; o++ {
			recs = append(recs, reconciler.OrdinalRecord{Ordinal: o, Revision: run.Revision, RevisionNumber: run.RevisionNumber,
				Condemned: run.Condemned, DeleteVolumes: run.DeleteVolumes, Replaced: run.Replaced, RecreateStopped: run.RecreateStopped})
		}
		next = run.To
	}
	return recs, nil
}

type conditionV1 struct {
	Type               string    `json:"type"`
	Status             bool      `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

// versionProbe reads only the version, so an unknown version is reported as
// such even when the rest would not decode.
type versionProbe struct {
	V *int `json:"v"`
}

// CheckVersion reports whether raw carries the one format version this
// release reads.
func CheckVersion(raw []byte) error {
	var p versionProbe
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("decoding JSON: %w", err)
	}
	if p.V == nil {
		return fmt.Errorf("no format version (\"v\" field)")
	}
	if *p.V != FormatVersion {
		return fmt.Errorf("format version %d is not supported by this release (it reads version %d)", *p.V, FormatVersion)
	}
	return nil
}

// EncodeRevision encodes a revision in the stored format.
func EncodeRevision(r reconciler.Revision) ([]byte, error) {
	return json.Marshal(revisionRecord{V: FormatVersion, Revision: &revisionV1{
		Name: r.Name, Hash: r.Hash, Number: r.Number, Data: r.Data,
		CreatedAt: r.CreatedAt, JobVersion: r.JobVersion,
	}})
}

// DecodeRevision decodes a stored revision; wantName, if not empty, must
// match the stored name (the key and the value must agree).
func DecodeRevision(raw []byte, wantName string) (reconciler.Revision, error) {
	if err := CheckVersion(raw); err != nil {
		return reconciler.Revision{}, err
	}
	var rec revisionRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return reconciler.Revision{}, fmt.Errorf("decoding revision: %w", err)
	}
	if rec.Revision == nil {
		return reconciler.Revision{}, fmt.Errorf("no \"revision\" field")
	}
	v := rec.Revision
	if v.Name == "" || (wantName != "" && v.Name != wantName) {
		return reconciler.Revision{}, fmt.Errorf("revision name %q does not match its key %q", v.Name, wantName)
	}
	return reconciler.Revision{
		Name: v.Name, Hash: v.Hash, Number: v.Number, Data: v.Data,
		CreatedAt: v.CreatedAt, JobVersion: v.JobVersion,
	}, nil
}

// EncodeStatus encodes a status in the stored format.
func EncodeStatus(st reconciler.Status) ([]byte, error) {
	rec := &statusV1{
		ObservedGeneration: st.ObservedGeneration,
		Replicas:           st.Replicas,
		ReadyReplicas:      st.ReadyReplicas,
		AvailableReplicas:  st.AvailableReplicas,
		CurrentReplicas:    st.CurrentReplicas,
		UpdatedReplicas:    st.UpdatedReplicas,
		CurrentRevision:    st.CurrentRevision,
		UpdateRevision:     st.UpdateRevision,
		CollisionCount:     st.CollisionCount,
		LastProgressTime:   st.LastProgressTime,
		Ordinals:           encodeOrdinals(st.Ordinals),
		ApprovalUsed:       st.ApprovalUsed,
	}
	for _, c := range st.Conditions {
		rec.Conditions = append(rec.Conditions, conditionV1{
			Type: string(c.Type), Status: c.Status, Reason: c.Reason,
			Message: c.Message, LastTransitionTime: c.LastTransitionTime,
		})
	}
	return json.Marshal(statusRecord{V: FormatVersion, Status: rec})
}

// DecodeStatus decodes a stored status.
func DecodeStatus(raw []byte) (reconciler.Status, error) {
	if err := CheckVersion(raw); err != nil {
		return reconciler.Status{}, err
	}
	var rec statusRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return reconciler.Status{}, fmt.Errorf("decoding status: %w", err)
	}
	if rec.Status == nil {
		return reconciler.Status{}, fmt.Errorf("no \"status\" field")
	}
	v := rec.Status
	st := reconciler.Status{
		ObservedGeneration: v.ObservedGeneration,
		Replicas:           v.Replicas,
		ReadyReplicas:      v.ReadyReplicas,
		AvailableReplicas:  v.AvailableReplicas,
		CurrentReplicas:    v.CurrentReplicas,
		UpdatedReplicas:    v.UpdatedReplicas,
		CurrentRevision:    v.CurrentRevision,
		UpdateRevision:     v.UpdateRevision,
		CollisionCount:     v.CollisionCount,
		LastProgressTime:   v.LastProgressTime,
		ApprovalUsed:       v.ApprovalUsed,
	}
	recs, err := decodeOrdinals(v.Ordinals)
	if err != nil {
		return reconciler.Status{}, fmt.Errorf("decoding status: %w", err)
	}
	st.Ordinals = recs
	for _, c := range v.Conditions {
		st.Conditions = append(st.Conditions, reconciler.Condition{
			Type: reconciler.ConditionType(c.Type), Status: c.Status, Reason: c.Reason,
			Message: c.Message, LastTransitionTime: c.LastTransitionTime,
		})
	}
	return st, nil
}

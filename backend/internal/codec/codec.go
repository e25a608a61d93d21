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
	// PopulatedOrdinalsEnd was added within format 1: absent reads as 0,
	// which the reconciler treats as "not known yet".
	PopulatedOrdinalsEnd int `json:"populated_ordinals_end,omitempty"`
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
		ObservedGeneration:   st.ObservedGeneration,
		Replicas:             st.Replicas,
		ReadyReplicas:        st.ReadyReplicas,
		AvailableReplicas:    st.AvailableReplicas,
		CurrentReplicas:      st.CurrentReplicas,
		UpdatedReplicas:      st.UpdatedReplicas,
		CurrentRevision:      st.CurrentRevision,
		UpdateRevision:       st.UpdateRevision,
		CollisionCount:       st.CollisionCount,
		LastProgressTime:     st.LastProgressTime,
		PopulatedOrdinalsEnd: st.PopulatedOrdinalsEnd,
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
		ObservedGeneration:   v.ObservedGeneration,
		Replicas:             v.Replicas,
		ReadyReplicas:        v.ReadyReplicas,
		AvailableReplicas:    v.AvailableReplicas,
		CurrentReplicas:      v.CurrentReplicas,
		UpdatedReplicas:      v.UpdatedReplicas,
		CurrentRevision:      v.CurrentRevision,
		UpdateRevision:       v.UpdateRevision,
		CollisionCount:       v.CollisionCount,
		LastProgressTime:     v.LastProgressTime,
		PopulatedOrdinalsEnd: v.PopulatedOrdinalsEnd,
	}
	for _, c := range v.Conditions {
		st.Conditions = append(st.Conditions, reconciler.Condition{
			Type: reconciler.ConditionType(c.Type), Status: c.Status, Reason: c.Reason,
			Message: c.Message, LastTransitionTime: c.LastTransitionTime,
		})
	}
	return st, nil
}

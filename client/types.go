// Package client holds the JSON types of the agent's HTTP API and a small
// client for it. The agent serves these types; the CLI reads them.
package client

import "time"

// Health is the body of GET /v1/health.
type Health struct {
	// Status is "ok" or "degraded".
	Status string `json:"status"`
	// Leader is true when this agent holds leadership (always true without HA).
	Leader bool `json:"leader"`
	// HighAvailability is true when agents elect a leader through a Consul
	// lock (high_availability enabled); without it the one agent always leads.
	HighAvailability bool `json:"high_availability"`
	// LeaderSince is when this agent took the lock in its current term; set
	// only with high availability and while leading.
	LeaderSince *time.Time `json:"leader_since,omitempty"`
	// Checks maps a dependency ("nomad", "store", and with high
	// availability "leader_election") to "ok" or an error message.
	Checks map[string]string `json:"checks"`
	// EventStream says how often the leader lost Nomad's event stream and
	// re-listed, in this term; nil on an agent that does not lead.
	EventStream *EventStreamHealth `json:"event_stream,omitempty"`
}

// EventStreamHealth is the leader's record of lost event streams. A loss
// is recovered by a full re-list, so it does not make the agent degraded;
// losses that keep coming (reason buffer_overflow) mean the servers'
// event_buffer_size is too small for the cluster.
type EventStreamHealth struct {
	// Resets counts the losses by reason (buffer_overflow, server_closed,
	// server_error, denied, decode, disconnect), as the metric
	// nomad_statefulset_nomad_event_stream_resets_total does.
	Resets map[string]uint64 `json:"resets"`
	// LastReset is the newest loss; nil while there was none.
	LastReset *EventStreamReset `json:"last_reset,omitempty"`
	// WriteHolds counts the writes to Nomad that waited for the stream to
	// catch up with the daemon's earlier writes, and WriteHeldSeconds how
	// long they waited in all (the metrics
	// nomad_statefulset_nomad_write_holds_total and
	// nomad_statefulset_nomad_write_held_seconds_total).
	WriteHolds       uint64  `json:"write_holds"`
	WriteHeldSeconds float64 `json:"write_held_seconds"`
	// MaxBehind is the most the daemon's writes were ahead of the
	// stream when a write was about to be made (the indexes the stream
	// trailed the newest write by, and the writes then in flight):
	// compare it with the servers' event_buffer_size.
	MaxBehind uint64 `json:"max_behind"`
}

// EventStreamReset is one loss of the event stream.
type EventStreamReset struct {
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// SetSummary is one row of GET /v1/statefulsets.
type SetSummary struct {
	Namespace       string      `json:"namespace"`
	Name            string      `json:"name"`
	Replicas        int         `json:"replicas"`
	ReadyReplicas   int         `json:"ready_replicas"`
	CurrentRevision string      `json:"current_revision"`
	UpdateRevision  string      `json:"update_revision"`
	Conditions      []Condition `json:"conditions"`
	// Error is set when the set's job is invalid or its stored state corrupt.
	Error string `json:"error,omitempty"`
}

// SetList is the body of GET /v1/statefulsets.
type SetList struct {
	Sets []SetSummary `json:"sets"`
}

// Spec is the parsed set spec, as the agent understood the annotations.
type Spec struct {
	Replicas             int      `json:"replicas"`
	OrdinalsStart        int      `json:"ordinals_start"`
	PodManagementPolicy  string   `json:"pod_management_policy"`
	UpdateStrategy       string   `json:"update_strategy"`
	Partition            int      `json:"partition"`
	MaxUnavailable       string   `json:"max_unavailable"`
	MinReadySeconds      int      `json:"min_ready_seconds"`
	RevisionHistoryLimit int      `json:"revision_history_limit"`
	VolumeClaims         []string `json:"volume_claims"`
	WhenDeleted          string   `json:"volume_retention_when_deleted"`
	WhenScaled           string   `json:"volume_retention_when_scaled"`
	Paused               bool     `json:"paused"`
	ProgressDeadline     string   `json:"progress_deadline"`
	// Claims are the claim templates that set a size or a class
	// (statefulset_claim_<claim>_capacity and _class).
	Claims []ClaimSpec `json:"claims,omitempty"`
	// Spread is the node attribute ordinals are spread over, and
	// SpreadRequired whether that is a hard rule.
	Spread         string `json:"spread,omitempty"`
	SpreadRequired bool   `json:"spread_required,omitempty"`
	// LeaderCheck, LeaderUpdate, SwitchoverCommand, DisruptionCheck,
	// ExecTask and ExecTimeout are the leader and disruption settings
	// (DESIGN §3b); empty when the set declares none.
	LeaderCheck       string `json:"leader_check,omitempty"`
	LeaderUpdate      string `json:"leader_update,omitempty"`
	SwitchoverCommand string `json:"switchover_command,omitempty"`
	DisruptionCheck   string `json:"disruption_check,omitempty"`
	ExecTask          string `json:"exec_task,omitempty"`
	ExecTimeout       string `json:"exec_timeout,omitempty"`
	// MaintenanceWindow is statefulset_maintenance_window as parsed, in
	// its canonical form ("Sat 02:00-05:00 UTC, ..."); empty when the set
	// has none (voluntary disruptions may start at any time).
	MaintenanceWindow string `json:"maintenance_window,omitempty"`
}

// ClaimSpec is one claim template's size and class.
type ClaimSpec struct {
	Claim string `json:"claim"`
	// CapacityMin and CapacityMax are in bytes; 0 leaves them to the
	// provisioner.
	CapacityMin int64 `json:"capacity_min_bytes,omitempty"`
	CapacityMax int64 `json:"capacity_max_bytes,omitempty"`
	// Class is the storage class ("" the default provisioner).
	Class string `json:"class,omitempty"`
}

// Status is a set's status.
type Status struct {
	ObservedGeneration uint64      `json:"observed_generation"`
	Replicas           int         `json:"replicas"`
	ReadyReplicas      int         `json:"ready_replicas"`
	AvailableReplicas  int         `json:"available_replicas"`
	CurrentReplicas    int         `json:"current_replicas"`
	UpdatedReplicas    int         `json:"updated_replicas"`
	CurrentRevision    string      `json:"current_revision"`
	UpdateRevision     string      `json:"update_revision"`
	CollisionCount     int         `json:"collision_count"`
	Conditions         []Condition `json:"conditions"`
}

// Condition is one status condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             bool      `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

// Pod is one row of the per-ordinal table.
type Pod struct {
	Ordinal    int       `json:"ordinal"`
	Name       string    `json:"name"`
	Revision   string    `json:"revision"`
	AllocID    string    `json:"alloc_id"`
	NodeID     string    `json:"node_id"`
	State      string    `json:"state"`
	ReadySince time.Time `json:"ready_since"`
	// NotReady says why a pod whose allocation runs is not Ready: the task
	// that is restarting or dead, the Consul check that is critical, or the
	// post_ready hook that holds it. For a Blocked pod (or one
	// WaitingForNode) it is Nomad's placement failure. For a Pending pod
	// it names the new volume Nomad has not yet marked ready, if that is
	// what the pod waits for. Empty otherwise.
	NotReady string   `json:"not_ready,omitempty"`
	Volumes  []string `json:"volumes"`
	// Leader is set on the pod whose leader check passes
	// (statefulset_leader_check).
	Leader bool `json:"leader,omitempty"`
	// Claims are the pod's volumes with their class and sizes.
	Claims []ClaimVolume `json:"claims,omitempty"`
	// OlderRendering is set when the child was registered by a release
	// that rendered it differently from this one: it keeps running as it
	// is and takes this release's rendering at its next replacement (a
	// rollout, `rollout restart`).
	OlderRendering bool `json:"older_rendering,omitempty"`
}

// ClaimVolume is one per-ordinal volume of a pod as its claim template
// sees it.
type ClaimVolume struct {
	Claim string `json:"claim"`
	Name  string `json:"name"`
	// Class is the volume's storage class ("" the default), Capacity its
	// size in bytes as Nomad reports it (0 unknown), Requested what its
	// claim asks (0: the provisioner's default).
	Class     string `json:"class,omitempty"`
	Capacity  int64  `json:"capacity_bytes,omitempty"`
	Requested int64  `json:"requested_bytes,omitempty"`
	// ResizePending is set while the volume waits to grow to Requested.
	ResizePending bool `json:"resize_pending,omitempty"`
	// ClassDiffers is set when the claim names another class: the volume
	// keeps its own.
	ClassDiffers bool `json:"class_differs,omitempty"`
}

// Revision is one stored revision.
type Revision struct {
	Number     int64     `json:"number"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"created_at"`
	JobVersion uint64    `json:"job_version"`
	// Template is the revision's canonical data (JSON); only filled in when
	// one revision is asked for.
	Template string `json:"template,omitempty"`
}

// Event is a recent event on a set, newest last.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Message string    `json:"message"`
}

// SetDetail is the body of GET /v1/statefulset/<namespace>/<name>.
type SetDetail struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Spec      Spec       `json:"spec"`
	Status    Status     `json:"status"`
	Pods      []Pod      `json:"pods"`
	Revisions []Revision `json:"revisions"`
	Events    []Event    `json:"events"`
	// Error is set when the parent job's annotations are invalid or the
	// set's stored state is corrupt.
	Error string `json:"error,omitempty"`
}

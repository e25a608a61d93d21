package reconciler

import "time"

// PodManagementPolicy selects how pods are created and deleted when the set
// scales: one at a time in ordinal order, or all at once.
type PodManagementPolicy string

const (
	// OrderedReady creates pods in ascending ordinal order, each only after
	// its predecessor is Running and Ready, and deletes them in reverse.
	OrderedReady PodManagementPolicy = "OrderedReady"
	// Parallel creates and deletes pods without waiting for one another.
	Parallel PodManagementPolicy = "Parallel"
)

// UpdateStrategy selects how pods move to a new revision.
type UpdateStrategy string

const (
	// RollingUpdate replaces pods from the highest ordinal down to the
	// partition, waiting for each to become healthy.
	RollingUpdate UpdateStrategy = "RollingUpdate"
	// OnDelete updates a pod only after someone deletes it.
	OnDelete UpdateStrategy = "OnDelete"
	// Recreate stops every pod on a new revision, waits until all have
	// terminated, and creates them again at the update revision in the
	// pod management policy's order, on their own volumes (KEP-3541,
	// alpha in Kubernetes 1.37). No two revisions ever run side by side;
	// the budget does not apply to it. See recreate.go.
	Recreate UpdateStrategy = "Recreate"
)

// RetentionPolicy says what happens to a pod's volumes when the pod goes away.
type RetentionPolicy string

const (
	// Retain keeps volumes forever; a later pod with the same ordinal reuses them.
	Retain RetentionPolicy = "Retain"
	// Delete removes the volumes once the pod that used them is gone.
	Delete RetentionPolicy = "Delete"
)

// IntOrPercent is a count that may be given as an absolute number or as a
// percentage of the replica count, like Kubernetes' intstr.IntOrString.
type IntOrPercent struct {
	// Value is the number, or the percentage when Percent is true.
	Value int
	// Percent marks Value as a percentage of replicas.
	Percent bool
}

// Spec is the desired state of one set, parsed from the parent job's
// statefulset_* annotations. Every field has the DESIGN §1 default applied.
type Spec struct {
	// Namespace is the Nomad namespace of the parent job and its children.
	Namespace string
	// Name is the set's name: the parent job ID, prefix of every pod,
	// volume and revision name.
	Name string
	// Replicas is the desired number of pods (statefulset_replicas).
	Replicas int
	// OrdinalsStart is the first ordinal (statefulset_ordinals_start); the
	// set's pods are OrdinalsStart .. OrdinalsStart+Replicas-1.
	OrdinalsStart int
	// PodManagementPolicy is OrderedReady or Parallel.
	PodManagementPolicy PodManagementPolicy
	// UpdateStrategy is RollingUpdate, OnDelete or Recreate.
	UpdateStrategy UpdateStrategy
	// Partition: a rolling update touches only pods whose index (ordinal -
	// OrdinalsStart) is at least Partition; the others keep, and are
	// recreated at, the current revision.
	Partition int
	// MaxUnavailable is how many of the set's pods may be unavailable at
	// once because of the daemon (a percentage of Replicas rounds down, as
	// getStatefulSetMaxUnavailable does; at least 1).
	MaxUnavailable IntOrPercent
	// MinReadySeconds is how long a pod must be Ready to count as available.
	MinReadySeconds int
	// RevisionHistoryLimit is how many revisions no pod uses are kept.
	RevisionHistoryLimit int
	// VolumeClaims are the group volume names that become per-ordinal volumes.
	VolumeClaims []string
	// ClaimTemplates are the size and class of the claims that set them
	// (statefulset_claim_<claim>_capacity and _class); a claim not listed
	// takes its provisioner's defaults.
	ClaimTemplates []ClaimTemplate
	// WhenDeleted says what happens to the volumes when the set is deleted.
	WhenDeleted RetentionPolicy
	// WhenScaled says what happens to a condemned ordinal's volumes.
	WhenScaled RetentionPolicy
	// Paused stops updates; replicas are still kept.
	Paused bool
	// ProgressDeadline is how long a rollout or scale may go without
	// progress before RolloutStuck is set; zero disables it.
	ProgressDeadline time.Duration
	// Generation identifies the parent job version this spec came from (its
	// JobModifyIndex); it is echoed into Status.ObservedGeneration.
	Generation uint64
	// Deleted is true once the parent job is stopped or purged: the set is
	// then torn down (cascading delete), unless it is detached
	// (IsDetached).
	Deleted bool
	// ParentGone is true, with Deleted, when Nomad holds no parent job at
	// all (purged, or never seen), as opposed to an annotated parent that
	// was stopped. A set detached before its parent went stays detached.
	ParentGone bool
	// Detached is true when the parent job exists but is not annotated:
	// its meta statefulset is missing or is not "true" (a typo, a removed
	// key). The set is detached, not deleted (DESIGN §1): it gets no
	// action at all. DetachedBecause says what the parent holds, for the
	// condition's message.
	Detached        bool
	DetachedBecause string
	// Spread is the node attribute the set's ordinals are spread over
	// (statefulset_spread, default ${node.unique.id}); SpreadRequired makes
	// it a hard rule. Placement is the agent's: the reconciler ignores them.
	Spread         string
	SpreadRequired bool
	// Replacements are the `pod replace` requests in the parent job, one per
	// ordinal at most. Each is carried out once (its Token is recorded).
	Replacements []Replacement

	// LeaderCheck names the service check of the template whose passing
	// marks the pod that leads (statefulset_leader_check); empty when the
	// set has no leader. Pod.Leader carries what it says.
	LeaderCheck string
	// LeaderUpdate is how the leader is taken down by any disruption the
	// daemon makes (statefulset_leader_update, default LeaderLast).
	LeaderUpdate LeaderUpdate
	// SwitchoverCommand hands leadership to NSS_TARGET_POD
	// (statefulset_switchover_command); required by LeaderSwitchover. The
	// agent runs it; the reconciler only decides when.
	SwitchoverCommand string
	// DisruptionCheck is asked before any Ready pod is taken down on
	// purpose (statefulset_disruption_check); empty: nothing is asked. The
	// agent runs it; the reconciler decides when, and in which pod.
	DisruptionCheck string
	// ExecTask is the task the commands run in (statefulset_exec_task;
	// the group's only task when it has one).
	ExecTask string
	// ExecTimeout bounds one command (statefulset_exec_timeout); zero: the
	// defaults, 30s, and 2m for a switchover.
	ExecTimeout time.Duration
	// Approval is the token of the last `nomad-statefulset rollout approve`
	// (the parent's meta statefulset_approve). A token the status has not
	// recorded as used lets one pending step through: the leader's
	// disruption under LeaderSupervised, or a held switchover or
	// disruption check the operator overrules.
	Approval string
	// MaintenanceWindows are when voluntary disruptions may start
	// (statefulset_maintenance_window); none: at any time. Outside them
	// a rollout, a repair, an expansion or a scale-down of a Ready pod
	// waits (window.go); an Approval lets one step through.
	MaintenanceWindows Windows
}

// ClaimTemplate is one claim's size and storage class (DESIGN §3b).
type ClaimTemplate struct {
	// Claim is the claim (group volume) name.
	Claim string
	// CapacityMin and CapacityMax are in bytes; zero leaves them to the
	// provisioner. Raising CapacityMin above a volume's capacity expands
	// that volume.
	CapacityMin, CapacityMax int64
	// Class names the agent's volume_provisioner block the claim's
	// volumes are made by; empty: the unnamed one.
	Class string
}

// LeaderUpdate says how a set's leader is taken down (DESIGN §3b).
type LeaderUpdate string

const (
	// LeaderLast takes the leader down after every other pod that must go.
	LeaderLast LeaderUpdate = "last"
	// LeaderSwitchover first hands leadership to a ready follower
	// (SwitchoverCommand), and takes the old leader down only once another
	// ready pod leads.
	LeaderSwitchover LeaderUpdate = "switchover"
	// LeaderSupervised stops before the leader (WaitingForApproval) until
	// the operator approves.
	LeaderSupervised LeaderUpdate = "supervised"
)

// Replacement is a `nomad-statefulset pod replace` request: recreate one
// ordinal's pod, on its own volumes or, with NewVolume, on fresh ones (the
// way out when the node holding its volumes is gone for good).
type Replacement struct {
	// Ordinal is the ordinal to replace.
	Ordinal int
	// Token tells one request from the next; a request whose token the
	// ordinal's record holds was carried out already.
	Token string
	// NewVolume discards the ordinal's volumes: they are deleted once its
	// pod is gone, and fresh ones are created. The user asked for it, with
	// confirmation; it is the one way data goes without a Delete policy.
	NewVolume bool
}

// Revision is one immutable snapshot of the revisioned part of the parent job.
type Revision struct {
	// Name is "<set>-<hash>".
	Name string
	// Hash is the hash of Data plus the collision count it was created with.
	Hash string
	// Number orders revisions; a rollback gives an old revision a new number.
	Number int64
	// Data is the canonical form of the revisioned fields (jobs.RevisionData).
	Data []byte
	// CreatedAt is when the revision was first recorded.
	CreatedAt time.Time
	// JobVersion is the parent job version the revision was first seen in.
	JobVersion uint64
}

// Phase is the coarse lifecycle phase of a pod, derived from its child job
// and newest allocation.
type Phase string

const (
	// PhasePending means the child exists but its allocation is not running yet.
	PhasePending Phase = "Pending"
	// PhaseRunning means the allocation is running (it may not be ready).
	PhaseRunning Phase = "Running"
	// PhaseSucceeded means the allocation finished and will not run again.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed means Nomad will not restart or reschedule it again.
	PhaseFailed Phase = "Failed"
)

// Pod is the observed state of one child job ("pod").
type Pod struct {
	// Ordinal is the pod's ordinal, from the child job's meta.
	Ordinal int
	// Revision is the revision name the child was rendered from.
	Revision string
	// Created is when the child job was registered.
	Created time.Time
	// Phase is the pod's lifecycle phase; an unknown value counts as Pending.
	Phase Phase
	// Ready means Running and healthy according to Nomad.
	Ready bool
	// ReadySince is when the pod last became Ready; zero if not Ready. A
	// Ready pod whose ReadySince is zero (unknown) is not available while
	// MinReadySeconds is above 0; see Available.
	ReadySince time.Time
	// Terminating means a stop was requested but the allocation is not terminal.
	Terminating bool
	// Drifted means the child job no longer matches what its revision
	// renders under the current spec: someone edited it, or the spec's
	// volume claims changed (identityMatches/storageMatches failed). It is
	// replaced like a pod at an outdated revision: budgeted, in order, and
	// only where a rolling update may act.
	Drifted bool
	// NodeDraining means the pod's node is being drained: the pod must
	// leave it. The reconciler takes such pods down itself, highest ordinal
	// first and within maxUnavailable, whatever the update strategy, so
	// that a drain never takes more of the set down at once than the budget.
	NodeDraining bool
	// AllTerminal means nothing of the pod runs any more: every allocation
	// of its child is terminal. Only such a pod may be purged (removed
	// from Nomad at once) rather than stopped and watched until it ends.
	AllTerminal bool
	// ScaledCount is the count of a child someone scaled above 1 by hand
	// (`nomad job scale`), zero otherwise. The reconciler puts it back to 1
	// in place (ActionRestoreCount) so that the original allocation keeps
	// running and only the extra ones stop.
	ScaledCount int
	// NodeBack means the pod has no allocation, every node holding its
	// volumes became eligible after its child was registered, and Nomad was
	// not asked to place it since: Nomad blocked the placement while that
	// node was ineligible (a drain) and does not retry by itself.
	NodeBack bool
	// NodeChange, when not zero, is the node change (a Nomad index) after
	// which every node holding the pod's volumes became fine again, for a
	// pod without an allocation registered before it: the reconciler sets
	// NodeBack unless Nomad was already asked to place it for this change
	// (Memory.Evaluated).
	NodeChange uint64
	// AllocID is the pod's newest allocation, "" when it has none.
	AllocID string
	// AwaitsPostReady means the set has post_ready hooks and the pod is
	// ready on every other count: only the hooks' answer about its
	// allocation (Memory.PostReady) keeps it from Ready. The reconciler
	// asks them (ActionPostReady).
	AwaitsPostReady bool
	// Leader means the set's leader check (Spec.LeaderCheck) passes on this
	// pod now: it is the database's primary, the cluster's leader.
	Leader bool
}

// Volume is an observed per-ordinal volume.
type Volume struct {
	// Claim is the claim (group volume) name the volume was made for.
	Claim string
	// Ordinal is the ordinal the volume belongs to.
	Ordinal int
	// Name is "<claim>-<set>-<ordinal>".
	Name string
	// Class is the storage class the volume was made by ("" the default);
	// Capacity its size in bytes as Nomad reports it (0: unknown).
	Class    string
	Capacity int64
}

// ConditionType names a status condition.
type ConditionType string

const (
	// ConditionProgressing is true while a rollout or scale is under way and
	// has not exceeded its progress deadline.
	ConditionProgressing ConditionType = "Progressing"
	// ConditionAvailable is true when every desired replica is available.
	ConditionAvailable ConditionType = "Available"
	// ConditionRolloutStuck is true when no progress was made within the
	// progress deadline.
	ConditionRolloutStuck ConditionType = "RolloutStuck"
	// ConditionWaitingForApproval is true while a step waits for
	// `nomad-statefulset rollout approve`: the leader's disruption under
	// LeaderSupervised. It is absent otherwise.
	ConditionWaitingForApproval ConditionType = "WaitingForApproval"
	// ConditionVolumeClaimRefused is true while a claim template asks of an
	// existing volume what is not done: to shrink, or to change class. It
	// is absent otherwise.
	ConditionVolumeClaimRefused ConditionType = "VolumeClaimRefused"
	// ConditionInvalidSpec is true when the parent job's annotations do not
	// parse or break a rule; the set is then left untouched.
	ConditionInvalidSpec ConditionType = "InvalidSpec"
	// ConditionDetached is true while the set is detached (IsDetached): its
	// parent is not annotated, or went away after it stopped being
	// annotated. Nothing of the set is touched until a job of its name is
	// annotated again. It is absent otherwise.
	ConditionDetached ConditionType = "Detached"
)

// Condition is one status condition, in the Kubernetes style.
type Condition struct {
	// Type names the condition.
	Type ConditionType
	// Status is whether the condition holds.
	Status bool
	// Reason is a CamelCase word for tools (the Reason* constants).
	Reason string
	// Message explains the reason to a human.
	Message string
	// LastTransitionTime is when Status last changed.
	LastTransitionTime time.Time
}

// Status is the observed status of a set, as reported to users.
type Status struct {
	// ObservedGeneration is the Spec.Generation this status was computed for.
	ObservedGeneration uint64
	// Replicas counts the observed pods, terminating ones included.
	Replicas int
	// ReadyReplicas counts the pods that are Running and Ready.
	ReadyReplicas int
	// AvailableReplicas counts the pods Ready for at least MinReadySeconds.
	AvailableReplicas int
	// CurrentReplicas counts the pods, not terminating, at CurrentRevision.
	CurrentReplicas int
	// UpdatedReplicas counts the pods, not terminating, at UpdateRevision.
	UpdatedReplicas int
	// CurrentRevision is the revision the set is rolling out from; it
	// becomes UpdateRevision once every pod is updated and ready.
	CurrentRevision string
	// UpdateRevision is the revision of the template as it is now.
	UpdateRevision string
	// CollisionCount is the hash collision count used to name new revisions.
	CollisionCount int
	// Conditions are Progressing, Available and RolloutStuck.
	Conditions []Condition
	// LastProgressTime is when the set last made progress; the progress
	// deadline is measured from it.
	LastProgressTime time.Time
	// Ordinals is what the set remembers of each ordinal it has had, sorted
	// by ordinal: the revision it last ran (so that no pod is created at an
	// older one without an explicit step back) and whether it was condemned
	// while the retention policy said Delete (so that only such volumes are
	// ever deleted). It is stored with the status, so it survives restarts
	// and leader changes.
	Ordinals []OrdinalRecord
	// ApprovalUsed is the Spec.Approval token a step has used: a token is
	// good for one pending step.
	ApprovalUsed string
}

// OrdinalRecord is the set's memory of one ordinal.
type OrdinalRecord struct {
	// Ordinal is the ordinal the record is about.
	Ordinal int
	// Revision is the revision the ordinal's pod last ran (observed or
	// created at); empty while it has had no pod.
	Revision string
	// RevisionNumber is Revision's Number when it was recorded. A later
	// rollback gives an old revision a higher number, which is how an
	// explicit step back is told from a silent downgrade.
	RevisionNumber int64
	// Condemned is set when the ordinal left the range (a scale-down or the
	// set's deletion) and cleared if it comes back.
	Condemned bool
	// DeleteVolumes is set when the ordinal was condemned while the
	// retention policy in force (WhenScaled, or WhenDeleted for the set's
	// deletion) said Delete. Only then, or for a `pod replace -new-volume`,
	// are its volumes ever deleted.
	DeleteVolumes bool
	// Replaced is the token of the last `pod replace` request carried out
	// for the ordinal.
	Replaced string
	// RecreateStopped is set when a Recreate stopped the ordinal's pod,
	// and cleared once the ordinal has a pod again. It is stored before
	// the stop (ActionRecordOrdinals), so that a Recreate under way is
	// known to every later decision, a new leader's too: the rest of the
	// set is then stopped without asking the disruption check again and
	// without waiting for a maintenance window (recreate.go).
	RecreateStopped bool
}

// Input is everything a reconcile needs. It is a value: the reconciler reads
// it and never changes it.
type Input struct {
	Spec Spec
	// TemplateData is the canonical revisioned data of the parent job as it
	// is now (jobs.RevisionData). Empty when Spec.Deleted.
	TemplateData []byte
	// Revisions are the stored revisions of this set, in any order.
	Revisions []Revision
	// Pods are the observed child jobs, in any order.
	Pods []Pod
	// Volumes are the observed per-ordinal volumes, in any order.
	Volumes []Volume
	// Previous is the status last written, used for collision counts,
	// condition transition times and progress tracking.
	Previous Status
	// JobVersion is the parent job's current version, recorded on new revisions.
	JobVersion uint64
	// Now is the time of this decision; the reconciler reads no clock.
	Now time.Time
	// Holds are the waits the world outside the algorithm imposes on one
	// ordinal's steps: a crash-loop backoff, a kill grace, a lifecycle hook
	// that said wait, a plugin that is down, a spread that cannot be met.
	// The reconciler honours each until its Until (it emits no action the
	// hold covers), reports it in Output.Held, and asks to be called again
	// when it ends.
	Holds []Hold
	// Cleared are the disruption checks that passed: each lets its
	// ordinal's pod be taken down until Until (Spec.DisruptionCheck).
	Cleared []Clearance
	// CannotExpand are the storage classes whose provisioner cannot
	// expand volumes: their volumes keep their size (a condition says so).
	CannotExpand []string
	// LeaderUnknown says the leader check could not be read (not yet, or
	// not at all): no pod's Leader can be trusted, so no Ready pod is taken
	// down for a reason the leader rules order until it is known.
	LeaderUnknown bool
	// Memory is what the set's earlier decisions of this term remember
	// (Output.Memory, with every action's Result folded in); the zero
	// Memory at a term's first pass.
	Memory Memory
	// TermStart is when the caller's leadership term began: an ordinal
	// missing at the set's first pass of the term may have been purged
	// unseen, and waits out its StopGrace from then (HoldKillGrace). Zero
	// when the caller does not model terms.
	TermStart time.Time
	// StopGrace is, per ordinal the status records, the longest its last
	// task may run after a stop (its template's kill grace then and now,
	// with a margin). Read only at the set's first pass of a term.
	StopGrace map[int]time.Duration
	// Stopped are the set's stopped children Nomad still holds: a
	// cascading delete purges them (Action.Targets) before the set's
	// stored state goes.
	Stopped []StoppedChild
	// StateAbsent says the store holds no revision and no status of the
	// set: a cascading delete has nothing left to delete there.
	StateAbsent bool
	// StatusMissing says the store holds no status of the set, so the
	// decision's status is written even when it equals the zero Previous.
	StatusMissing bool
	// CapabilitiesUnknown are the storage classes whose provisioner could
	// not be asked whether it can expand: nothing of them grows in this
	// decision (nothing is stopped on a guess), and the set is looked at
	// again within CapabilitiesRetry.
	CapabilitiesUnknown []string
}

// StoppedChild is a stopped child job Nomad still holds.
type StoppedChild struct {
	JobID   string
	Ordinal int
}

// Clearance is a passing answer of the disruption check for taking one
// ordinal's pod down.
type Clearance struct {
	Ordinal int
	// Until is when the answer goes stale: the cluster may have changed.
	Until time.Time
	// Recreate is set on the one answer a Recreate asks for (DESIGN §3b):
	// the update revision every pod may be stopped for. Empty for the
	// answer about one pod.
	Recreate string
}

// HoldStep is the kind of step a Hold keeps from happening.
type HoldStep string

const (
	// StepCreate covers creating an ordinal's pod and its volumes.
	StepCreate HoldStep = "Create"
	// StepDisrupt covers taking an ordinal's live pod down on purpose: an
	// update, a repair, a drain's evacuation, a scale-down, the set's
	// deletion and a pod replace. Removing a pod that already ended, or a
	// duplicate, is never held.
	StepDisrupt HoldStep = "Disrupt"
)

// Hold reasons: why a step of one ordinal must wait.
const (
	// HoldBackOff: the ordinal's pod keeps failing; it is created again
	// after an exponential backoff, not in a hot loop.
	HoldBackOff = "BackOff"
	// HoldKillGrace: the ordinal's child vanished while no leader watched
	// (a purge?), and its old task may still be stopping on its node.
	HoldKillGrace = "KillGrace"
	// HoldHookWaiting: a pre_update or pre_delete hook asked to wait.
	HoldHookWaiting = "HookWaiting"
	// HoldPluginUnavailable: the volume provisioner plugin is down.
	HoldPluginUnavailable = "PluginUnavailable"
	// HoldDisruptionCheckFailed: the disruption check said the cluster
	// cannot lose this member now; it is asked again with backoff.
	HoldDisruptionCheckFailed = "DisruptionCheckFailed"
	// HoldSwitchoverFailed: the switchover failed with every candidate
	// (Action.Candidates) since the step was last held, or there is no
	// candidate at all; the leader keeps leading and is not taken down. A
	// switchover that fails while candidates are left is tried next with
	// the following one, and holds nothing (Fold).
	HoldSwitchoverFailed = "SwitchoverFailed"
	// HoldSwitchingOver: the switchover command ran, and the leader check
	// has not moved to another pod yet. It holds the old leader while it
	// still leads and until another Ready pod is seen to lead.
	HoldSwitchingOver = "SwitchingOver"
	// HoldWaitingForApproval: under LeaderSupervised, the leader is taken
	// down only once the operator approves (`rollout approve`).
	HoldWaitingForApproval = "WaitingForApproval"
	// HoldSpreadUnsatisfiable: no node with a spread value of its own can
	// take the ordinal. Under a soft spread (Spec.SpreadRequired false) the
	// reconciler does not wait: it creates the ordinal without the spread
	// rule (Action.Unspread). Under a required spread it waits.
	HoldSpreadUnsatisfiable = "SpreadUnsatisfiable"
	// HoldVolumeInUse: a volume to expand is still claimed by Nomad (the
	// old allocation is being released); the expansion is tried again
	// shortly.
	HoldVolumeInUse = "VolumeInUse"
	// HoldUnknownClass: no provisioner serves the claim's storage class
	// (statefulset_claim_<name>_class); the volume is tried again once a
	// minute, as the agent's config may be fixed meanwhile.
	HoldUnknownClass = "UnknownClass"
)

// HoldReasons are every reason a step can be held for, in the order the
// reference documents them.
var HoldReasons = []string{
	HoldBackOff, HoldKillGrace, HoldHookWaiting, HoldPluginUnavailable, HoldDisruptionCheckFailed,
	HoldSwitchoverFailed, HoldSwitchingOver, HoldWaitingForApproval, HoldSpreadUnsatisfiable,
	HoldVolumeInUse, HoldUnknownClass,
}

// Hold is one wait on one ordinal's step; see Input.Holds.
type Hold struct {
	// Ordinal is the ordinal whose step waits.
	Ordinal int
	// Step is what waits.
	Step HoldStep
	// Until is when the wait ends; a hold whose Until is not after Now has
	// ended.
	Until time.Time
	// Reason is one of the Hold* reasons.
	Reason string
	// Message explains the wait to a human.
	Message string
}

// ActionType names an effect the caller must carry out.
type ActionType string

const (
	// ActionCreateRevision stores a new revision.
	ActionCreateRevision ActionType = "CreateRevision"
	// ActionUpdateRevision stores an existing revision with a new Number (a rollback).
	ActionUpdateRevision ActionType = "UpdateRevision"
	// ActionDeleteRevision removes a revision trimmed by the history limit.
	ActionDeleteRevision ActionType = "DeleteRevision"
	// ActionCreateVolume creates a per-ordinal volume.
	ActionCreateVolume ActionType = "CreateVolume"
	// ActionDeleteVolume deletes a per-ordinal volume.
	ActionDeleteVolume ActionType = "DeleteVolume"
	// ActionCreatePod registers the child job for an ordinal at a revision.
	ActionCreatePod ActionType = "CreatePod"
	// ActionDeletePod stops the child job for an ordinal.
	ActionDeletePod ActionType = "DeletePod"
	// ActionRecordOrdinals stores the ordinal records (Action.Ordinals) in
	// the set's status before anything else is done, so that a condemnation
	// and the retention policy it was made under are durable before the
	// condemned pods or volumes are touched, as Kubernetes sets a claim's
	// owner references before it deletes the pod.
	ActionRecordOrdinals ActionType = "RecordOrdinals"
	// ActionDeleteSetState removes the set's revision history and status;
	// it comes last in a cascading delete.
	ActionDeleteSetState ActionType = "DeleteSetState"
	// ActionRecordStatus stores Action.Status, the status of the decision
	// (Output.Status, or InvalidStatus for a spec that does not parse). It
	// is the decision's last action, emitted only when that status differs
	// from the one stored (or none is): a pass that stops before it leaves
	// the stored status as it was, and the next decision recomputes it from
	// what really happened. A cascading delete that removes the set's state
	// emits none, as that would bring the state back.
	ActionRecordStatus ActionType = "RecordStatus"
	// ActionPostReady runs the post_ready hooks for the allocation of the
	// pod of Action.Pod (Pod.AwaitsPostReady): their answer, folded into
	// Memory.PostReady, decides whether the pod counts as Ready.
	ActionPostReady ActionType = "PostReady"
	// ActionRestoreCount puts the count of a child scaled up by hand back
	// to 1, in place (Pod.ScaledCount).
	ActionRestoreCount ActionType = "RestoreCount"
	// ActionEvaluatePod asks Nomad to place a blocked child again once the
	// node holding its volumes is eligible again (Pod.NodeBack).
	ActionEvaluatePod ActionType = "EvaluatePod"
	// ActionCheckDisruption runs the disruption check in the pod of
	// Action.Target, asking whether the pod of Action.Ordinal may be taken
	// down now. A pass comes back as a Clearance, a failure as a hold.
	// A Recreate asks it once for the whole set (Action.Revision set);
	// Target may then be Ordinal itself, as every pod goes down.
	ActionCheckDisruption ActionType = "CheckDisruption"
	// ActionSwitchover runs the switchover command in the leader (Ordinal)
	// to hand leadership to one of Action.Candidates, the first
	// (Action.Target) unless the command knows better.
	ActionSwitchover ActionType = "Switchover"
	// ActionExpandVolume grows Action.Volume to Action.Volume.Capacity
	// bytes while no pod of its ordinal exists (Nomad refuses to change a
	// volume an allocation claims). The volume and its data stay.
	ActionExpandVolume ActionType = "ExpandVolume"
)

// DeleteCause says why a pod is deleted, so the caller can run the right
// lifecycle hook: a decommission before a scale-down or set delete, a drain
// before an update, nothing for a pod that already ended.
type DeleteCause string

const (
	// CauseScaleDown deletes a pod whose ordinal is no longer wanted.
	CauseScaleDown DeleteCause = "ScaleDown"
	// CauseSetDeleted deletes a pod of a set whose parent job is gone.
	CauseSetDeleted DeleteCause = "SetDeleted"
	// CauseUpdate deletes a pod to recreate it at the update revision.
	CauseUpdate DeleteCause = "Update"
	// CauseEnded deletes a pod that Failed or Succeeded, to recreate it.
	CauseEnded DeleteCause = "Ended"
	// CauseDuplicate deletes an extra pod for an ordinal that has two.
	CauseDuplicate DeleteCause = "Duplicate"
	// CauseRepair deletes a drifted pod to recreate it from its target
	// revision. It disrupts a healthy member like an update does, so it runs
	// the same lifecycle hooks (pre_update).
	CauseRepair DeleteCause = "Repair"
	// CauseReplace deletes a pod for a `pod replace` request: an operator's
	// explicit delete, like `kubectl delete pod`, which no budget holds. It
	// runs pre_delete hooks.
	CauseReplace DeleteCause = "Replace"
	// CauseResize deletes a pod whose volume must grow, so that the volume
	// is expanded while no allocation claims it and the pod comes back on
	// it. It disrupts a healthy member like an update does (pre_update).
	CauseResize DeleteCause = "Resize"
	// CauseDrain deletes a pod whose node is being drained, so that it is
	// recreated elsewhere (or on its volume's node once that is eligible
	// again). The member leaves for a while, so it runs pre_delete hooks.
	CauseDrain DeleteCause = "Drain"
)

// Action is one effect. Only the fields that matter for its Type are set.
type Action struct {
	Type ActionType
	// Ordinal is set for pod and volume actions.
	Ordinal int
	// Revision is the revision for CreatePod and the revision
	// acted on for revision actions. On a CheckDisruption it is set only
	// for a Recreate's one check: the update revision every pod is to be
	// stopped for (the answer is then a Clearance for the whole set).
	Revision Revision
	// Volume is set for volume actions.
	Volume Volume
	// Reason is a short human explanation for logs and events.
	Reason string
	// Pod is the observed pod a DeletePod acts on. When a bad
	// observation shows two pods for one ordinal, it tells the caller which
	// one is meant (by Created and Revision).
	Pod Pod
	// Cause is set on DeletePod actions.
	Cause DeleteCause
	// Ordinals is set on RecordOrdinals: the records to store in the
	// status the caller last read (the rest of that status unchanged).
	Ordinals []OrdinalRecord
	// Purge is set on a DeletePod of a pod that ended with nothing left
	// running (Pod.AllTerminal): its child is removed from Nomad at once.
	// Nomad counts a failed allocation that may not be rescheduled toward
	// the group, so a stopped child registered again would never be placed.
	Purge bool
	// Unspread is set on CreatePod and CreateVolume when no node with a
	// spread value of its own can take the ordinal and the spread is soft:
	// the ordinal goes where it fits, next to another.
	Unspread bool
	// Target is the other ordinal CheckDisruption runs in, or the first of
	// a Switchover's Candidates.
	Target int
	// Candidates are, on a Switchover, the followers the leader may hand
	// leadership to (DESIGN §3b, the best candidate): every Ready follower
	// the step does not take down, in the daemon's order (those at the
	// update revision first, then by ordinal), except that those whose
	// switchover already failed since the step was last held come last.
	// The command may choose any of them; the step is done once any of
	// them leads.
	Candidates []int
	// Targets are the stopped child jobs a DeleteSetState purges before
	// it deletes the set's stored state.
	Targets []string
	// Status is set on RecordStatus: the status to store.
	Status *Status
}

// Output is the decision of one reconcile.
type Output struct {
	// Actions must be carried out in order. If one fails the caller stops
	// and reconciles again later from fresh observations.
	Actions []Action
	// Status is the status to record once the actions have been carried out.
	Status Status
	// Requeue, if non-zero, is how long from Now the set should be looked at
	// again even without new events (minReadySeconds, progress deadline,
	// the end of a hold).
	Requeue time.Duration
	// Held are the holds that kept a step from happening in this decision,
	// in the order the steps were reached.
	Held []Hold
	// Memory is the memory the next decision starts from, once the result
	// of every action carried out is folded in (Fold).
	Memory Memory
	// LeaderChange is a switchover seen to take effect in this decision,
	// for the caller to announce; nil otherwise.
	LeaderChange *LeaderChange
	// Gone says that once the actions are carried out nothing of the set
	// is left, in Nomad or in the store (a cascading delete that is done):
	// the caller forgets the set, and records nothing of it.
	Gone bool
}

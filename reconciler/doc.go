// Package reconciler is the StatefulSet algorithm of nomad-statefulset: a
// pure function from what a set should be and what is observed to what to do
// next. It is a port of the Kubernetes StatefulSet controller
// (pkg/controller/statefulset, updateStatefulSet and its revision history),
// brought up to today's Kubernetes (maxUnavailable, start ordinal, volume
// retention, minReadySeconds) and past it (pause, progress deadline, and
// recovery of a stuck rollout by a revert alone).
//
// # The model
//
// A set has Spec.Replicas ordinals, from Spec.OrdinalsStart. Each ordinal has
// at most one pod (a Nomad child job "<set>-<ordinal>") and one volume per
// claim ("<claim>-<set>-<ordinal>"). The caller observes the pods, volumes
// and stored revisions, and calls Reconcile with them and the time. Reconcile
// returns an ordered list of Actions and the Status they lead to; the last
// action writes that status (ActionRecordStatus) when it says something the
// stored one does not, so every write the caller makes is an action. It does no I/O,
// reads no clock and starts no goroutine: the same Input always gives the
// same Output, which is what makes it testable step by step.
//
// The caller carries the actions out in order and stops at the first one that
// fails; it then reconciles again from fresh observations. Every decision is
// therefore made so that any prefix of the action list is safe: a volume is
// created before its pod, a revision before a pod uses it, history is trimmed
// last. Deleting a pod is asynchronous: the pod shows as Terminating, then
// disappears, and only a later reconcile creates its replacement. So there is
// never more than one pod per ordinal, not even for an instant.
//
// # One reconcile
//
// First the revisions: the template data is looked up among the stored
// revisions. An equal, newest revision is the update revision; an equal older
// one is a rollback and gets the next number; otherwise a new revision is
// created, named "<set>-<hash>" from HashRevision, with a collision count
// that goes up while the name is taken by different data. The current
// revision is the one the previous status named (if that status was lost:
// the revision of the lowest-ordinal pod, which a rollout reaches last).
//
// Then the pods, as updateStatefulSet does. Pods inside the range are
// replicas; pods outside it are condemned. Each replica is processed in
// ordinal order: a missing pod is created (volumes first) at the current
// revision below the partition and at the update revision from it; a Failed
// or Succeeded pod is deleted and recreated once gone. Under OrderedReady the walk stops at the first pod that is not
// Running, Ready and available, so pods come up one at a time; under Parallel
// it does not stop. Condemned pods are then deleted from the highest ordinal
// down, again one at a time under OrderedReady. Last, a RollingUpdate deletes
// outdated pods (not at the update revision, or drifted from their
// revision), from the highest ordinal down to the partition, while
// maxUnavailable minus the unavailable pods of the whole range allows; the
// next reconciles recreate them at the update revision. OnDelete leaves that
// to the user; a pod it recreates, or a scale-up creates, takes the update
// revision. Recreate (KEP-3541, recreate.go) stops every pod at an older
// revision at once, outside the budget, after one gate, and creates none
// until no pod at another revision is left, running or terminating; then
// the walk creates them at the update revision in the policy's order. A paused set makes no update at all, though it still keeps its
// replicas, creating missing pods at the current revision.
//
// # The three promises
//
// The budget: every unavailable pod in the range counts against
// maxUnavailable, and a healthy pod is taken down only while room is left.
// No silent downgrade: Status.Ordinals records the revision each ordinal last
// ran, and no pod is created at an older one unless the user stepped back (a
// rollback renumbers the old revision; a raised partition asks for it). Kept
// data stays kept: Status.Ordinals also records which ordinals were condemned
// while the retention policy said Delete, and only their volumes are deleted.
// A condemnation is stored (ActionRecordOrdinals, first in the list) before
// anything it allows is done.
//
// Some departures from Kubernetes keep the set from freezing on pods that can
// never become ready: a pod in the update range that is not ready at an
// abandoned revision (neither current nor update), or drifted, is replaced at
// once rather than waited for (Kubernetes issue 67250: a revert then repairs a
// broken rollout), and so is an outdated one once the progress deadline has
// passed; already unavailable, they take nothing more down (issue 137409); and
// a scale-down does not wait on a condemned predecessor that is Failed or
// stuck at an outdated revision, where Kubernetes' first-unhealthy-pod rule
// deadlocks.
//
// Last the status: the replica counters, the revisions, and the conditions
// Progressing, Available and RolloutStuck. Progress is measured against the
// previous status; when none is seen for Spec.ProgressDeadline the rollout is
// stuck. Output.Requeue says when the clock alone may change the decision.
//
// A set whose parent job is gone (Spec.Deleted) is torn down instead: pods in
// reverse ordinal order (all at once under Parallel), volumes as WhenDeleted
// says once their pods are gone, and its stored state last. A set whose
// parent exists but is not annotated (Spec.Detached), or went away while the
// set was detached, is detached instead (IsDetached): no action at all, and
// the Detached condition.
//
// # Everything the caller writes is decided here
//
// The caller writes nothing the Output does not say. What the world outside
// the algorithm imposes comes in as facts and waits: Pod.AllTerminal (only a
// pod that ended with nothing running is purged, DeletePod's Purge),
// Pod.ScaledCount (a child scaled by hand is put back to count 1 in place,
// ActionRestoreCount), Pod.NodeChange (a child Nomad blocked on a drained node
// is placed again once the node is back, once per change, ActionEvaluatePod),
// and the holds, which keep one ordinal's creation, or its disruption, back
// until a time: a crash-loop backoff, a kill grace, a hook that said wait, a
// plugin that is down, a spread no node meets. A held step is left out,
// reported in Output.Held and counted as acted on (a held disruption keeps
// its place in the budget); Output.Requeue covers its end. A soft spread no
// node meets holds nothing: the ordinal is created without the rule
// (Action.Unspread).
//
// # The decision memory
//
// What a set's decisions must remember that the cluster does not show is
// the reconciler's too, as a value (Memory): the waits its effects met, the
// failures to back off from, the disruption check's answers, a switchover in
// flight and the candidates it failed with since its step was last held,
// the post_ready hooks' answers, the ordinals that vanished unseen.
// The caller passes the last one in (Input.Memory), carries out a prefix of
// the actions in their groups (Batches), folds the Result of each into the
// memory (Fold), and passes that to the next decision; it stops after the
// first group in which an action failed or met a wait, and then records the
// revisions of the pods it created (RecordsAfter), as the status that would
// have is not written. How long each wait
// lasts is the reconciler's wait policy for its reason (the constants of
// memory.go), so the randomized drivers check the policies under the
// invariants like any other decision. The zero Memory, a new leader's, is
// always safe: what it cannot know (a child purged while nobody watched)
// it waits out.
package reconciler

package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// DefaultPollInterval is how often rollout status asks the agent. The CLI
// polls; the daemon itself never does (it follows Nomad's event stream).
const DefaultPollInterval = time.Second

// RolloutStatusCommand is `nomad-statefulset rollout status <set>`.
type RolloutStatusCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *RolloutStatusCommand) Synopsis() string {
	return "Follow a statefulset's rollout until it is done"
}

// Help implements cli.Command.
func (c *RolloutStatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset rollout status [options] <set>

  Follows the set's rolling update until it is done, printing a line each
  time the progress changes: how many pods are updated out of how many, how
  many are ready, and which ordinal is being updated.

  The rollout is done when every pod is ready and, with no partition, every
  pod runs the update revision; with a partition P, when the pods from
  ordinal P up are updated (updated >= replicas - P), as in kubectl.

  It exits 4 as soon as the set reports the RolloutStuck condition (its
  statefulset_progress_deadline passed without progress), or when -timeout
  passes. Under the OnDelete update strategy there is nothing to follow: it
  says so and exits 0. A paused rollout is followed; it completes once
  resumed.

  So that a rollout just started with 'nomad job run' is not reported done
  from the agent's previous status, the command first reads the parent job's
  JobModifyIndex from Nomad and waits until the agent has observed it. If
  Nomad cannot be read, it says so and follows the agent's status as is.

  With -json, each progress line is one JSON object (newline-delimited).

Examples:

  $ nomad job run web.nomad.hcl && nomad-statefulset rollout status web
  $ nomad-statefulset rollout status -timeout 10m web
  $ nomad-statefulset rollout status -json web | jq -r .message

` + commonOptionsHelp + agentAddressHelp + nomadOptionsHelp + `
Rollout Status Options:

  -timeout=<duration>
    Give up after this long and exit 4. Default: 0, wait as long as it takes
    (or until RolloutStuck).

  -poll-interval=<duration>
    How often to ask the agent. Default: 1s.
` + exitCodesHelp)
}

// rolloutProgress is one observation of a rollout, printed as a line of
// text or, with -json, as one JSON object.
type rolloutProgress struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is "waiting", "done", "stuck", "invalid" or "on_delete".
	Phase           string `json:"phase"`
	Message         string `json:"message"`
	Replicas        int    `json:"replicas"`
	ReadyReplicas   int    `json:"ready_replicas"`
	UpdatedReplicas int    `json:"updated_replicas"`
	// Target is how many pods must be updated: replicas - partition.
	Target          int    `json:"target"`
	Partition       int    `json:"partition"`
	Paused          bool   `json:"paused"`
	CurrentRevision string `json:"current_revision"`
	UpdateRevision  string `json:"update_revision"`
	// Action is what is happening to the pod Updating: "removing",
	// "replacing", "updating", "creating" or "next".
	Action string `json:"action,omitempty"`
	// Updating is the pod being worked on now, and UpdatingState its state.
	Updating      string `json:"updating,omitempty"`
	UpdatingState string `json:"updating_state,omitempty"`
}

// Run implements cli.Command.
func (c *RolloutStatusCommand) Run(args []string) int {
	var timeout, interval time.Duration
	f := c.FlagSet("rollout status", FlagSetAll)
	f.DurationVar(&timeout, "timeout", 0, "")
	f.DurationVar(&interval, "poll-interval", DefaultPollInterval, "")
	pos, code, ok := c.parse("rollout status", f, args, 1, 1, "nomad-statefulset rollout status [options] <set>")
	if !ok {
		return code
	}
	if timeout < 0 {
		return c.usageError("rollout status", "-timeout must not be negative, got %s", timeout)
	}
	if interval <= 0 {
		return c.usageError("rollout status", "-poll-interval must be positive, got %s", interval)
	}
	ac, err := c.AgentClient()
	if err != nil {
		return c.report(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return c.follow(ctx, ac, pos[0], timeout, interval)
}

// follow polls the agent until the rollout ends, the deadline passes or ctx
// is cancelled, printing each change of progress.
func (c *RolloutStatusCommand) follow(ctx context.Context, ac *client.Client, name string, timeout, interval time.Duration) int {
	ns := c.Namespace()
	// The timeout is measured on the real clock even when tests fix
	// Meta.Now for stable output.
	start := time.Now()
	minIndex, jobExists := c.parentIndex(ctx, name)

	var last rolloutProgress
	printed := false
	seen := false
	agentDown := false
	emit := func(p rolloutProgress) {
		if printed && p == last {
			return
		}
		last, printed = p, true
		if c.JSON() {
			b, err := json.Marshal(p)
			if err == nil {
				c.UI.Output(string(b))
			}
			return
		}
		c.UI.Output(p.Message)
	}

	for {
		d, err := ac.GetSet(ctx, ns, name)
		switch {
		case ctx.Err() != nil:
			c.UI.Error("Interrupted; the rollout goes on without being followed.")
			return ExitError
		case errors.Is(err, client.ErrNotFound) && !seen && jobExists:
			// The parent job is in Nomad but the agent has not picked it
			// up yet: right after `nomad job run` that is expected.
			emit(rolloutProgress{Namespace: ns, Name: name, Phase: "waiting",
				Message: fmt.Sprintf("Waiting for the agent to pick up statefulset %q", name)})
		case errors.Is(err, client.ErrNotFound) && seen:
			// A restarted agent, or a new leader, knows no set until it has
			// listed Nomad: wait while the parent job still runs.
			if !c.parentLive(ctx, name) {
				c.UI.Error(fmt.Sprintf("Error: statefulset %q disappeared from the agent while following its rollout (was the job stopped?)", name))
				return ExitError
			}
			emit(rolloutProgress{Namespace: ns, Name: name, Phase: "waiting",
				Message: fmt.Sprintf("Waiting for the agent to pick up statefulset %q again (agent restarted?)", name)})
		case errors.Is(err, client.ErrNotFound):
			return c.report(setNotFound(ns, name, err))
		case err != nil:
			var down *client.UnreachableError
			if !seen || !errors.As(err, &down) {
				return c.report(err)
			}
			// Once following, an agent restart or leader change is a
			// blip, not the end: keep trying until the timeout.
			if !agentDown {
				c.UI.Warn("Warning: " + err.Error() + "; retrying")
				agentDown = true
			}
		default:
			seen, agentDown = true, false
			p := evaluateRollout(d, minIndex)
			emit(p)
			switch p.Phase {
			case "done", "on_delete":
				return ExitOK
			case "stuck":
				if !c.JSON() {
					c.UI.Error("Error: the rollout is stuck (RolloutStuck). Inspect with 'nomad-statefulset status " + name + "'; roll back with 'nomad-statefulset rollout undo " + name + "'.")
				}
				return ExitStuck
			case "invalid":
				return ExitError
			}
		}

		if timeout > 0 && time.Since(start) >= timeout {
			c.UI.Error(fmt.Sprintf("Error: timed out after %s waiting for the rollout of statefulset %q: %s", timeout, name, last.Message))
			return ExitStuck
		}
		select {
		case <-ctx.Done():
			c.UI.Error("Interrupted; the rollout goes on without being followed.")
			return ExitError
		case <-time.After(interval):
		}
	}
}

// parentIndex reads the parent job's JobModifyIndex from Nomad, best
// effort: the agent's status is only trusted once its ObservedGeneration
// reaches it. exists reports whether Nomad has the job.
func (c *RolloutStatusCommand) parentIndex(ctx context.Context, name string) (index uint64, exists bool) {
	nc, err := c.NomadClient()
	if err == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var job *api.Job
		job, _, err = nc.Jobs().Info(name, (&api.QueryOptions{Namespace: c.Namespace()}).WithContext(qctx))
		if err == nil {
			return derefU64(job.JobModifyIndex), true
		}
		err = nomadError(c.NomadConfig().Address, fmt.Sprintf("reading job %q", name), err)
	}
	if !errors.Is(err, errNotFound) {
		c.UI.Warn(fmt.Sprintf("Note: %v; following the agent's status without waiting for it to observe the latest job version", err))
	}
	return 0, false
}

// podsAbovePartitionUpdated counts the pods with an ordinal from the
// partition up to the last wanted one that are at the update revision and
// ready.
func podsAbovePartitionUpdated(d *client.SetDetail) int {
	low := d.Spec.OrdinalsStart + d.Spec.Partition
	high := d.Spec.OrdinalsStart + d.Spec.Replicas - 1
	n := 0
	for _, p := range d.Pods {
		if p.Ordinal >= low && p.Ordinal <= high && p.Revision == d.Status.UpdateRevision && podReady(p) {
			n++
		}
	}
	return n
}

// parentLive reports whether Nomad has the parent job and it is not stopped.
// Any failure to tell counts as not live, so the caller never waits on a
// guess.
func (c *RolloutStatusCommand) parentLive(ctx context.Context, name string) bool {
	nc, err := c.NomadClient()
	if err != nil {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	job, _, err := nc.Jobs().Info(name, (&api.QueryOptions{Namespace: c.Namespace()}).WithContext(qctx))
	return err == nil && (job.Stop == nil || !*job.Stop)
}

// evaluateRollout decides where a rollout stands from one detail read,
// following kubectl's StatefulSet status viewer, plus the RolloutStuck
// condition, the pod being updated and the generation guard.
func evaluateRollout(d *client.SetDetail, minIndex uint64) rolloutProgress {
	sp, st := d.Spec, d.Status
	p := rolloutProgress{
		Namespace: d.Namespace, Name: d.Name, Phase: "waiting",
		Replicas: sp.Replicas, ReadyReplicas: st.ReadyReplicas, UpdatedReplicas: st.UpdatedReplicas,
		Partition: sp.Partition, Paused: sp.Paused,
		CurrentRevision: st.CurrentRevision, UpdateRevision: st.UpdateRevision,
	}
	p.Target = max(sp.Replicas-sp.Partition, 0)
	if cond := findCondition(st.Conditions, "InvalidSpec"); d.Error != "" || (cond != nil && cond.Status) {
		msg := d.Error
		if msg == "" {
			msg = cond.Message
		}
		p.Phase = "invalid"
		p.Message = fmt.Sprintf("Statefulset %q has an invalid spec; nothing rolls until it is fixed: %s", d.Name, oneLine(msg))
		return p
	}
	if sp.UpdateStrategy == "OnDelete" {
		p.Phase = "on_delete"
		p.Message = fmt.Sprintf("Statefulset %q uses the OnDelete update strategy: pods move to a new revision only when they are deleted, so there is no rollout to follow", d.Name)
		return p
	}
	if st.ObservedGeneration < minIndex {
		p.Message = fmt.Sprintf("Waiting for the agent to observe job modify index %d (it has seen %d)", minIndex, st.ObservedGeneration)
		return p
	}
	if cond := findCondition(st.Conditions, "RolloutStuck"); cond != nil && cond.Status {
		p.Phase = "stuck"
		p.Message = fmt.Sprintf("Rollout of statefulset %q is stuck: %s (%s); %d of %d pods updated, %d of %d ready",
			d.Name, orDash(oneLine(cond.Message)), orDash(cond.Reason), st.UpdatedReplicas, p.Target, st.ReadyReplicas, sp.Replicas)
		return p
	}
	// Extra pods (a scale down in progress) keep it waiting: kubectl does
	// not check this, but a script running `scale` then `rollout status`
	// means "until the set has its new size".
	done := st.ReadyReplicas >= sp.Replicas && st.Replicas <= sp.Replicas
	if sp.Partition > 0 {
		done = done && st.UpdatedReplicas >= p.Target
	} else {
		done = done && st.UpdateRevision == st.CurrentRevision && st.UpdatedReplicas >= sp.Replicas
	}
	// updatedReplicas also counts pods below the partition that happen to
	// be at the update revision: after an undo to the revision those pods
	// kept, kubectl's rule alone says "done" while the ordinals above the
	// partition are still at the bad one. So the pods must agree: every
	// ordinal from the partition up is at the update revision and ready.
	if len(d.Pods) > 0 {
		done = done && podsAbovePartitionUpdated(d) >= p.Target
	}
	// A claim that grew is rolled out like a template: not done while a
	// volume still waits to grow.
	growing := volumesToGrow(d)
	done = done && growing == 0
	if done {
		p.Phase = "done"
		if sp.Partition > 0 {
			p.Message = fmt.Sprintf("Partitioned rollout of statefulset %q complete: %d of %d pods updated to revision %s (partition %d keeps the ordinals below it), %d of %d ready",
				d.Name, min(st.UpdatedReplicas, p.Target), p.Target, orDash(st.UpdateRevision), sp.Partition, st.ReadyReplicas, sp.Replicas)
		} else {
			p.Message = fmt.Sprintf("Rollout of statefulset %q complete: %d of %d pods at revision %s and ready",
				d.Name, st.UpdatedReplicas, sp.Replicas, orDash(st.UpdateRevision))
		}
		return p
	}
	p.Action, p.Updating, p.UpdatingState = updatingPod(d)
	var b strings.Builder
	if sp.Partition > 0 {
		fmt.Fprintf(&b, "Waiting for partitioned rollout of statefulset %q: %d of %d pods updated (partition %d), %d of %d ready",
			d.Name, min(st.UpdatedReplicas, p.Target), p.Target, sp.Partition, st.ReadyReplicas, sp.Replicas)
	} else {
		fmt.Fprintf(&b, "Waiting for rollout of statefulset %q: %d of %d pods updated, %d of %d ready",
			d.Name, min(st.UpdatedReplicas, sp.Replicas), sp.Replicas, st.ReadyReplicas, sp.Replicas)
	}
	switch {
	case p.Updating == "":
	case p.UpdatingState == "":
		fmt.Fprintf(&b, "; %s %s", p.Action, p.Updating)
	default:
		fmt.Fprintf(&b, "; %s %s (%s)", p.Action, p.Updating, p.UpdatingState)
	}
	if st.UpdateRevision != "" {
		fmt.Fprintf(&b, " to revision %s", st.UpdateRevision)
	}
	if growing > 0 {
		fmt.Fprintf(&b, "; %d volumes still to grow to what their claim asks", growing)
	}
	if sp.Paused {
		fmt.Fprintf(&b, "; paused (run 'nomad-statefulset rollout resume %s')", d.Name)
	}
	// What the rollout waits for, when something outside it holds a step:
	// the leader's approval, a refused disruption check, a switchover.
	for _, typ := range []string{"WaitingForApproval", "Held"} {
		if cond := findCondition(st.Conditions, typ); cond != nil && cond.Status {
			fmt.Fprintf(&b, "; waiting: %s (%s)", oneLine(cond.Message), cond.Reason)
			break
		}
	}
	p.Message = b.String()
	return p
}

// volumesToGrow counts the volumes of the set's pods that wait to grow.
func volumesToGrow(d *client.SetDetail) int {
	n := 0
	for _, p := range d.Pods {
		for _, c := range p.Claims {
			if c.ResizePending {
				n++
			}
		}
	}
	return n
}

// updatingPod names the pod the rollout is working on and what is
// happening to it, in this order:
//   - a pod above the replica count (scale down), highest first: "removing";
//   - a pod in flight (terminating or not ready), highest first: "replacing"
//     if it is still at an old revision, else "updating";
//   - an ordinal with no pod, lowest first (creation goes up): "creating";
//   - the highest pod at or above the partition still at an old revision
//     and healthy, the next a rolling update will take: "next".
func updatingPod(d *client.SetDetail) (verb, name, state string) {
	sp, st := d.Spec, d.Status
	byOrdinal := map[int]client.Pod{}
	maxOrd := sp.OrdinalsStart - 1
	for _, p := range d.Pods {
		byOrdinal[p.Ordinal] = p
		maxOrd = max(maxOrd, p.Ordinal)
	}
	first, last := sp.OrdinalsStart, sp.OrdinalsStart+sp.Replicas-1
	describe := func(p client.Pod) string {
		s := orDash(p.State)
		if p.Revision != st.UpdateRevision {
			s += ", at " + orDash(p.Revision)
		}
		return s
	}
	for ord := maxOrd; ord > last; ord-- {
		if p, ok := byOrdinal[ord]; ok {
			return "removing", orDash(p.Name), describe(p)
		}
	}
	for ord := last; ord >= first; ord-- {
		if p, ok := byOrdinal[ord]; ok && (p.State == "Terminating" || !podReady(p)) {
			if p.Revision != st.UpdateRevision {
				return "replacing", orDash(p.Name), describe(p)
			}
			return "updating", orDash(p.Name), describe(p)
		}
	}
	for ord := first; ord <= last; ord++ {
		if _, ok := byOrdinal[ord]; !ok {
			return "creating", fmt.Sprintf("%s-%d", d.Name, ord), ""
		}
	}
	for ord := last; ord >= first+sp.Partition; ord-- {
		if p := byOrdinal[ord]; p.Revision != st.UpdateRevision {
			return "next", orDash(p.Name), describe(p)
		}
	}
	return "", "", ""
}

// podReady reads readiness from the agent's pod state names (DESIGN §2),
// falling back on ReadySince.
func podReady(p client.Pod) bool {
	switch p.State {
	case "Ready", "Available":
		return true
	case "":
		return !p.ReadySince.IsZero()
	}
	return false
}

// findCondition returns the condition of type t, or nil.
func findCondition(cs []client.Condition, t string) *client.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// commandRunner runs one of a set's own commands (DESIGN §3b: the
// switchover command, the disruption check) inside a running task of one
// of its pods, with env set, and returns its exit code and output. Nomad's
// alloc exec API carries it in production; tests script it.
type commandRunner interface {
	RunCommand(ctx context.Context, namespace, nodeID, allocID, task, command string, env map[string]string) (exitCode int, output string, err error)
}

// nomadRunner runs the commands through Nomad's alloc exec API, under
// /bin/sh -c as DESIGN §3b says.
type nomadRunner struct{ nomad backend.Cluster }

// RunCommand implements commandRunner.
func (r nomadRunner) RunCommand(ctx context.Context, namespace, nodeID, allocID, task, command string, env map[string]string) (int, string, error) {
	res, err := r.nomad.Exec(ctx, namespace, nodeID, allocID, task, []string{shell, "-c", command}, env)
	return res.ExitCode, res.Output, err
}

// shell runs every command of a set (DESIGN §3b: a command line, run by
// /bin/sh -c).
const shell = "/bin/sh"

const (
	// defaultCheckTimeout and defaultSwitchoverTimeout bound one command
	// when statefulset_exec_timeout is not set (DESIGN §3b).
	defaultCheckTimeout      = 30 * time.Second
	defaultSwitchoverTimeout = 2 * time.Minute
	// clearanceTTL is how long a passing disruption check lets its pod be
	// taken down: long enough for the pass that acts on it, short enough
	// that the answer still describes the cluster.
	clearanceTTL = 30 * time.Second
	// askBackoffBase and askBackoffMax space the retries of a disruption
	// check or a switchover that failed.
	askBackoffBase = 5 * time.Second
	askBackoffMax  = 5 * time.Minute
)

// execTimeout is how long one command of spec may run.
func execTimeout(spec reconciler.Spec, switchover bool) time.Duration {
	switch {
	case spec.ExecTimeout > 0:
		return spec.ExecTimeout
	case switchover:
		return defaultSwitchoverTimeout
	}
	return defaultCheckTimeout
}

// commandEnv is the env a command runs with: who runs it, and the pod it
// is about.
func commandEnv(set string, runner, target int) map[string]string {
	return map[string]string{
		"NSS_SET": set, "NSS_POD": reconciler.PodName(set, runner), "NSS_ORDINAL": strconv.Itoa(runner),
		"NSS_TARGET_POD": reconciler.PodName(set, target), "NSS_TARGET_ORDINAL": strconv.Itoa(target),
	}
}

// askFailed counts a refusal of ord's step (a failed check or switchover)
// and returns how long to wait before asking again.
func (st *setState) askFailed(ord int) time.Duration {
	if st.askFailures == nil {
		st.askFailures = map[int]int{}
	}
	st.askFailures[ord]++
	return exponential(askBackoffBase, askBackoffMax, st.askFailures[ord]-1)
}

// liveClearances drops the disruption checks that went stale by now and
// returns the rest.
func (st *setState) liveClearances(now time.Time) []reconciler.Clearance {
	st.cleared = dropEnded(st.cleared, now, func(c reconciler.Clearance) time.Time { return c.Until })
	return st.cleared
}

// runCommand runs command in the exec task of ordinal runner's pod, about
// the pod of ordinal target.
func (e *podControl) runCommand(ctx context.Context, p *pass, runner, target int, command string, timeout time.Duration) (int, string, error) {
	d, ok := podDetail(p.obs, p.key, runner)
	if !ok || d.AllocID == "" {
		return 0, "", fmt.Errorf("%s has no running allocation to run the command in", reconciler.PodName(p.key.Name, runner))
	}
	if e.exec == nil {
		return 0, "", fmt.Errorf("this agent cannot run commands in pods")
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	code, out, err := e.exec.RunCommand(cctx, p.key.Namespace, d.NodeID, d.AllocID, p.spec.ExecTask, command, commandEnv(p.key.Name, runner, target))
	if err != nil && cctx.Err() != nil {
		// Nomad's exec driver answers nothing at all for a command it
		// cannot start: in a task without /bin/sh (a distroless or
		// scratch image) the exec neither fails nor exits
		// (TestRealNomadExecWithoutShell). The timeout is all there is to
		// see, so the message names that cause too.
		err = fmt.Errorf("it did not finish within %s (statefulset_exec_timeout; a task without %s, which the commands run under, "+
			"never answers either): %w", timeout, shell, err)
	}
	return code, out, err
}

// checkDisruption asks the application, in the pod of act.Target, whether
// the pod of act.Ordinal may be taken down now. A pass clears the step for
// a while; anything else holds it with backoff, saying why.
func (e *podControl) checkDisruption(ctx context.Context, p *pass, act reconciler.Action) error {
	code, out, err := e.runCommand(ctx, p, act.Target, act.Ordinal, p.spec.DisruptionCheck, execTimeout(p.spec, false))
	pod, runner := reconciler.PodName(p.key.Name, act.Ordinal), reconciler.PodName(p.key.Name, act.Target)
	if err == nil && code == 0 {
		delete(p.st.askFailures, act.Ordinal)
		p.st.cleared = append(p.st.cleared, reconciler.Clearance{Ordinal: act.Ordinal, Until: p.now.Add(clearanceTTL)})
		return nil
	}
	why := fmt.Sprintf("the disruption check in %s says %s may not go now (exit %d): %s", runner, pod, code, oneLine(out))
	if err != nil {
		why = fmt.Sprintf("could not run the disruption check in %s about %s: %v", runner, pod, err)
	}
	return &holdError{step: reconciler.StepDisrupt, reason: reconciler.HoldDisruptionCheckFailed, wait: p.st.askFailed(act.Ordinal), msg: why}
}

// switchover runs the switchover command in the leader (act.Ordinal) to
// hand leadership to act.Target. When it succeeds, the leader's disruption
// waits (HoldSwitchingOver) until the leader check passes elsewhere, for
// at most the command's timeout; the switch is announced when seen.
func (e *podControl) switchover(ctx context.Context, p *pass, act reconciler.Action) error {
	timeout := execTimeout(p.spec, true)
	code, out, err := e.runCommand(ctx, p, act.Ordinal, act.Target, p.spec.SwitchoverCommand, timeout)
	from, to := reconciler.PodName(p.key.Name, act.Ordinal), reconciler.PodName(p.key.Name, act.Target)
	if err != nil || code != 0 {
		why := fmt.Sprintf("the switchover from %s to %s failed (exit %d): %s", from, to, code, oneLine(out))
		if err != nil {
			why = fmt.Sprintf("could not run the switchover in %s: %v", from, err)
		}
		return &holdError{step: reconciler.StepDisrupt, reason: reconciler.HoldSwitchoverFailed, wait: p.st.askFailed(act.Ordinal), msg: why}
	}
	delete(p.st.askFailures, act.Ordinal)
	p.st.addHold(reconciler.Hold{Ordinal: act.Ordinal, Step: reconciler.StepDisrupt, Until: p.now.Add(timeout),
		Reason: reconciler.HoldSwitchingOver, Message: "handed leadership to " + to + "; waiting for the leader check to pass there"})
	p.st.switching = &switchoverRecord{from: act.Ordinal, to: act.Target, started: p.now}
	return nil
}

// switchoverRecord is a switchover the command ran for, until the leader
// check is seen elsewhere and no longer on the old leader.
type switchoverRecord struct {
	from, to int
	started  time.Time
	// announced is set once another pod is seen to lead.
	announced bool
}

// noteLeader announces, once, the leader a switchover handed over to, with
// how long it took from the command to the check passing there. Once the
// old leader no longer leads either, the switch is complete and its
// SwitchingOver hold has served: it is dropped, as left to its timeout it
// would hold that pod again, saying it hands leadership over, should it
// lead again meanwhile. Not before: the checks of both pods may pass for a
// moment, and while the old leader still looks like the leader the hold
// keeps the reconciler from asking it for another switchover.
func (c *controller) noteLeader(p *pass, pods []reconciler.Pod) {
	sw := p.st.switching
	if sw == nil {
		return
	}
	fromLeads, other := false, -1
	for _, pod := range pods {
		switch {
		case !pod.Leader:
		case pod.Ordinal == sw.from:
			fromLeads = true
		case other < 0:
			other = pod.Ordinal
		}
	}
	if other >= 0 && !sw.announced {
		sw.announced = true
		msg := fmt.Sprintf("%s leads, after a switchover from %s in %s", reconciler.PodName(p.key.Name, other),
			reconciler.PodName(p.key.Name, sw.from), p.now.Sub(sw.started).Round(time.Millisecond))
		c.sets.event(p.key, p.now, "Switchover", msg)
		c.log.Info("the leader changed after a switchover", "set", p.key.String(), "from", sw.from, "to", other, "took", p.now.Sub(sw.started))
	}
	if sw.announced && !fromLeads {
		p.st.switching = nil
		p.st.dropHold(sw.from, reconciler.HoldSwitchingOver)
	}
}

// oneLine folds a command's output onto one line, for events.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

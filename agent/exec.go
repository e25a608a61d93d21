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

// commandEnv is the env a command runs with: who runs it, and the pod it
// is about.
func commandEnv(set string, runner, target int) map[string]string {
	return map[string]string{
		"NSS_SET": set, "NSS_POD": reconciler.PodName(set, runner), "NSS_ORDINAL": strconv.Itoa(runner),
		"NSS_TARGET_POD": reconciler.PodName(set, target), "NSS_TARGET_ORDINAL": strconv.Itoa(target),
	}
}

// candidatesEnv is NSS_CANDIDATE_PODS, the switchover's candidates
// (DESIGN §3b, the best candidate): their pod names in the daemon's order,
// separated by single spaces, so that a script can loop over them
// (`for pod in $NSS_CANDIDATE_PODS`); a pod name holds no space.
func candidatesEnv(set string, act reconciler.Action) string {
	cands := act.Candidates
	if len(cands) == 0 {
		cands = []int{act.Target}
	}
	names := make([]string, len(cands))
	for i, o := range cands {
		names[i] = reconciler.PodName(set, o)
	}
	return strings.Join(names, " ")
}

// runCommand runs command in the exec task of ordinal runner's pod, with
// env.
func (e *podControl) runCommand(ctx context.Context, p *pass, runner int, env map[string]string, command string, timeout time.Duration) (int, string, error) {
	d, ok := podDetail(p.obs, p.key, runner)
	if !ok || d.AllocID == "" {
		return 0, "", fmt.Errorf("%s has no running allocation to run the command in", reconciler.PodName(p.key.Name, runner))
	}
	if e.exec == nil {
		return 0, "", fmt.Errorf("this agent cannot run commands in pods")
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	code, out, err := e.exec.RunCommand(cctx, p.key.Namespace, d.NodeID, d.AllocID, p.spec.ExecTask, command, env)
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
// a while, anything else holds it with backoff, saying why: both are the
// reconciler's to remember (reconciler.Fold).
func (e *podControl) checkDisruption(ctx context.Context, p *pass, act reconciler.Action) error {
	env := commandEnv(p.key.Name, act.Target, act.Ordinal)
	// NSS_SCOPE tells the application what the answer is for: one pod,
	// or (a Recreate's one check) the whole set at once.
	env["NSS_SCOPE"] = "pod"
	if act.Revision.Name != "" {
		env["NSS_SCOPE"] = "set"
	}
	code, out, err := e.runCommand(ctx, p, act.Target, env, p.spec.DisruptionCheck, reconciler.ExecTimeout(p.spec, false))
	pod, runner := reconciler.PodName(p.key.Name, act.Ordinal), reconciler.PodName(p.key.Name, act.Target)
	if err == nil && code == 0 {
		return nil
	}
	why := fmt.Sprintf("the disruption check in %s says %s may not go now (exit %d): %s", runner, pod, code, oneLine(out))
	if err != nil {
		why = fmt.Sprintf("could not run the disruption check in %s about %s: %v", runner, pod, err)
	}
	return &waitError{reason: reconciler.HoldDisruptionCheckFailed, msg: why}
}

// switchover runs the switchover command in the leader (act.Ordinal) to
// hand leadership to one of act.Candidates (NSS_CANDIDATE_PODS), the first
// of them being NSS_TARGET_POD. When it succeeds, the reconciler holds the
// leader's disruption (HoldSwitchingOver) until the leader check passes
// elsewhere, for at most the command's timeout; when it fails, the
// reconciler tries the next candidate, and holds the step once every one
// failed (reconciler.Fold). What it failed with is the first candidate's
// answer.
func (e *podControl) switchover(ctx context.Context, p *pass, act reconciler.Action) error {
	timeout := reconciler.ExecTimeout(p.spec, true)
	env := commandEnv(p.key.Name, act.Ordinal, act.Target)
	env["NSS_CANDIDATE_PODS"] = candidatesEnv(p.key.Name, act)
	code, out, err := e.runCommand(ctx, p, act.Ordinal, env, p.spec.SwitchoverCommand, timeout)
	from, to := reconciler.PodName(p.key.Name, act.Ordinal), reconciler.PodName(p.key.Name, act.Target)
	if err != nil || code != 0 {
		why := fmt.Sprintf("the switchover from %s to %s failed (exit %d): %s", from, to, code, oneLine(out))
		if err != nil {
			why = fmt.Sprintf("could not run the switchover in %s: %v", from, err)
		}
		return &waitError{reason: reconciler.HoldSwitchoverFailed, msg: why}
	}
	return nil
}

// oneLine folds a command's output onto one line, for events.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

package command

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// rolloutStep returns a copy of webDetail changed by f: one poll's answer.
func rolloutStep(f func(d *client.SetDetail)) *client.SetDetail {
	d := webDetail()
	d.Status.Conditions = nil
	f(d)
	return d
}

// setPods sets each pod's revision and state by ordinal.
func setPods(d *client.SetDetail, revs []string, states []string) {
	d.Pods = nil
	for i := range revs {
		p := client.Pod{Ordinal: i, Name: "web-" + string(rune('0'+i)), Revision: revs[i], State: states[i]}
		if states[i] == "Available" {
			p.ReadySince = testNow
		}
		d.Pods = append(d.Pods, p)
	}
}

const oldRev, newRev = "web-5d8f7c", "web-7a9b1e"

// rollingUpdate scripts a full rolling update of three pods, highest
// ordinal first, as the agent would report it poll by poll. Repeated
// answers must print only once.
func rollingUpdate() []*client.SetDetail {
	type st struct {
		revs    []string
		states  []string
		ready   int
		updated int
	}
	steps := []st{
		{[]string{oldRev, oldRev, oldRev}, []string{"Available", "Available", "Available"}, 3, 0},
		{[]string{oldRev, oldRev, oldRev}, []string{"Available", "Available", "Terminating"}, 2, 0},
		{[]string{oldRev, oldRev, newRev}, []string{"Available", "Available", "Pending"}, 2, 1},
		{[]string{oldRev, oldRev, newRev}, []string{"Available", "Available", "Pending"}, 2, 1},
		{[]string{oldRev, oldRev, newRev}, []string{"Available", "Available", "Available"}, 3, 1},
		{[]string{oldRev, newRev, newRev}, []string{"Available", "Running", "Available"}, 2, 2},
		{[]string{newRev, newRev, newRev}, []string{"Pending", "Available", "Available"}, 2, 3},
		{[]string{newRev, newRev, newRev}, []string{"Available", "Available", "Available"}, 3, 3},
	}
	var out []*client.SetDetail
	for i, s := range steps {
		last := i == len(steps)-1
		out = append(out, rolloutStep(func(d *client.SetDetail) {
			setPods(d, s.revs, s.states)
			d.Status.ReadyReplicas = s.ready
			d.Status.UpdatedReplicas = s.updated
			d.Status.CurrentReplicas = 3 - s.updated
			if last {
				d.Status.CurrentRevision = newRev
				d.Status.CurrentReplicas = 3
			}
		}))
	}
	return out
}

func runRolloutStatus(t *testing.T, agent *fakeAgent, nomadAddr string, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	cmd := &RolloutStatusCommand{Meta: m}
	// A generous -timeout keeps a broken test from hanging; a test's own
	// -timeout comes later and wins.
	code := cmd.Run(append([]string{"-address", agent.srv.URL, "-nomad-address", nomadAddr, "-poll-interval", "1ms", "-timeout", "30s"}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func TestRolloutStatusFollowsToCompletionGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(rollingUpdate()...)
	code, out, errOut := runRolloutStatus(t, agent, closedAddress(t), "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "rollout_status_progress", out)
	// Nomad being down is noted, not fatal: the agent alone is followed.
	if !strings.Contains(errOut, "cannot reach Nomad") {
		t.Errorf("stderr %q should note that Nomad was not reachable", errOut)
	}
}

func TestRolloutStatusPartitionGolden(t *testing.T) {
	agent := newFakeAgent(t)
	var seq []*client.SetDetail
	for _, s := range []struct {
		revs    []string
		states  []string
		ready   int
		updated int
	}{
		{[]string{oldRev, oldRev, oldRev}, []string{"Available", "Available", "Terminating"}, 2, 0},
		{[]string{oldRev, oldRev, newRev}, []string{"Available", "Available", "Available"}, 3, 1},
		{[]string{oldRev, newRev, newRev}, []string{"Available", "Pending", "Available"}, 2, 2},
		{[]string{oldRev, newRev, newRev}, []string{"Available", "Available", "Available"}, 3, 2},
		// Never reached: done at updated >= replicas - partition.
		{[]string{newRev, newRev, newRev}, []string{"Available", "Available", "Available"}, 3, 3},
	} {
		seq = append(seq, rolloutStep(func(d *client.SetDetail) {
			d.Spec.Partition = 1
			setPods(d, s.revs, s.states)
			d.Status.ReadyReplicas, d.Status.UpdatedReplicas = s.ready, s.updated
		}))
	}
	agent.add(seq...)
	code, out, errOut := runRolloutStatus(t, agent, closedAddress(t), "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "rollout_status_partition", out)
	if agent.served["default/web"] != 4 {
		t.Errorf("polled %d times, want to stop at the 4th answer", agent.served["default/web"])
	}
}

func TestRolloutStatusStuckExits4(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(
		rolloutStep(func(d *client.SetDetail) {}),
		rolloutStep(func(d *client.SetDetail) {
			d.Status.Conditions = []client.Condition{{Type: "RolloutStuck", Status: true, Reason: "ProgressDeadlineExceeded", Message: "web-1 not ready for 10m0s"}}
		}),
	)
	code, out, errOut := runRolloutStatus(t, agent, closedAddress(t), "web")
	if code != ExitStuck {
		t.Fatalf("exit %d, want %d", code, ExitStuck)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "is stuck: web-1 not ready for 10m0s (ProgressDeadlineExceeded)") {
		t.Errorf("output:\n%s", out)
	}
	if !strings.Contains(errOut, "rollout undo web") {
		t.Errorf("stderr should say how to roll back: %q", errOut)
	}
}

func TestRolloutStatusTimeoutExits4(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(rolloutStep(func(d *client.SetDetail) {})) // never finishes
	start := time.Now()
	code, out, errOut := runRolloutStatus(t, agent, closedAddress(t), "-timeout", "50ms", "web")
	if code != ExitStuck {
		t.Fatalf("exit %d, want %d", code, ExitStuck)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s to time out after 50ms", time.Since(start))
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("an unchanged status must print once, got:\n%s", out)
	}
	if !strings.Contains(errOut, "timed out after 50ms") || !strings.Contains(errOut, "2 of 3 pods updated") {
		t.Errorf("stderr %q", errOut)
	}
}

func TestRolloutStatusOnDelete(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(rolloutStep(func(d *client.SetDetail) { d.Spec.UpdateStrategy = "OnDelete" }))
	code, out, _ := runRolloutStatus(t, agent, closedAddress(t), "web")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out, "OnDelete update strategy") || !strings.Contains(out, "no rollout to follow") {
		t.Errorf("output %q", out)
	}
}

func TestRolloutStatusInvalidSpecExits1(t *testing.T) {
	agent := newFakeAgent(t)
	b := brokenDetail()
	agent.add(b)
	code, out, _ := runRolloutStatus(t, agent, closedAddress(t), "cache")
	if code != ExitError || !strings.Contains(out, "invalid spec") || !strings.Contains(out, "three") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

func TestRolloutStatusWaitsForNewJobIndex(t *testing.T) {
	// Right after `nomad job run` the agent still shows the previous,
	// settled status; it must not be reported as done.
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 50)
	settledOld := rolloutStep(func(d *client.SetDetail) {
		d.Status.ObservedGeneration = 42
		d.Status.UpdateRevision, d.Status.CurrentRevision = oldRev, oldRev
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 3, 3
	})
	seq := append([]*client.SetDetail{settledOld}, rollingUpdate()...)
	for _, d := range seq[1:] {
		d.Status.ObservedGeneration = 50
	}
	agent := newFakeAgent(t)
	agent.add(seq...)
	code, out, errOut := runRolloutStatus(t, agent, nomad.srv.URL, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "Waiting for the agent to observe job modify index 50 (it has seen 42)" {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.HasPrefix(lines[len(lines)-1], `Rollout of statefulset "web" complete: 3 of 3 pods at revision web-7a9b1e`) {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
	if errOut != "" {
		t.Errorf("stderr %q", errOut)
	}
}

func TestRolloutStatusWaitsForAgentToPickUpNewSet(t *testing.T) {
	// The job exists in Nomad; the agent answers 404 at first (it has not
	// seen it yet), then the set. (A goroutine that added the set after a
	// sleep raced the first poll on a loaded machine.)
	nomad := newFakeNomad(t)
	nomad.put(parentJob("fresh"), 7)
	agent := newFakeAgent(t)
	d := rolloutStep(func(d *client.SetDetail) {
		d.Name = "fresh"
		d.Status.ObservedGeneration = 7
		d.Status.CurrentRevision = d.Status.UpdateRevision
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 3, 3
		setPods(d, []string{newRev, newRev, newRev}, []string{"Available", "Available", "Available"})
	})
	agent.add(nil, d)
	code, out, errOut := runRolloutStatus(t, agent, nomad.srv.URL, "-timeout", "10s", "fresh")
	if code != ExitOK {
		t.Fatalf("exit %d, stdout %q stderr %q", code, out, errOut)
	}
	if !strings.HasPrefix(out, `Waiting for the agent to pick up statefulset "fresh"`) || !strings.Contains(out, "complete") {
		t.Errorf("output %q", out)
	}
}

func TestRolloutStatusJSONLines(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(rollingUpdate()...)
	code, out, _ := runRolloutStatus(t, agent, closedAddress(t), "-json", "web")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 {
		t.Fatalf("want one JSON object per progress change, got:\n%s", out)
	}
	var last rolloutProgress
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
	}
	if last.Phase != "done" || last.UpdatedReplicas != 3 || last.UpdateRevision != newRev {
		t.Errorf("last line %+v", last)
	}
}

func TestRolloutStatusNotFoundAndUnreachable(t *testing.T) {
	agent := newFakeAgent(t)
	code, _, errOut := runRolloutStatus(t, agent, closedAddress(t), "ghost")
	if code != ExitNotFound || !strings.Contains(errOut, `statefulset "ghost" not found`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}

	m, ui := newTestMeta()
	code = (&RolloutStatusCommand{Meta: m}).Run([]string{"-address", closedAddress(t), "-nomad-address", closedAddress(t), "web"})
	if code != ExitUnreachable || !strings.Contains(ui.ErrorWriter.String(), "cannot reach the nomad-statefulset agent") {
		t.Errorf("exit %d, stderr %q", code, ui.ErrorWriter.String())
	}
	checkNoCrash(t, ui.ErrorWriter.String())
}

func TestEvaluateRolloutUpdatingPod(t *testing.T) {
	// An absent ordinal is being created.
	d := rolloutStep(func(d *client.SetDetail) {
		setPods(d, []string{oldRev, oldRev}, []string{"Available", "Available"})
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 2, 0
	})
	p := evaluateRollout(d, 0)
	if p.Action != "creating" || p.Updating != "web-2" || p.UpdatingState != "" || !strings.HasSuffix(p.Message, "; creating web-2 to revision "+newRev) {
		t.Errorf("%s %q (%q): %s", p.Action, p.Updating, p.UpdatingState, p.Message)
	}
	// A pod at the old revision names it.
	d = rolloutStep(func(d *client.SetDetail) {
		setPods(d, []string{oldRev, oldRev, newRev}, []string{"Available", "Terminating", "Available"})
	})
	p = evaluateRollout(d, 0)
	if p.Action != "replacing" || p.Updating != "web-1" || p.UpdatingState != "Terminating, at "+oldRev {
		t.Errorf("%s %q (%q)", p.Action, p.Updating, p.UpdatingState)
	}
	// A scale down names the pod going away.
	d = rolloutStep(func(d *client.SetDetail) {
		d.Spec.Replicas = 2
		setPods(d, []string{newRev, newRev, newRev}, []string{"Available", "Available", "Terminating"})
		d.Status.CurrentRevision, d.Status.Replicas, d.Status.ReadyReplicas, d.Status.UpdatedReplicas = newRev, 3, 2, 3
	})
	p = evaluateRollout(d, 0)
	if p.Phase != "waiting" || p.Action != "removing" || p.Updating != "web-2" {
		t.Errorf("scale down: %s %s %q: %s", p.Phase, p.Action, p.Updating, p.Message)
	}
}

func TestRolloutStatusSurvivesAnAgentRestart(t *testing.T) {
	done := rolloutStep(func(d *client.SetDetail) {
		d.Status.CurrentRevision = d.Status.UpdateRevision
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 3, 3
		setPods(d, []string{newRev, newRev, newRev}, []string{"Available", "Available", "Available"})
	})
	// While the parent job runs, a 404 after the set was seen is an agent
	// that restarted and has not listed Nomad yet: keep following.
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 1)
	agent := newFakeAgent(t)
	agent.add(rolloutStep(func(d *client.SetDetail) {}), nil, nil, done)
	code, out, errOut := runRolloutStatus(t, agent, nomad.srv.URL, "web")
	if code != ExitOK || !strings.Contains(out, `Waiting for the agent to pick up statefulset "web" again`) || !strings.Contains(out, "complete") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}

	// Without the parent job, the set is gone for good.
	agent = newFakeAgent(t)
	agent.add(rolloutStep(func(d *client.SetDetail) {}), nil)
	code, _, errOut = runRolloutStatus(t, agent, closedAddress(t), "web")
	if code != ExitError || !strings.Contains(errOut, `statefulset "web" disappeared from the agent`) {
		t.Fatalf("exit %d, err %q", code, errOut)
	}
}

func TestRolloutStatusUndoWithPartitionIsNotDoneEarly(t *testing.T) {
	// After an undo to the revision web-0 kept below the partition,
	// updatedReplicas (web-0 and web-2) already reaches replicas-partition
	// while web-1 is still at the bad revision.
	d := rolloutStep(func(d *client.SetDetail) {
		d.Spec.Partition = 1
		d.Status.UpdateRevision, d.Status.CurrentRevision = oldRev, newRev
		setPods(d, []string{oldRev, newRev, oldRev}, []string{"Available", "Available", "Available"})
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 3, 2
	})
	p := evaluateRollout(d, 0)
	if p.Phase != "waiting" || p.Action != "next" || p.Updating != "web-1" {
		t.Fatalf("%s %s %s: %s", p.Phase, p.Action, p.Updating, p.Message)
	}
	setPods(d, []string{oldRev, oldRev, oldRev}, []string{"Available", "Available", "Available"})
	if p := evaluateRollout(d, 0); p.Phase != "done" {
		t.Fatalf("all pods from the partition up are back: %s: %s", p.Phase, p.Message)
	}
}

// TestRolloutStatusFollowsAGrowingClaim: a claim that grew is followed like a
// template rollout: not done while a volume waits to grow, and the wait
// says so, as it says what holds a step (the leader's approval here).
func TestRolloutStatusFollowsAGrowingClaim(t *testing.T) {
	d := &client.SetDetail{Name: "db", Spec: client.Spec{Replicas: 2},
		Status: client.Status{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "db-1", UpdateRevision: "db-1",
			Conditions: []client.Condition{{Type: "WaitingForApproval", Status: true, Reason: "LeaderUpdateSupervised", Message: "the leader db-0 is taken down once approved"}}},
		Pods: []client.Pod{
			{Ordinal: 0, Name: "db-0", Revision: "db-1", State: "Available", Claims: []client.ClaimVolume{{Name: "data-db-0", ResizePending: true}}},
			{Ordinal: 1, Name: "db-1", Revision: "db-1", State: "Available", Claims: []client.ClaimVolume{{Name: "data-db-1"}}},
		}}
	p := evaluateRollout(d, 0)
	if p.Phase == "done" || !strings.Contains(p.Message, "1 volumes still to grow") || !strings.Contains(p.Message, "waiting: the leader db-0 is taken down once approved") {
		t.Fatalf("phase %q: %s", p.Phase, p.Message)
	}
	d.Pods[0].Claims[0].ResizePending = false
	if p := evaluateRollout(d, 0); p.Phase != "done" {
		t.Fatalf("all volumes grown: phase %q: %s", p.Phase, p.Message)
	}
}

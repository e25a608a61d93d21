package command

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// runWrite runs a write command against the fake Nomad.
func runWrite(t *testing.T, mk func(Meta) cli.Command, nomad *fakeNomad, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	code := mk(m).Run(append([]string{"-nomad-address", nomad.srv.URL}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func scaleCmd(m Meta) cli.Command   { return &ScaleCommand{Meta: m} }
func pauseCmd(m Meta) cli.Command   { return &RolloutPauseCommand{Meta: m} }
func resumeCmd(m Meta) cli.Command  { return &RolloutPauseCommand{Meta: m, Resume: true} }
func restartCmd(m Meta) cli.Command { return &RolloutRestartCommand{Meta: m} }
func approveCmd(m Meta) cli.Command { return &RolloutApproveCommand{Meta: m} }

func TestScaleRegistersWithCheckAndSet(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 12)
	code, out, errOut := runWrite(t, scaleCmd, nomad, "web", "5")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	regs := nomad.registers()
	if len(regs) != 1 {
		t.Fatalf("%d registers, want 1", len(regs))
	}
	if !regs[0].EnforceIndex || regs[0].JobModifyIndex != 12 {
		t.Errorf("register EnforceIndex=%v JobModifyIndex=%d, want a check-and-set on 12", regs[0].EnforceIndex, regs[0].JobModifyIndex)
	}
	job := nomad.get("default", "web")
	if job.Meta["statefulset_replicas"] != "5" || job.Meta["owner"] != "team-a" {
		t.Errorf("meta after scale: %v", job.Meta)
	}
	if *job.TaskGroups[0].Count != 0 {
		t.Errorf("the template's count changed to %d", *job.TaskGroups[0].Count)
	}
	want := "Scaling statefulset \"web\" from 3 to 5 replicas\nJob \"web\" re-registered: job modify index 12 -> 13, evaluation eval-13\n"
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

func TestScaleNoChangeWritesNothing(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 12)
	code, out, _ := runWrite(t, scaleCmd, nomad, "web", "3")
	if code != ExitOK || len(nomad.registers()) != 0 {
		t.Fatalf("exit %d, %d registers", code, len(nomad.registers()))
	}
	if !strings.Contains(out, "already has 3 replicas") {
		t.Errorf("output %q", out)
	}
}

func TestScaleJSON(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 4)
	code, out, _ := runWrite(t, scaleCmd, nomad, "-json", "web", "0")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var res writeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !res.Changed || res.ReadJobModifyIndex != 4 || res.JobModifyIndex != 5 || res.EvalID != "eval-5" || res.Action != "scale" {
		t.Errorf("result %+v", res)
	}
}

func TestWriteConflictExits3(t *testing.T) {
	for name, mk := range map[string]func(Meta) cli.Command{"scale": scaleCmd, "pause": pauseCmd, "restart": restartCmd, "approve": approveCmd} {
		t.Run(name, func(t *testing.T) {
			nomad := newFakeNomad(t)
			nomad.put(parentJob("web"), 12)
			// Someone runs `nomad job run` between our read and our write.
			nomad.beforeRegister = func(f *fakeNomad) {
				next := uint64(13)
				f.jobs["default/web"].JobModifyIndex = &next
				f.beforeRegister = nil
			}
			args := []string{"web"}
			if name == "scale" {
				args = append(args, "4")
			}
			code, out, errOut := runWrite(t, mk, nomad, args...)
			if code != ExitConflict {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitConflict, errOut)
			}
			for _, want := range []string{
				"the job changed since it was read (someone else ran `nomad job run`?); run the command again",
				"Enforcing job modify index 12: job exists with conflicting job modify index: 13",
			} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
			if len(nomad.registers()) != 0 {
				t.Errorf("a conflicting write was stored")
			}
			if strings.Contains(out, "re-registered") {
				t.Errorf("stdout claims success: %q", out)
			}
			checkNoCrash(t, errOut)
		})
	}
}

func TestPauseResume(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 1)
	if code, out, errOut := runWrite(t, pauseCmd, nomad, "web"); code != ExitOK || !strings.Contains(out, "Pausing") {
		t.Fatalf("pause: exit %d, out %q, err %q", code, out, errOut)
	}
	if got := nomad.get("default", "web").Meta["statefulset_paused"]; got != "true" {
		t.Fatalf("statefulset_paused = %q after pause", got)
	}
	if code, out, _ := runWrite(t, pauseCmd, nomad, "web"); code != ExitOK || !strings.Contains(out, "already paused") || len(nomad.registers()) != 1 {
		t.Fatalf("second pause: exit %d, out %q, %d registers", code, out, len(nomad.registers()))
	}
	// A paused set refuses a restart: it would not roll.
	code, _, errOut := runWrite(t, restartCmd, nomad, "web")
	if code != ExitError || !strings.Contains(errOut, "rollout resume web") {
		t.Fatalf("restart while paused: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := runWrite(t, resumeCmd, nomad, "web"); code != ExitOK || !strings.Contains(out, "Resuming") {
		t.Fatalf("resume: exit %d, out %q", code, out)
	}
	if got := nomad.get("default", "web").Meta["statefulset_paused"]; got != "false" {
		t.Fatalf("statefulset_paused = %q after resume", got)
	}
	if code, out, _ := runWrite(t, resumeCmd, nomad, "web"); code != ExitOK || !strings.Contains(out, "not paused") {
		t.Fatalf("second resume: exit %d, out %q", code, out)
	}
}

// The write verbs read the annotations as jobs.Parse, and so the agent,
// does: a value with surrounding space is the value. Otherwise restart would
// roll a set the agent holds paused, and pause and scale would re-register
// a job that is already as asked.
func TestWriteVerbsReadAnnotationsAsTheAgentDoes(t *testing.T) {
	cases := []struct {
		name   string
		meta   map[string]string
		cmd    func(Meta) cli.Command
		args   []string
		code   int
		want   string
		stderr bool
	}{
		{"restart refused while paused", map[string]string{jobs.KeyPaused: " true "}, restartCmd, []string{"web"}, ExitError, "rollout resume web", true},
		{"pause when paused", map[string]string{jobs.KeyPaused: "true\n"}, pauseCmd, []string{"web"}, ExitOK, "already paused", false},
		{"scale to the same count", map[string]string{jobs.KeyReplicas: " 3"}, scaleCmd, []string{"web", "3"}, ExitOK, "already has 3 replicas", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nomad := newFakeNomad(t)
			job := parentJob("web")
			for k, v := range tc.meta {
				job.Meta[k] = v
			}
			nomad.put(job, 1)
			code, out, errOut := runWrite(t, tc.cmd, nomad, tc.args...)
			got := out
			if tc.stderr {
				got = errOut
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Fatalf("exit %d, want %d with %q; stdout %q, stderr %q", code, tc.code, tc.want, out, errOut)
			}
			if n := len(nomad.registers()); n != 0 {
				t.Errorf("%d registers, want none", n)
			}
		})
	}
}

func TestRestartStampsGroupMetaAndMakesANewRevision(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 3)
	before, err := jobs.RevisionData(nomad.get("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runWrite(t, restartCmd, nomad, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	job := nomad.get("default", "web")
	if got := job.TaskGroups[0].Meta[RestartedAtKey]; got != "2026-11-21T12:00:00Z" {
		t.Errorf("group meta %s = %q, want the RFC 3339 time", RestartedAtKey, got)
	}
	after, err := jobs.RevisionData(job)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Error("restart did not change the revision data: nothing would roll")
	}
	if !strings.Contains(out, "Restarting statefulset \"web\"") {
		t.Errorf("output %q", out)
	}
	// A second restart in the same second must still change the template.
	if code, _, errOut := runWrite(t, restartCmd, nomad, "web"); code != ExitOK {
		t.Fatalf("second restart: exit %d, %q", code, errOut)
	}
	if got := nomad.get("default", "web").TaskGroups[0].Meta[RestartedAtKey]; got == "2026-11-21T12:00:00Z" {
		t.Errorf("second restart in the same second wrote the same stamp %q", got)
	}
}

func TestWriteRefusals(t *testing.T) {
	nomad := newFakeNomad(t)
	plain := parentJob("plain")
	delete(plain.Meta, "statefulset")
	nomad.put(plain, 1)
	stopped := parentJob("stopped")
	stopped.Stop = ptrTo(true)
	nomad.put(stopped, 1)

	cases := []struct {
		set, want string
		code      int
	}{
		{"plain", `job "plain" in namespace "default" is not a statefulset`, ExitError},
		{"stopped", `is stopped; run it again with`, ExitError},
		{"missing", `reading job "missing" in namespace "default": not found`, ExitNotFound},
	}
	for _, tc := range cases {
		code, _, errOut := runWrite(t, scaleCmd, nomad, tc.set, "2")
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("scale %s: exit %d, stderr %q; want %d and %q", tc.set, code, errOut, tc.code, tc.want)
		}
	}
	if len(nomad.registers()) != 0 {
		t.Error("a refused write was stored")
	}
}

func TestWriteNomadUnreachable(t *testing.T) {
	m, ui := newTestMeta()
	code := (&ScaleCommand{Meta: m}).Run([]string{"-nomad-address", closedAddress(t), "web", "2"})
	if code != ExitUnreachable {
		t.Fatalf("exit %d, want %d", code, ExitUnreachable)
	}
	errOut := ui.ErrorWriter.String()
	if !strings.Contains(errOut, "cannot reach Nomad at http://127.0.0.1:") || !strings.Contains(errOut, "NOMAD_ADDR") {
		t.Errorf("stderr %q", errOut)
	}
	checkNoCrash(t, errOut)
}

func TestWriteUsesNomadEnvAndNamespace(t *testing.T) {
	nomad := newFakeNomad(t)
	job := parentJob("db")
	job.Namespace = ptrTo("prod")
	nomad.put(job, 9)
	t.Setenv("NOMAD_ADDR", nomad.srv.URL)
	m, ui := newTestMeta()
	if code := (&ScaleCommand{Meta: m}).Run([]string{"-namespace", "prod", "db", "1"}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := nomad.get("prod", "db").Meta["statefulset_replicas"]; got != "1" {
		t.Errorf("replicas %q in prod", got)
	}
}

// undoFixture stores revision 1 (image 1.26) and revision 2 (image 1.27,
// the job as it is now, scaled to 5 since) in a fake agent and Nomad.
func undoFixture(t *testing.T) (*fakeAgent, *fakeNomad, []byte) {
	t.Helper()
	v1 := parentJob("web")
	v1.TaskGroups[0].Tasks[0].Config["image"] = "nginx:1.26"
	v1.Meta["owner"] = "team-old"
	data1, err := jobs.RevisionData(v1)
	if err != nil {
		t.Fatal(err)
	}
	v2 := parentJob("web")
	v2.Meta["statefulset_replicas"] = "5"
	v2.Meta["statefulset_partition"] = "1"
	v2.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: ptrTo(int64(0)), Max: ptrTo(int64(10))}
	data2, err := jobs.RevisionData(v2)
	if err != nil {
		t.Fatal(err)
	}
	nomad := newFakeNomad(t)
	nomad.put(v2, 20)
	d := webDetail()
	d.Revisions = []client.Revision{
		{Number: 1, Name: "web-aaaa", CreatedAt: testNow.Add(-time.Hour), JobVersion: 0, Template: string(data1)},
		{Number: 2, Name: "web-bbbb", CreatedAt: testNow.Add(-time.Minute), JobVersion: 1, Template: string(data2)},
	}
	d.Status.CurrentRevision, d.Status.UpdateRevision = "web-bbbb", "web-bbbb"
	agent := newFakeAgent(t)
	agent.add(d)
	return agent, nomad, data1
}

func runUndo(t *testing.T, agent *fakeAgent, nomad *fakeNomad, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	code := (&RolloutUndoCommand{Meta: m}).Run(append([]string{"-address", agent.srv.URL, "-nomad-address", nomad.srv.URL}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func TestRolloutUndoReRegistersTheRevisionTemplate(t *testing.T) {
	for _, args := range [][]string{{"-to-revision", "1", "web"}, {"web"}} {
		agent, nomad, data1 := undoFixture(t)
		code, out, errOut := runUndo(t, agent, nomad, args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		if errOut != "" {
			t.Errorf("%v: stderr %q (the template must round-trip byte for byte)", args, errOut)
		}
		regs := nomad.registers()
		if len(regs) != 1 || !regs[0].EnforceIndex || regs[0].JobModifyIndex != 20 {
			t.Fatalf("%v: registers %+v", args, regs)
		}
		job := nomad.get("default", "web")
		got, err := jobs.RevisionData(job)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data1) {
			t.Errorf("%v: registered template\n%s\nwant revision 1's\n%s", args, got, data1)
		}
		// How the set is managed stays as it is now.
		if job.Meta["statefulset_replicas"] != "5" || job.Meta["statefulset_partition"] != "1" || job.Meta["owner"] != "team-old" {
			t.Errorf("%v: meta %v", args, job.Meta)
		}
		g := job.TaskGroups[0]
		if *g.Count != 0 || g.Scaling == nil || *g.Scaling.Max != 10 {
			t.Errorf("%v: count %v scaling %+v: the parent's count and scaling must stay", args, *g.Count, g.Scaling)
		}
		if spec, err := jobs.Parse(job); err != nil || spec.Replicas != 5 {
			t.Errorf("%v: the rolled-back parent does not parse: %v", args, err)
		}
		if !strings.Contains(out, `Rolling statefulset "web" back to revision 1 (web-aaaa, from job version 0)`) {
			t.Errorf("%v: output %q", args, out)
		}
	}
}

func TestRolloutUndoToCurrentTemplateWritesNothing(t *testing.T) {
	agent, nomad, _ := undoFixture(t)
	code, out, _ := runUndo(t, agent, nomad, "-to-revision", "2", "web")
	if code != ExitOK || len(nomad.registers()) != 0 || !strings.Contains(out, "already has the template of revision 2") {
		t.Fatalf("exit %d, %d registers, out %q", code, len(nomad.registers()), out)
	}
}

func TestRolloutUndoErrors(t *testing.T) {
	agent, nomad, _ := undoFixture(t)
	code, _, errOut := runUndo(t, agent, nomad, "-to-revision", "7", "web")
	if code != ExitNotFound || !strings.Contains(errOut, "has no revision 7 (it has: 1, 2)") {
		t.Errorf("unknown revision: exit %d, %q", code, errOut)
	}
	nomad.beforeRegister = func(f *fakeNomad) {
		next := uint64(21)
		f.jobs["default/web"].JobModifyIndex = &next
	}
	code, _, errOut = runUndo(t, agent, nomad, "web")
	if code != ExitConflict || !strings.Contains(errOut, "run the command again") {
		t.Errorf("conflict: exit %d, %q", code, errOut)
	}

	// Only one revision: nothing to roll back to.
	single := webDetail()
	single.Revisions = single.Revisions[:1]
	single.Status.UpdateRevision = single.Revisions[0].Name
	agent2 := newFakeAgent(t)
	agent2.add(single)
	code, _, errOut = runUndo(t, agent2, nomad, "web")
	if code != ExitError || !strings.Contains(errOut, "no revision before web-7a9b1e") {
		t.Errorf("single revision: exit %d, %q", code, errOut)
	}
}

func TestApplyRevisionKeepsExplicitZeros(t *testing.T) {
	// restart { attempts = 0 } is pruned from revision data; re-registered
	// without it Nomad would default attempts to 2, a different template.
	v1 := parentJob("web")
	data, err := jobs.RevisionData(v1)
	if err != nil {
		t.Fatal(err)
	}
	v2 := parentJob("web")
	v2.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: ptrTo(5)}
	got, err := jobs.ApplyRevision(v2, data)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.TaskGroups[0].RestartPolicy.Attempts; a == nil || *a != 0 {
		t.Errorf("restart attempts %v, want an explicit 0", a)
	}
	// Simulate Nomad: canonicalize, then recompute.
	got.Canonicalize()
	back, err := jobs.RevisionData(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Errorf("after canonicalization\n%s\nwant\n%s", back, data)
	}
	if v2.TaskGroups[0].RestartPolicy.Attempts == nil || *v2.TaskGroups[0].RestartPolicy.Attempts != 5 {
		t.Error("applyRevision changed its input")
	}
	if _, err := jobs.ApplyRevision(v2, []byte(`{"Meta":{}}`)); err == nil || !strings.Contains(err.Error(), "no task group") {
		t.Errorf("data without a group: %v", err)
	}
	if _, err := jobs.ApplyRevision(v2, []byte(`not json`)); err == nil {
		t.Error("bad data accepted")
	}
}

func podReplaceCmd(m Meta) cli.Command { return &PodReplaceCommand{Meta: m} }

// TestPodReplaceWritesARequestTheDaemonCarriesOut: pod replace sets the
// parent's meta statefulset_pod_replace_<ordinal> to a fresh token (with
// ",new-volume" for -new-volume) by check-and-set, which the parser reads
// back as a Replacement; without -yes it asks, and anything but "yes"
// writes nothing.
func TestPodReplaceWritesARequestTheDaemonCarriesOut(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 7)
	code, out, errOut := runWrite(t, podReplaceCmd, nomad, "-yes", "-new-volume", "web", "1")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	regs := nomad.registers()
	if len(regs) != 1 || !regs[0].EnforceIndex || regs[0].JobModifyIndex != 7 {
		t.Fatalf("registers %+v, want one check-and-set on 7", regs)
	}
	job := nomad.get("default", "web")
	if got := job.Meta["statefulset_pod_replace_1"]; got != "2026-11-21T12:00:00Z,new-volume" {
		t.Fatalf("request %q", got)
	}
	spec, err := jobs.Parse(job)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Replacements) != 1 || !spec.Replacements[0].NewVolume || spec.Replacements[0].Ordinal != 1 {
		t.Fatalf("parsed back as %+v", spec.Replacements)
	}
	if !strings.Contains(out, "Replacing pod web-1") {
		t.Errorf("output %q", out)
	}
	// A second request in the same clock tick still gets a new token.
	if code, _, errOut := runWrite(t, podReplaceCmd, nomad, "-yes", "web", "1"); code != ExitOK {
		t.Fatalf("second request: exit %d, %q", code, errOut)
	}
	if got := nomad.get("default", "web").Meta["statefulset_pod_replace_1"]; got == "2026-11-21T12:00:00Z" || strings.HasSuffix(got, ",new-volume") {
		t.Errorf("second request wrote %q", got)
	}

	// Asked, and not confirmed: nothing is written.
	m, ui := newTestMeta()
	ui.InputReader = strings.NewReader("no\n")
	if code := podReplaceCmd(m).Run([]string{"-nomad-address", nomad.srv.URL, "web", "2"}); code != ExitError {
		t.Fatalf("unconfirmed: exit %d, want %d", code, ExitError)
	}
	if len(nomad.registers()) != 2 {
		t.Fatalf("an unconfirmed replace wrote to Nomad")
	}
	if code, _, _ := runWrite(t, podReplaceCmd, nomad, "-yes", "web", "x"); code != ExitUsage {
		t.Errorf("a bad ordinal: exit %d, want %d", code, ExitUsage)
	}
}

// TestRolloutApproveWritesAToken: approve sets the parent's meta
// statefulset_approve to a fresh token by check-and-set, which the parser
// reads back as the spec's Approval. It makes no new revision, and a
// second approval in the same clock tick still gets a new token (or it
// would approve nothing).
func TestRolloutApproveWritesAToken(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.put(parentJob("web"), 7)
	before, err := jobs.RevisionData(nomad.get("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runWrite(t, approveCmd, nomad, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	regs := nomad.registers()
	if len(regs) != 1 || !regs[0].EnforceIndex || regs[0].JobModifyIndex != 7 {
		t.Fatalf("registers %+v, want one check-and-set on 7", regs)
	}
	job := nomad.get("default", "web")
	const token = "2026-11-21T12:00:00Z"
	if got := job.Meta[jobs.KeyApprove]; got != token {
		t.Fatalf("%s = %q, want %q", jobs.KeyApprove, got, token)
	}
	spec, err := jobs.Parse(job)
	if err != nil || spec.Approval != token {
		t.Fatalf("parsed back: approval %q, err %v", spec.Approval, err)
	}
	after, err := jobs.RevisionData(job)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("approve changed the revision data: the set would roll")
	}
	if job.Meta["owner"] != "team-a" || job.Meta["statefulset_replicas"] != "3" {
		t.Errorf("other meta changed: %v", job.Meta)
	}
	want := "Approving the pending step of statefulset \"web\" (meta statefulset_approve = " + token + ")\n" +
		"Job \"web\" re-registered: job modify index 7 -> 8, evaluation eval-8\n"
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}

	code, out, errOut = runWrite(t, approveCmd, nomad, "-json", "web")
	if code != ExitOK {
		t.Fatalf("second approve: exit %d, stderr %q", code, errOut)
	}
	var res writeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Action != "approve" || !res.Changed || res.ReadJobModifyIndex != 8 || res.JobModifyIndex != 9 || res.EvalID != "eval-9" {
		t.Errorf("result %+v", res)
	}
	const next = "2026-11-21T12:00:00.000000001Z"
	if got := nomad.get("default", "web").Meta[jobs.KeyApprove]; got != next || !strings.Contains(res.Message, next) {
		t.Errorf("second approval in the same tick: %s = %q, message %q; want %q", jobs.KeyApprove, got, res.Message, next)
	}
}

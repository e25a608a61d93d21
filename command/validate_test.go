package command

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// badJob breaks several rules at once: every one must be reported.
func badJob() *api.Job {
	j := parentJob("web")
	j.Meta["statefulset_replicas"] = "three"
	j.Meta["statefulset_update_strategy"] = "Rolling"
	j.Meta["statefulset_volume_claims"] = "data"
	j.TaskGroups[0].Count = ptrTo(2)
	return j
}

func writeJSONJob(t *testing.T, job *api.Job, wrap bool) string {
	t.Helper()
	var v any = job
	if wrap {
		v = map[string]any{"Job": job}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "web.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runValidate(t *testing.T, nomadAddr string, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	code := (&ValidateCommand{Meta: m}).Run(append([]string{"-nomad-address", nomadAddr}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func TestValidateBadJobListsEveryProblemGolden(t *testing.T) {
	path := writeJSONJob(t, badJob(), true)
	// A JSON job needs no Nomad: the address is dead on purpose.
	code, out, errOut := runValidate(t, closedAddress(t), path)
	if code != ExitError {
		t.Fatalf("exit %d, want %d; stderr %q", code, ExitError, errOut)
	}
	golden(t, "validate_bad", strings.ReplaceAll(out, path, "web.json"))
	for _, key := range []string{"statefulset_replicas", "statefulset_update_strategy", "statefulset_volume_claims", "count"} {
		if !strings.Contains(out, "  - "+key+": ") {
			t.Errorf("problem with %s not listed:\n%s", key, out)
		}
	}
}

func TestValidateBadJobJSON(t *testing.T) {
	path := writeJSONJob(t, badJob(), false)
	code, out, _ := runValidate(t, closedAddress(t), "-json", path)
	if code != ExitError {
		t.Fatalf("exit %d", code)
	}
	var got validateOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Valid || len(got.Problems) < 4 || got.Job != "web" || got.Spec != nil {
		t.Errorf("decoded %+v", got)
	}
	for _, p := range got.Problems {
		if p.Key == "" || p.Rule == "" {
			t.Errorf("problem without key or rule: %+v", p)
		}
	}
}

func TestValidateGoodJobGolden(t *testing.T) {
	path := writeJSONJob(t, parentJob("web"), true)
	code, out, errOut := runValidate(t, closedAddress(t), path)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q, out %q", code, errOut, out)
	}
	golden(t, "validate_good", strings.ReplaceAll(out, path, "web.json"))
}

func TestValidateNotAStatefulset(t *testing.T) {
	j := parentJob("web")
	delete(j.Meta, "statefulset")
	code, out, _ := runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
	if code != ExitError || !strings.Contains(out, `statefulset: "" is not "true"`) {
		t.Fatalf("exit %d, out %q", code, out)
	}
}

func TestValidateHCLThroughNomadParseAPI(t *testing.T) {
	nomad := newFakeNomad(t)
	nomad.parseJob = badJob()
	dir := t.TempDir()
	path := filepath.Join(dir, "web.nomad.hcl")
	if err := os.WriteFile(path, []byte(`job "web" { }`), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := filepath.Join(dir, "vars.hcl")
	if err := os.WriteFile(vars, []byte(`image = "nginx"`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runValidate(t, nomad.srv.URL, "-var-file", vars, path)
	if code != ExitError || !strings.Contains(out, "statefulset_replicas") {
		t.Fatalf("exit %d, out %q", code, out)
	}
	if nomad.parseReq == nil || nomad.parseReq.JobHCL != `job "web" { }` || !strings.Contains(nomad.parseReq.Variables, `image = "nginx"`) {
		t.Errorf("parse request %+v", nomad.parseReq)
	}

	nomad.parseJob = parentJob("web")
	if code, out, errOut := runValidate(t, nomad.srv.URL, path); code != ExitOK || !strings.Contains(out, "is a valid statefulset") {
		t.Errorf("good HCL: exit %d, out %q, err %q", code, out, errOut)
	}

	nomad.parseStatus, nomad.parseErr = http.StatusBadRequest, "web.nomad.hcl:1,13-14: Missing required argument"
	code, _, errOut := runValidate(t, nomad.srv.URL, path)
	if code != ExitError || !strings.Contains(errOut, "does not parse: web.nomad.hcl:1,13-14: Missing required argument") {
		t.Errorf("HCL error: exit %d, stderr %q", code, errOut)
	}
}

func TestValidateHCLWithoutNomadExits5(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.nomad.hcl")
	if err := os.WriteFile(path, []byte(`job "web" {}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runValidate(t, closedAddress(t), path)
	if code != ExitUnreachable {
		t.Fatalf("exit %d, want %d", code, ExitUnreachable)
	}
	if out != "" || !strings.Contains(errOut, "cannot reach Nomad") || !strings.Contains(errOut, "validate needs Nomad to parse HCL job files") {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	checkNoCrash(t, errOut)
}

func TestValidateStdinAndMissingFile(t *testing.T) {
	b, err := json.Marshal(parentJob("web"))
	if err != nil {
		t.Fatal(err)
	}
	m, ui := newTestMeta()
	code := (&ValidateCommand{Meta: m, Stdin: strings.NewReader(string(b))}).Run([]string{"-"})
	if code != ExitOK || !strings.Contains(ui.OutputWriter.String(), "standard input is a valid statefulset") {
		t.Errorf("stdin: exit %d, out %q, err %q", code, ui.OutputWriter.String(), ui.ErrorWriter.String())
	}

	code, _, errOut := runValidate(t, closedAddress(t), filepath.Join(t.TempDir(), "nope.hcl"))
	if code != ExitError || !strings.Contains(errOut, "reading job file") || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"Job": [}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runValidate(t, closedAddress(t), bad)
	if code != ExitError || !strings.Contains(errOut, "the JSON job file does not parse") {
		t.Errorf("bad JSON: exit %d, stderr %q", code, errOut)
	}
}

// A statefulset value that looks meant ("True", "yes", "1", the key missing
// beside other statefulset_* keys) is named, with what running the job does
// to a set of its name: it detaches it (DESIGN §1), it never deletes it.
func TestValidateWarnsOfAnAnnotationThatDetaches(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		remove      bool
		meant       bool
	}{
		{name: "True", value: "True", meant: true},
		{name: "yes", value: "yes", meant: true},
		{name: "1", value: "1", meant: true},
		{name: "removed", remove: true, meant: true},
		{name: "false", value: "false", meant: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := parentJob("web")
			j.Meta["statefulset"] = tc.value
			if tc.remove {
				delete(j.Meta, "statefulset")
			}
			code, out, errOut := runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
			if code != ExitError {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitError, errOut)
			}
			if !strings.Contains(out, `  - statefulset: "`+tc.value+`" is not "true"`) {
				t.Errorf("the problem does not name the key and value:\n%s", out)
			}
			if !strings.Contains(out, "detaches a running set of its name") || !strings.Contains(out, "deleted") {
				t.Errorf("the problem does not say a running set is detached, not deleted:\n%s", out)
			}
			if got := strings.Contains(out, `did you mean "true"?`); got != tc.meant {
				t.Errorf("did-you-mean shown=%v, want %v:\n%s", got, tc.meant, out)
			}
		})
	}
}

// validate shows every parsed key: the claims' sizes and classes, the
// spread, and the leader and disruption settings, so that a user sees
// that the PostgreSQL example's leader settings parsed.
func TestValidateShowsTheWholeSpec(t *testing.T) {
	j := parentJob("web")
	g := j.TaskGroups[0]
	g.Volumes = map[string]*api.VolumeRequest{"data": {Name: "data", Type: "host", Source: "data",
		AccessMode: "single-node-single-writer", AttachmentMode: "file-system"}}
	g.Services = []*api.Service{{Name: "web-primary", Checks: []api.ServiceCheck{{Name: "primary", Type: "script",
		Command: "/bin/true", Interval: time.Second, Timeout: time.Second}}}}
	j.Meta["statefulset_volume_claims"] = "data"
	j.Meta["statefulset_claim_data_capacity"] = "1GiB..2GiB"
	j.Meta["statefulset_spread"] = "${meta.rack}"
	j.Meta["statefulset_spread_required"] = "true"
	j.Meta["statefulset_leader_check"] = "primary"
	j.Meta["statefulset_leader_update"] = "switchover"
	j.Meta["statefulset_switchover_command"] = "/local/switchover.sh"
	j.Meta["statefulset_disruption_check"] = "/local/can-lose-one.sh"
	j.Meta["statefulset_exec_timeout"] = "45s"
	j.Meta["statefulset_maintenance_window"] = "sat 02:00-05:00 UTC,Mon-Fri 22:00-23:30 Europe/Berlin"
	code, out, errOut := runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
	if code != ExitOK {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	for _, want := range []string{"Claim data", "1.0 GiB..2.0 GiB, class default", "Spread", "${meta.rack} (required)",
		"Leader Check", "primary (leader update: switchover)", "Switchover Command", "/local/switchover.sh",
		"Disruption Check", "/local/can-lose-one.sh", "Exec Timeout", "45s",
		"Maintenance Window", "Sat 02:00-05:00 UTC, Mon-Fri 22:00-23:30 Europe/Berlin"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate does not show %q:\n%s", want, out)
		}
	}
}

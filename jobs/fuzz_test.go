package jobs

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// metaFromText turns "k=v" lines into a meta map: a compact fuzz input.
func metaFromText(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// FuzzParse feeds arbitrary annotations and job shapes to Parse. It must
// never panic; an accepted job must render valid children at its first and
// last ordinals, and its leader-aware fields must keep the rules of DESIGN
// §3b; a rejected one must say why, key by key. The group's services carry
// the checks "primary", an unnamed one (`service: "web" check`) and
// "alive"; bit 2 of groups adds a second task, "backup".
func FuzzParse(f *testing.F) {
	f.Add("statefulset=true\nstatefulset_replicas=3\nstatefulset_volume_claims=data", 0, uint8(1), "host", "web")
	f.Add("statefulset=true\nstatefulset_max_unavailable=25%\nstatefulset_pod_management_policy=Parallel", 0, uint8(1), "host", "db")
	f.Add("statefulset=true\nstatefulset_replicas=-1\nstatefulset_partiton=2", 3, uint8(2), "csi", "Web")
	f.Add("statefulset=true\nstatefulset_leader_check=primary\nstatefulset_leader_update=switchover\nstatefulset_switchover_command=promote\nstatefulset_exec_timeout=2m", 0, uint8(1), "host", "pg")
	f.Add("statefulset=true\nstatefulset_leader_check=service: \"web\" check\nstatefulset_leader_update=supervised\nstatefulset_approve=t1", 0, uint8(5), "host", "pg")
	f.Add("statefulset=true\nstatefulset_disruption_check=pg_isready\nstatefulset_exec_task=backup", 0, uint8(5), "host", "pg")
	f.Add("statefulset=true\nstatefulset_disruption_check=true\nstatefulset_leader_update=switchover\nstatefulset_exec_timeout=0", 0, uint8(5), "host", "pg")
	f.Add("statefulset=true\nstatefulset_volume_claims=data,logs\nstatefulset_claim_data_capacity=10GiB..20GiB\nstatefulset_claim_data_class=fast\nstatefulset_claim_logs_capacity=1.5GB", 0, uint8(1), "host", "pg")
	f.Add("statefulset=true\nstatefulset_volume_claims=data\nstatefulset_claim_dta_capacity=10GiBs\nstatefulset_claim_data_class=9x\nstatefulset_claim_data_size=1", 0, uint8(1), "host", "pg")
	f.Add("statefulset=true\nstatefulset_volume_claims=data\nstatefulset_claim_data_capacity=20GiB..10GiB", 0, uint8(1), "host", "db")
	f.Add("statefulset=true\nstatefulset_maintenance_window=Sat 02:00-05:00 UTC, Mon-Fri 22:00-23:30 Europe/Berlin", 0, uint8(1), "host", "db")
	f.Add("statefulset=true\nstatefulset_maintenance_window=Sat 02:00-25:00 UTC", 0, uint8(1), "host", "db")
	f.Fuzz(func(t *testing.T, metaText string, count int, groups uint8, volType, id string) {
		job := newJob(metaFromText(metaText))
		job.ID = &id
		job.TaskGroups[0].Count = &count
		job.TaskGroups[0].Volumes["data"].Type = volType
		tg := job.TaskGroups[0]
		tg.Services[0].Checks = []api.ServiceCheck{{Name: "primary", Type: "tcp"}, {Type: "tcp"}}
		tg.Tasks[0].Services[0].Checks = []api.ServiceCheck{{Name: "alive", Type: "tcp"}}
		if groups&4 != 0 {
			tg.Tasks = append(tg.Tasks, &api.Task{Name: "backup", Driver: "exec"})
		}
		for range int(groups%4) - 1 {
			job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: ptr("extra"), Count: ptr(0)})
		}
		if groups%4 == 0 {
			job.TaskGroups = nil
		}
		spec, err := Parse(job)
		if err != nil {
			if errors.Is(err, ErrNotManaged) {
				if IsManaged(job) {
					t.Fatalf("managed job reported as not managed")
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("Parse error is not a ValidationError with problems: %v", err)
			}
			msg := err.Error()
			for _, p := range verr.Problems {
				if p.Key == "" || p.Rule == "" || !strings.Contains(msg, p.String()) {
					t.Fatalf("problem %+v is incomplete or missing from %q", p, msg)
				}
			}
			return
		}
		checkLeaderSpec(t, job, spec)
		data, err := RevisionData(job)
		if err != nil {
			t.Fatalf("RevisionData of an accepted job: %v", err)
		}
		checkClaimSpec(t, job, spec, data)
		rev := testRevision(spec.Name, data)
		for _, ord := range []int{spec.OrdinalsStart, maxOrdinal(spec)} {
			child, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatalf("RenderChild(%d) of an accepted job: %v", ord, err)
			}
			if errs := validateChild(spec, rev, ord, child); len(errs) > 0 {
				t.Fatalf("child %d breaks rules: %v", ord, errs)
			}
		}
	})
}

// checkLeaderSpec holds an accepted spec to the rules of DESIGN §3b: a
// leader update other than last has a leader check, switchover has its
// command, a command has a task of the group to run in, and the leader
// check is one of the group's checks.
func checkLeaderSpec(t *testing.T, job *api.Job, spec reconciler.Spec) {
	t.Helper()
	switch spec.LeaderUpdate {
	case reconciler.LeaderLast:
	case reconciler.LeaderSupervised, reconciler.LeaderSwitchover:
		if spec.LeaderCheck == "" {
			t.Fatalf("leader update %q accepted without a leader check", spec.LeaderUpdate)
		}
	default:
		t.Fatalf("leader update %q accepted", spec.LeaderUpdate)
	}
	if spec.LeaderUpdate == reconciler.LeaderSwitchover && spec.SwitchoverCommand == "" {
		t.Fatalf("switchover accepted without a command")
	}
	if _, ok := job.Meta[KeyLeaderCheck]; ok && !slices.Contains(serviceCheckNames(job, job.TaskGroups[0]), spec.LeaderCheck) {
		t.Fatalf("leader check %q is not a check of the group", spec.LeaderCheck)
	}
	if spec.SwitchoverCommand != "" || spec.DisruptionCheck != "" {
		found := false
		for _, task := range job.TaskGroups[0].Tasks {
			found = found || task.Name == spec.ExecTask
		}
		if !found {
			t.Fatalf("commands accepted with exec task %q, not a task of the group", spec.ExecTask)
		}
	}
	if spec.ExecTimeout < 0 {
		t.Fatalf("exec timeout %v accepted", spec.ExecTimeout)
	}
	if _, ok := job.Meta[KeyApprove]; ok && spec.Approval == "" {
		t.Fatalf("an empty approval accepted")
	}
}

// checkClaimSpec holds an accepted spec's claim templates to DESIGN §3b:
// one per claim that has keys, in claim order, each a claim of the set,
// with a minimum above zero and a maximum not below it, and a class name;
// a template reads back from its own keys; and the claim keys are not in
// the revision data.
func checkClaimSpec(t *testing.T, job *api.Job, spec reconciler.Spec, data []byte) {
	t.Helper()
	at := map[string]int{}
	for i, c := range spec.VolumeClaims {
		at[c] = i
	}
	last := -1
	for _, ct := range spec.ClaimTemplates {
		i, ok := at[ct.Claim]
		if !ok || i <= last {
			t.Fatalf("claim templates %+v are not claims %v in their order", spec.ClaimTemplates, spec.VolumeClaims)
		}
		last = i
		capKey, classKey := ClaimCapacityKey(ct.Claim), ClaimClassKey(ct.Claim)
		if _, set := job.Meta[capKey]; set {
			if ct.CapacityMin <= 0 || (ct.CapacityMax != 0 && ct.CapacityMax < ct.CapacityMin) {
				t.Fatalf("capacity %d..%d accepted", ct.CapacityMin, ct.CapacityMax)
			}
			lo, hi, rule := parseCapacity(FormatCapacity(ct.CapacityMin, ct.CapacityMax))
			if rule != "" || lo != ct.CapacityMin || hi != ct.CapacityMax {
				t.Fatalf("%+v does not read back from %q: %d..%d %s", ct, FormatCapacity(ct.CapacityMin, ct.CapacityMax), lo, hi, rule)
			}
		} else if ct.CapacityMin != 0 || ct.CapacityMax != 0 {
			t.Fatalf("%+v has a capacity without %s", ct, capKey)
		}
		if _, set := job.Meta[classKey]; set != (ct.Class != "") || (set && !className.MatchString(ct.Class)) {
			t.Fatalf("%+v: class %q with %s set %v", ct, ct.Class, classKey, set)
		}
	}
	for k := range job.Meta {
		if strings.HasPrefix(k, KeyClaimPrefix) && strings.Contains(string(data), k) {
			t.Fatalf("the revision data holds %s", k)
		}
	}
}

// FuzzRender fuzzes the names that end up in a child (set, claim, service,
// task, group, env) and the ordinal. Every child of an accepted job must be
// valid, must survive Nomad's canonicalization and a JSON round trip
// without looking drifted, and must look drifted once its identity env is
// changed.
func FuzzRender(f *testing.F) {
	f.Add("web", uint32(0), "data", "web", "app", "value")
	f.Add("db", uint32(7), "wal_1", "", "db", "")
	f.Add("a-b-c", uint32(4294967295), "x", "svc", "", "STATEFULSET_NAME")
	f.Fuzz(func(t *testing.T, set string, ordinal uint32, claim, service, task, env string) {
		job := newJob(map[string]string{KeyVolumeClaims: claim, KeyReplicas: "3", KeyOrdinalsStart: "1000"})
		job.ID = &set
		g := job.TaskGroups[0]
		g.Volumes[claim] = &api.VolumeRequest{Name: claim, Type: "host", Source: claim}
		g.Services[0].Name = service
		g.Tasks[0].Name = task
		g.Tasks[0].Env = map[string]string{env: env}
		spec, err := Parse(job)
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse error is not a ValidationError: %v", err)
			}
			return
		}
		data, err := RevisionData(job)
		if err != nil {
			t.Fatalf("RevisionData: %v", err)
		}
		rev := testRevision(spec.Name, data)
		ord := spec.OrdinalsStart + int(ordinal%uint32(spec.Replicas))
		child, err := RenderChild(spec, rev, ord)
		if err != nil {
			t.Fatalf("RenderChild: %v", err)
		}
		if errs := validateChild(spec, rev, ord, child); len(errs) > 0 {
			t.Fatalf("child breaks rules: %v", errs)
		}
		back, err := copyJob(child)
		if err != nil {
			t.Fatal(err)
		}
		back.Canonicalize()
		if !ChildMatches(spec, rev, ord, back) {
			t.Fatalf("canonicalized child looks drifted")
		}
		back.TaskGroups[0].Tasks[0].Env[EnvOrdinal] = "x"
		if ChildMatches(spec, rev, ord, back) {
			t.Fatalf("edited child env not detected")
		}
		// Re-rendering is deterministic: same inputs, same child.
		again, err := RenderChild(spec, rev, ord)
		if err != nil {
			t.Fatal(err)
		}
		if ja, jb := mustJSON(t, child), mustJSON(t, again); ja != jb {
			t.Fatalf("rendering is not deterministic:\n%s\n%s", ja, jb)
		}
	})
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

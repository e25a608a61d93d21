package jobs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// leaderFields are the Spec fields of the DESIGN §3b keys.
type leaderFields struct {
	LeaderCheck       string
	LeaderUpdate      reconciler.LeaderUpdate
	SwitchoverCommand string
	DisruptionCheck   string
	ExecTask          string
	ExecTimeout       time.Duration
	Approval          string
}

func leaderFieldsOf(s reconciler.Spec) leaderFields {
	return leaderFields{s.LeaderCheck, s.LeaderUpdate, s.SwitchoverCommand, s.DisruptionCheck, s.ExecTask, s.ExecTimeout, s.Approval}
}

// withChecks gives the test job's group service "web" the checks "primary"
// and an unnamed one, and its task service "web-task" the check "alive".
func withChecks(j *api.Job) {
	g := j.TaskGroups[0]
	g.Services[0].Checks = []api.ServiceCheck{{Name: "primary", Type: "http", Path: "/primary"}, {Type: "tcp"}}
	g.Tasks[0].Services[0].Checks = []api.ServiceCheck{{Name: "alive", Type: "tcp"}}
}

// withNomadProvider puts every service of the test job's group on Nomad's
// own service discovery (provider = "nomad"), whose checks Nomad's client
// runs.
func withNomadProvider(j *api.Job) {
	g := j.TaskGroups[0]
	for _, s := range g.Services {
		s.Provider = "nomad"
	}
	for _, t := range g.Tasks {
		for _, s := range t.Services {
			s.Provider = "nomad"
		}
	}
}

// withTask adds a task to the test job's group.
func withTask(name string, lc *api.TaskLifecycle) func(*api.Job) {
	return func(j *api.Job) {
		g := j.TaskGroups[0]
		g.Tasks = append(g.Tasks, &api.Task{Name: name, Driver: "exec", Lifecycle: lc})
	}
}

func both(fs ...func(*api.Job)) func(*api.Job) {
	return func(j *api.Job) {
		for _, f := range fs {
			f(j)
		}
	}
}

// problemWant is one problem a case expects: its key, its value and part
// of its rule.
type problemWant struct{ key, value, rule string }

// TestParseLeaderKeys covers every rule of the DESIGN §3b keys. A valid
// case checks the fields they set; an invalid case checks that exactly the
// problems listed come back, in order, each naming key, value and rule.
func TestParseLeaderKeys(t *testing.T) {
	const cmd = "psql -c 'select pg_promote()'"
	last := reconciler.LeaderLast
	cases := []struct {
		name   string
		meta   map[string]string
		mutate func(*api.Job)
		want   leaderFields  // valid cases
		bad    []problemWant // invalid cases
	}{
		{name: "defaults", want: leaderFields{LeaderUpdate: last}},
		{name: "named check of a group service", meta: map[string]string{KeyLeaderCheck: "primary"}, mutate: withChecks,
			want: leaderFields{LeaderCheck: "primary", LeaderUpdate: last}},
		{name: "named check of a task service", meta: map[string]string{KeyLeaderCheck: " alive "}, mutate: withChecks,
			want: leaderFields{LeaderCheck: "alive", LeaderUpdate: last}},
		{name: "unnamed check by Nomad's name", meta: map[string]string{KeyLeaderCheck: `service: "web" check`}, mutate: withChecks,
			want: leaderFields{LeaderCheck: `service: "web" check`, LeaderUpdate: last}},
		{name: "unnamed check of an unnamed task service", meta: map[string]string{KeyLeaderCheck: `service: "web-web-app" check`},
			mutate: func(j *api.Job) {
				j.TaskGroups[0].Tasks[0].Services[0].Name = ""
				j.TaskGroups[0].Tasks[0].Services[0].Checks = []api.ServiceCheck{{Type: "tcp"}}
			},
			want: leaderFields{LeaderCheck: `service: "web-web-app" check`, LeaderUpdate: last}},
		{name: "unnamed check of an interpolated service name", meta: map[string]string{KeyLeaderCheck: `service: "web-group-db" check`},
			mutate: func(j *api.Job) {
				j.TaskGroups[0].Services[0].Name = "${JOB}-${TASK}-db"
				j.TaskGroups[0].Services[0].Checks = []api.ServiceCheck{{Type: "tcp"}}
			},
			want: leaderFields{LeaderCheck: `service: "web-group-db" check`, LeaderUpdate: last}},
		{name: "named check of a provider = nomad service", meta: map[string]string{KeyLeaderCheck: "primary", KeyLeaderUpdate: "switchover", KeySwitchoverCommand: cmd},
			mutate: both(withChecks, withNomadProvider),
			want:   leaderFields{LeaderCheck: "primary", LeaderUpdate: reconciler.LeaderSwitchover, SwitchoverCommand: cmd, ExecTask: "app"}},
		{name: "unnamed check of a provider = nomad task service", meta: map[string]string{KeyLeaderCheck: `service: "web-task" check`},
			mutate: func(j *api.Job) {
				withNomadProvider(j)
				j.TaskGroups[0].Tasks[0].Services[0].Checks = []api.ServiceCheck{{Type: "http", Path: "/primary"}}
			},
			want: leaderFields{LeaderCheck: `service: "web-task" check`, LeaderUpdate: last}},
		{name: "unknown check of a provider = nomad service lists the checks", meta: map[string]string{KeyLeaderCheck: "primry"},
			mutate: both(withChecks, withNomadProvider),
			bad:    []problemWant{{KeyLeaderCheck, "primry", `is not the name of a service check of the task group (its checks: "primary", "service: \"web\" check", "alive")`}}},
		{name: "unknown check lists the checks", meta: map[string]string{KeyLeaderCheck: "primry"}, mutate: withChecks,
			bad: []problemWant{{KeyLeaderCheck, "primry", `is not the name of a service check of the task group (its checks: "primary", "service: \"web\" check", "alive")`}}},
		{name: "a service name is not a check", meta: map[string]string{KeyLeaderCheck: "web"}, mutate: withChecks,
			bad: []problemWant{{KeyLeaderCheck, "web", "is not the name of a service check"}}},
		{name: "no checks at all", meta: map[string]string{KeyLeaderCheck: "primary"},
			bad: []problemWant{{KeyLeaderCheck, "primary", "is not the name of a service check of the task group, which has none"}}},
		{name: "empty leader check", meta: map[string]string{KeyLeaderCheck: ""}, mutate: withChecks,
			bad: []problemWant{{KeyLeaderCheck, "", "is not the name of a service check"}}},
		{name: "leader check of a broken group is not looked up", meta: map[string]string{KeyLeaderCheck: "nope"},
			mutate: func(j *api.Job) { j.TaskGroups = append(j.TaskGroups, &api.TaskGroup{Name: ptr("b"), Count: ptr(0)}) },
			bad:    []problemWant{{"group", "2 groups", "is not exactly one task group"}}},

		{name: "last explicitly", meta: map[string]string{KeyLeaderUpdate: "last"}, want: leaderFields{LeaderUpdate: last}},
		{name: "supervised", meta: map[string]string{KeyLeaderUpdate: "supervised", KeyLeaderCheck: "primary"}, mutate: withChecks,
			want: leaderFields{LeaderCheck: "primary", LeaderUpdate: reconciler.LeaderSupervised}},
		{name: "switchover", meta: map[string]string{KeyLeaderUpdate: "switchover", KeyLeaderCheck: "primary", KeySwitchoverCommand: " " + cmd + "\n"},
			mutate: withChecks,
			want:   leaderFields{LeaderCheck: "primary", LeaderUpdate: reconciler.LeaderSwitchover, SwitchoverCommand: cmd, ExecTask: "app"}},
		{name: "leader update is case-sensitive", meta: map[string]string{KeyLeaderUpdate: "Switchover"},
			bad: []problemWant{{KeyLeaderUpdate, "Switchover", `is not one of last, switchover, supervised (values are case-sensitive: did you mean "switchover"?)`}}},
		{name: "unknown leader update", meta: map[string]string{KeyLeaderUpdate: "first"},
			bad: []problemWant{{KeyLeaderUpdate, "first", "is not one of last, switchover, supervised"}}},
		{name: "supervised needs a leader check", meta: map[string]string{KeyLeaderUpdate: "supervised"},
			bad: []problemWant{{KeyLeaderUpdate, "supervised", "requires statefulset_leader_check"}}},
		{name: "switchover needs a leader check and a command", meta: map[string]string{KeyLeaderUpdate: "switchover"},
			bad: []problemWant{
				{KeyLeaderUpdate, "switchover", "requires statefulset_leader_check"},
				{KeyLeaderUpdate, "switchover", "requires statefulset_switchover_command"},
			}},
		{name: "a wrong command is reported once", meta: map[string]string{KeyLeaderUpdate: "switchover", KeyLeaderCheck: "primary", KeySwitchoverCommand: "  "},
			mutate: withChecks,
			bad:    []problemWant{{KeySwitchoverCommand, "  ", "is not a command line: it is empty"}}},
		{name: "a wrong leader check is reported once", meta: map[string]string{KeyLeaderUpdate: "supervised", KeyLeaderCheck: "nope"},
			mutate: withChecks,
			bad:    []problemWant{{KeyLeaderCheck, "nope", "is not the name of a service check"}}},

		{name: "disruption check runs in the only task", meta: map[string]string{KeyDisruptionCheck: "pg_isready"},
			want: leaderFields{LeaderUpdate: last, DisruptionCheck: "pg_isready", ExecTask: "app"}},
		{name: "empty disruption check", meta: map[string]string{KeyDisruptionCheck: ""},
			bad: []problemWant{{KeyDisruptionCheck, "", "is not a command line: it is empty"}}},
		{name: "disruption check with NUL", meta: map[string]string{KeyDisruptionCheck: "true\x00"},
			bad: []problemWant{{KeyDisruptionCheck, "true\x00", "contains a NUL character"}}},

		{name: "exec task named", meta: map[string]string{KeyExecTask: "app", KeyDisruptionCheck: "true"}, mutate: withTask("backup", nil),
			want: leaderFields{LeaderUpdate: last, DisruptionCheck: "true", ExecTask: "app"}},
		{name: "exec task is a sidecar", meta: map[string]string{KeyExecTask: "agent", KeyDisruptionCheck: "true"},
			mutate: withTask("agent", &api.TaskLifecycle{Hook: "prestart", Sidecar: true}),
			want:   leaderFields{LeaderUpdate: last, DisruptionCheck: "true", ExecTask: "agent"}},
		{name: "exec task without commands is still checked", meta: map[string]string{KeyExecTask: "ap"},
			bad: []problemWant{{KeyExecTask, "ap", `is not a task of the task group (its tasks: "app") (did you mean "app"?)`}}},
		{name: "exec task is a finished hook", meta: map[string]string{KeyExecTask: "init", KeyDisruptionCheck: "true"},
			mutate: withTask("init", &api.TaskLifecycle{Hook: "prestart"}),
			bad:    []problemWant{{KeyExecTask, "init", "is a prestart task without sidecar = true: it does not keep running"}}},
		{name: "exec task required with two tasks", meta: map[string]string{KeyDisruptionCheck: "true", KeySwitchoverCommand: cmd},
			mutate: withTask("backup", nil),
			bad: []problemWant{{KeyExecTask, "",
				`is required: statefulset_disruption_check and statefulset_switchover_command run in one task, and the group has 2 (its tasks: "app", "backup")`}}},
		{name: "exec task required without tasks", meta: map[string]string{KeyDisruptionCheck: "true"},
			mutate: func(j *api.Job) { j.TaskGroups[0].Tasks = nil },
			bad:    []problemWant{{KeyExecTask, "", "and the group has 0 (its tasks: none)"}}},
		{name: "the only task is a finished hook", meta: map[string]string{KeyDisruptionCheck: "true"},
			mutate: func(j *api.Job) { j.TaskGroups[0].Tasks[0].Lifecycle = &api.TaskLifecycle{Hook: "poststop"} },
			bad:    []problemWant{{KeyExecTask, "", `is required: the group's only task "app" is a poststop task without sidecar = true`}}},
		{name: "no command, two tasks: no exec task needed", meta: map[string]string{KeyLeaderCheck: "primary"},
			mutate: both(withChecks, withTask("backup", nil)),
			want:   leaderFields{LeaderCheck: "primary", LeaderUpdate: last}},

		{name: "exec timeout", meta: map[string]string{KeyExecTimeout: "45s"}, want: leaderFields{LeaderUpdate: last, ExecTimeout: 45 * time.Second}},
		{name: "exec timeout zero", meta: map[string]string{KeyExecTimeout: "0s"},
			bad: []problemWant{{KeyExecTimeout, "0s", "is not a Go duration > 0"}}},
		{name: "exec timeout without unit", meta: map[string]string{KeyExecTimeout: "30"},
			bad: []problemWant{{KeyExecTimeout, "30", "is not a Go duration > 0"}}},

		{name: "approve", meta: map[string]string{KeyApprove: "2026-11-21T12:00:00.5Z"},
			want: leaderFields{LeaderUpdate: last, Approval: "2026-11-21T12:00:00.5Z"}},
		{name: "empty approve", meta: map[string]string{KeyApprove: " "},
			bad: []problemWant{{KeyApprove, " ", "is empty: it holds the token 'nomad-statefulset rollout approve' writes"}}},
		{name: "typo of a new key", meta: map[string]string{"statefulset_leader_chek": "primary"},
			bad: []problemWant{{"statefulset_leader_chek", "primary", `is not a known statefulset annotation (did you mean "statefulset_leader_check"?)`}}},
		{name: "typo without the prefix", meta: map[string]string{"statefulset-approve": "x"},
			bad: []problemWant{{"statefulset-approve", "x", `(did you mean "statefulset_approve"?)`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(tc.meta)
			if tc.mutate != nil {
				tc.mutate(job)
			}
			spec, err := Parse(job)
			if tc.bad == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got := leaderFieldsOf(spec); got != tc.want {
					t.Errorf("parsed to\n %+v\nwant\n %+v", got, tc.want)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse: err = %v, want a *ValidationError", err)
			}
			if len(verr.Problems) != len(tc.bad) {
				t.Fatalf("got %d problems, want %d: %v", len(verr.Problems), len(tc.bad), err)
			}
			for i, w := range tc.bad {
				p := verr.Problems[i]
				if p.Key != w.key || p.Value != w.value || !strings.Contains(p.Rule, w.rule) {
					t.Errorf("problem %d = %+v, want key %q, value %q and a rule containing %q", i, p, w.key, w.value, w.rule)
				}
				if !strings.Contains(err.Error(), p.String()) {
					t.Errorf("Error() %q does not list %q", err.Error(), p.String())
				}
			}
		})
	}
}

// TestNomadServiceName follows nomad's naming of services without a name
// (api Service.Canonicalize) and its interpolation of ${JOB}, ${TASKGROUP},
// ${TASK} and ${BASE} (nomad/structs Service.Canonicalize).
func TestNomadServiceName(t *testing.T) {
	job := &api.Job{ID: ptr("db"), Name: ptr("pg")}
	group := &api.TaskGroup{Name: ptr("main")}
	cases := []struct{ task, name, want string }{
		{"", "", "pg-main"},
		{"srv", "", "pg-main-srv"},
		{"", "pg-primary", "pg-primary"},
		{"srv", "${JOB}-${TASKGROUP}-${TASK}", "pg-main-srv"},
		{"", "${BASE}", "pg-main-group"},
		{"srv", "${NOMAD_JOB_NAME}-x", "${NOMAD_JOB_NAME}-x"},
	}
	for _, tc := range cases {
		if got := nomadServiceName(job, group, tc.task, tc.name); got != tc.want {
			t.Errorf("nomadServiceName(task %q, %q) = %q, want %q", tc.task, tc.name, got, tc.want)
		}
	}
	if got := nomadServiceName(&api.Job{ID: ptr("db")}, group, "", ""); got != "db-main" {
		t.Errorf("a job without a name is named by its ID: got %q", got)
	}
}

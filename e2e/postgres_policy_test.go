package e2e

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestPostgresCredentialsPolicy does with Nomad's ACLs on what the
// PostgreSQL example's comments and docs/tutorial-postgresql.md say to do. A member of the
// set is a job of its own (postgres-0), whose workload identity may read
// nomad/jobs/postgres-0 by default but not the set's nomad/jobs/postgres:
// its template of the passwords does not render, and its task does not
// start. Once examples/postgres/credentials.policy.hcl is bound to that
// job, the template renders what the variable holds, escaped for libpq,
// and the task starts. The member is stood in for by a mock_driver task
// that carries the example's own template (secrets/pgpass.in, taken from
// the example parsed with postgres_uid set, to the uid of nobody here), so
// no PostgreSQL is needed; the file is that user's, readable by it alone.
// The variable exists before the job is registered: Nomad's "Missing" is
// the permission it lacks.
func TestPostgresCredentialsPolicy(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	n := testagent.Nomad(t, testagent.WithACL(), testagent.WithDrivers("mock_driver"))
	nc := n.Client
	src, err := os.ReadFile(filepath.Join(root, pgExample))
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	example, err := nc.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Canonicalize: true,
		Variables: "postgres_uid = " + nobody.Uid})
	if err != nil {
		t.Fatalf("parsing %s: %v", pgExample, err)
	}
	var tmpl *nomadapi.Template
	for _, tm := range example.TaskGroups[0].Tasks[0].Templates {
		if tm.DestPath != nil && *tm.DestPath == "secrets/pgpass.in" {
			tmpl = tm
		}
	}
	if tmpl == nil {
		t.Fatalf("%s has no template secrets/pgpass.in", pgExample)
	}
	putPostgresCredentials(t, nc)

	job := nomadapi.NewServiceJob(pgSet+"-0", pgSet+"-0", "global", 50)
	job.Datacenters = []string{"*"}
	task := nomadapi.NewTask("postgres", "mock_driver").SetConfig("run_for", "10m")
	task.Templates = []*nomadapi.Template{tmpl}
	group := nomadapi.NewTaskGroup("db", 1).AddTask(task)
	job.AddTaskGroup(group)
	if _, _, err := nc.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}

	// Without the policy: the task stays pending, and Nomad says why.
	var allocID, denied string
	Eventually(t, 2*time.Minute, "Nomad to report that "+pgSet+"-0's template cannot read "+pgCredentials, func() error {
		allocs, _, err := nc.Jobs().Allocations(pgSet+"-0", false, nil)
		if err != nil || len(allocs) == 0 {
			return fmt.Errorf("no allocation yet (%v)", err)
		}
		a, _, err := nc.Allocations().Info(allocs[0].ID, nil)
		if err != nil {
			return err
		}
		allocID = a.ID
		ts := a.TaskStates["postgres"]
		if ts == nil {
			return fmt.Errorf("no task state yet")
		}
		if ts.State != "pending" || !ts.StartedAt.IsZero() {
			return fmt.Errorf("%w: the task is %s (started %v) without the policy", ErrGiveUp, ts.State, ts.StartedAt)
		}
		var msgs []string
		for _, e := range ts.Events {
			msgs = append(msgs, e.DisplayMessage)
			if strings.Contains(e.DisplayMessage, pgCredentials) || strings.Contains(strings.ToLower(e.DisplayMessage), "permission denied") {
				denied = e.DisplayMessage
			}
		}
		if denied == "" {
			return fmt.Errorf("task %s, events %q", ts.State, msgs)
		}
		return nil
	})
	t.Logf("without the policy, %s-0 stays pending: %s", pgSet, denied)

	rules, err := os.ReadFile(filepath.Join(root, "examples", "postgres", "credentials.policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: pgSet + "-0-credentials", Rules: string(rules),
		JobACL: &nomadapi.JobACL{Namespace: "default", JobID: pgSet + "-0"}}, nil); err != nil {
		t.Fatalf("binding credentials.policy.hcl to %s-0: %v", pgSet, err)
	}
	bound := time.Now()
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	want := "*:*:*:postgres:" + esc.Replace(pgSuperuserPassword) + "\n*:*:*:replicator:" + esc.Replace(pgReplicationPassword)
	Eventually(t, 4*time.Minute, pgSet+"-0's task to start with the passwords rendered", func() error {
		a, _, err := nc.Allocations().Info(allocID, nil)
		if err != nil {
			return err
		}
		if ts := a.TaskStates["postgres"]; ts == nil || ts.State != "running" {
			return fmt.Errorf("task %+v", ts)
		}
		path := filepath.Join(n.DataDir, "alloc", allocID, "postgres", "secrets", "pgpass.in")
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got != want {
			return fmt.Errorf("%w: secrets/pgpass.in is %q, want %q", ErrGiveUp, got, want)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if uid := fmt.Sprint(fi.Sys().(*syscall.Stat_t).Uid); uid != nobody.Uid || fi.Mode().Perm() != 0o600 {
			return fmt.Errorf("%w: secrets/pgpass.in is uid %s, %v; want uid %s (postgres_uid), 0600", ErrGiveUp, uid, fi.Mode().Perm(), nobody.Uid)
		}
		return nil
	})
	t.Logf("with credentials.policy.hcl bound to %s-0, its template rendered the passwords %v later, as uid %s (postgres_uid), 0600",
		pgSet, time.Since(bound).Round(100*time.Millisecond), nobody.Uid)
}

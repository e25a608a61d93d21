package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/lib/pq"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// The PostgreSQL example (examples/postgres) on one Nomad server and three
// clients, each with its own Consul agent, against real PostgreSQL 15 from
// Debian's postgresql-15 package. The job runs as the file says, its
// variables at their defaults: nothing in it is substituted (its ports are
// dynamic, and the members find each other through Consul). Its passwords
// come from the Nomad Variable pgCredentials, which the test writes
// through Nomad's API, as a user would with nomad var put.

const (
	pgBinDir  = "/usr/lib/postgresql/15/bin"
	pgSet     = "postgres"
	pgExample = "examples/postgres/postgres.nomad.hcl"
	// pgCredentials is the Nomad Variable the example reads its passwords
	// from (its variable "credentials" at the default).
	pgCredentials = "nomad/jobs/postgres"
	pgInstall     = "`make test-e2e` installs it (apt-get install -y postgresql-15), or run that apt-get yourself"
	// pgWaitLong bounds a rollout, a member's return or the cluster's
	// forming: a rollout of three members at the example's defaults takes
	// about a minute and a half, several times that on a loaded machine.
	pgWaitLong = 8 * time.Minute
)

// pgSuperuserPassword and pgReplicationPassword are the passwords the test
// writes to pgCredentials: new for every run, each with the characters a
// libpq password file escapes (':' and '\'), a quote (which SQL doubles)
// and a space, so that the example's templates must get them right.
var pgSuperuserPassword, pgReplicationPassword = pgNewPassword("su"), pgNewPassword("repl")

func pgNewPassword(prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + `:it's \ ` + hex.EncodeToString(b)
}

// pgQuote quotes a value for a libpq (and lib/pq) connection string.
func pgQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// requirePostgres fails the test, saying how to get it, when PostgreSQL 15
// or its user is missing.
func requirePostgres(t *testing.T) (uid, gid string) {
	t.Helper()
	for _, b := range []string{"postgres", "initdb", "pg_ctl", "psql", "pg_basebackup", "pg_rewind", "pg_isready", "pg_controldata"} {
		if _, err := os.Stat(filepath.Join(pgBinDir, b)); err != nil {
			t.Fatalf("PostgreSQL 15 is not installed (%v): %s", err, pgInstall)
		}
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("no postgres user (%v): %s", err, pgInstall)
	}
	return u.Uid, u.Gid
}

// postgresChroot is what the example's task needs in the exec driver's
// chroot beyond the harness's minimal one (Nomad's default chroot holds all
// of /usr and /lib, so a real client needs none of this): PostgreSQL's
// programs, libraries and share files, the time zone data, the few
// utilities the scripts call, and every shared library they link against,
// found with ldd.
func postgresChroot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{
		"/usr/lib/postgresql/15":   "/usr/lib/postgresql/15",
		"/usr/share/postgresql/15": "/usr/share/postgresql/15",
		"/usr/share/zoneinfo":      "/usr/share/zoneinfo",
	}
	var elfs []string
	for _, u := range []string{"sed", "rm", "mkdir", "chmod", "mv", "sleep"} {
		p, err := filepath.EvalSymlinks(filepath.Join("/usr/bin", u))
		if err != nil {
			t.Fatalf("finding %s: %v", u, err)
		}
		out[p] = "/bin/" + u
		elfs = append(elfs, p)
	}
	bins, _ := filepath.Glob(filepath.Join(pgBinDir, "*"))
	libs, _ := filepath.Glob("/usr/lib/postgresql/15/lib/*.so")
	elfs = append(append(elfs, bins...), libs...)
	seen := map[string]bool{}
	for _, f := range elfs {
		b, err := exec.Command("ldd", f).Output()
		if err != nil {
			continue // not dynamic (a script), or not ELF
		}
		for _, line := range strings.Split(string(b), "\n") {
			// "libpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x...)"
			fs := strings.Fields(line)
			if len(fs) < 3 || fs[1] != "=>" || !strings.HasPrefix(fs[2], "/") || seen[fs[2]] {
				continue
			}
			seen[fs[2]] = true
			real, err := filepath.EvalSymlinks(fs[2])
			if err != nil {
				t.Fatalf("resolving %s: %v", fs[2], err)
			}
			out[real] = filepath.Join("/lib/x86_64-linux-gnu", filepath.Base(fs[2]))
		}
	}
	return out
}

// pgCluster is the shared rig of the Postgres scenarios.
type pgCluster struct {
	m      *MultiCluster
	d      *Daemon
	consul *consulapi.Client
	w      *pgWriter
	ev     *eventLog
	// sysid is the system identifier the cluster was formed with: every
	// member's, for the whole test.
	sysid int64
}

// startPostgres starts the cluster and the daemon (its provisioner creates
// volumes owned by postgres) and runs the example until it converges with
// a primary.
func startPostgres(t *testing.T) *pgCluster {
	uid, gid := requirePostgres(t)
	m := NewMultiClusterConsulPerNode(t, 3, testagent.WithChrootEnv(postgresChroot(t)))
	unstickExecutors(t, m)
	d := StartDaemon(t, m.Server, m.Consul, fmt.Sprintf(`volume_provisioner {
  config = { plugin_id = "mkdir", "parameters.uid" = %q, "parameters.gid" = %q, "parameters.mode" = "0700" }
}`, uid, gid))
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pc := &pgCluster{m: m, d: d, consul: m.Consul.Client}
	pc.ev = recordEvents(t, d, pgSet)
	t.Cleanup(func() { pc.explainFailure(t) })
	checkPostgresJob(t, m.Server.Client, filepath.Join(root, pgExample))
	start := time.Now()
	RegisterFile(t, m.Server.Client, filepath.Join(root, pgExample))
	// The passwords are not there yet: the first member waits for them,
	// and says so.
	pc.waitMissingCredentials(t)
	putPostgresCredentials(t, m.Server.Client)
	pc.waitRollout(t, "", pgWaitLong)
	f := pc.waitFormed(t)
	if f.primary != 0 {
		t.Fatalf("%s-%d is the primary of a new cluster, want %s-0 (it bootstraps)", pgSet, f.primary, pgSet)
	}
	pc.sysid = f.sysid
	t.Logf("the example converged and formed one cluster (system identifier %d) in %v", pc.sysid, time.Since(start).Round(time.Second))
	pc.checkAuthentication(t)
	pc.waitLeader(t, 0)
	return pc
}

// checkPostgresJob checks what the example's file promises before it runs:
// the PostgreSQL version is a variable (15 by default) that picks the
// programs' directory, and kill_timeout is within Nomad's default
// max_kill_timeout (30s), beyond which a client would cut it.
func checkPostgresJob(t *testing.T, nc *nomadapi.Client, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ vars, want string }{{"", "/usr/lib/postgresql/15/bin"}, {`postgres_version = "16"`, "/usr/lib/postgresql/16/bin"}} {
		job, err := nc.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Canonicalize: true, Variables: tc.vars})
		if err != nil {
			t.Fatalf("parsing %s with variables %q: %v", path, tc.vars, err)
		}
		task := job.TaskGroups[0].Tasks[0]
		lib := ""
		for _, tm := range task.Templates {
			if tm.DestPath != nil && *tm.DestPath == "local/lib.sh" && tm.EmbeddedTmpl != nil {
				lib = *tm.EmbeddedTmpl
			}
		}
		if !strings.Contains(lib, "export PATH="+tc.want+":") {
			t.Errorf("with variables %q, lib.sh does not put %s first on PATH:\n%s", tc.vars, tc.want, lib)
		}
		if task.KillTimeout == nil || *task.KillTimeout > 30*time.Second {
			t.Errorf("kill_timeout %v, beyond Nomad's default max_kill_timeout of 30s", task.KillTimeout)
		}
	}
	if _, err := nc.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Variables: `postgres_version = "15.4"`}); err == nil {
		t.Errorf("postgres_version = \"15.4\" was accepted; it is a major version")
	}
}

// waitMissingCredentials waits until the first member's allocation, run
// before the Nomad Variable with the passwords exists, reports that its
// template waits for it (Nomad's task event "Missing: nomad.var.block(…)"),
// and checks that its task has not started meanwhile.
func (pc *pgCluster) waitMissingCredentials(t *testing.T) {
	t.Helper()
	pod := pgSet + "-0"
	want := fmt.Sprintf("Missing: nomad.var.block(%s@default.global)", pgCredentials)
	start := time.Now()
	var seen string
	Eventually(t, 4*time.Minute, pod+" to wait for the Nomad Variable "+pgCredentials, func() error {
		allocs, _, err := pc.m.Server.Client.Jobs().Allocations(pod, true, nil)
		if err != nil || len(allocs) == 0 {
			return fmt.Errorf("no allocation of %s yet (%v)", pod, err)
		}
		a, _, err := pc.m.Server.Client.Allocations().Info(allocs[0].ID, nil)
		if err != nil {
			return err
		}
		ts := a.TaskStates["postgres"]
		if ts == nil {
			return fmt.Errorf("allocation %s has no task state yet", a.ID[:8])
		}
		var msgs []string
		for _, e := range ts.Events {
			msgs = append(msgs, e.DisplayMessage)
			if strings.Contains(e.DisplayMessage, want) {
				seen = e.DisplayMessage
			}
		}
		if seen == "" {
			return fmt.Errorf("task %s, events %q", ts.State, msgs)
		}
		if ts.State != "pending" || !ts.StartedAt.IsZero() {
			return fmt.Errorf("%w: the task is %s (started %v) without the passwords", ErrGiveUp, ts.State, ts.StartedAt)
		}
		return nil
	})
	t.Logf("without the variable, %s waits %v in: %s", pod, time.Since(start).Round(time.Second), seen)
}

// putPostgresCredentials writes the Nomad Variable the example reads its
// passwords from, as nomad var put would.
func putPostgresCredentials(t *testing.T, nc *nomadapi.Client) {
	t.Helper()
	// A fresh Nomad answers "keyring has not been initialized yet" for a
	// moment after its leader is elected.
	Eventually(t, 30*time.Second, "the passwords to be stored in the Nomad Variable "+pgCredentials, func() error {
		_, _, err := nc.Variables().Create(&nomadapi.Variable{Path: pgCredentials, Items: nomadapi.VariableItems{
			"postgres_password": pgSuperuserPassword, "replication_password": pgReplicationPassword}}, nil)
		if err != nil && !strings.Contains(err.Error(), "keyring has not been initialized") {
			return fmt.Errorf("%w: %w", ErrGiveUp, err)
		}
		return err
	})
}

// checkAuthentication checks, on every member, that nothing is trusted:
// the pg_hba rules in force name no trust and parse, a connection over the
// network with a wrong password is refused, and the replication role's
// password (a role of the example's, from the variable) lets it in.
func (pc *pgCluster) checkAuthentication(t *testing.T) {
	t.Helper()
	ms, err := pc.survey()
	if err != nil {
		t.Fatal(err)
	}
	for o := 0; o < 3; o++ {
		pod := fmt.Sprintf("%s-%d", pgSet, o)
		m, ok := ms[pod]
		if !ok {
			t.Fatalf("%s does not answer", pod)
		}
		db, err := pgOpen(m.addr)
		if err != nil {
			t.Fatal(err)
		}
		var rules, trust, bad int
		var methods string
		err = db.QueryRow(`select count(*), count(*) filter (where auth_method = 'trust'), count(*) filter (where error is not null),
			string_agg(distinct auth_method, ',' order by auth_method) from pg_hba_file_rules`).Scan(&rules, &trust, &bad, &methods)
		db.Close()
		if err != nil {
			t.Fatalf("%s: pg_hba_file_rules: %v", pod, err)
		}
		if rules == 0 || trust != 0 || bad != 0 {
			t.Errorf("%s: pg_hba has %d rules, %d of them trust, %d that do not parse (methods %s)", pod, rules, trust, bad, methods)
		}
		wrong, err := pgOpenAs(m.addr, "postgres", "not-"+pgSuperuserPassword)
		if err != nil {
			t.Fatal(err)
		}
		refused := wrong.Ping()
		wrong.Close()
		if refused == nil || !strings.Contains(refused.Error(), "password authentication failed") {
			t.Errorf("%s: a wrong password for postgres over the network: %v, want the password refused", pod, refused)
		}
		repl, err := pgOpenAs(m.addr, "replicator", pgReplicationPassword)
		if err != nil {
			t.Fatal(err)
		}
		var isRepl bool
		err = repl.QueryRow("select rolreplication from pg_roles where rolname = current_user").Scan(&isRepl)
		repl.Close()
		if err != nil || !isRepl {
			t.Errorf("%s: replicator with its password from the variable: %v (replication %v)", pod, err, isRepl)
		}
		t.Logf("%s: pg_hba has %d rules, methods %s; a wrong password: %v", pod, rules, methods, refused)
	}
}

// waitRollout waits until every pod is Ready at the update revision, which
// must differ from old when old is set, and returns the revision.
func (pc *pgCluster) waitRollout(t *testing.T, old string, timeout time.Duration) string {
	t.Helper()
	return waitAllUpdated(t, pc.d, pgSet, 3, old, timeout)
}

// waitAllUpdated waits until the set's replicas pods are all Ready at its
// update revision, which must differ from old when old is set, and
// returns that revision: the end of a rollout as the daemon reports it.
func waitAllUpdated(t *testing.T, d *Daemon, set string, replicas int, old string, timeout time.Duration) string {
	t.Helper()
	var rev string
	Eventually(t, timeout, "the "+set+" set to converge at its update revision", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		s := st.Status
		rev = s.UpdateRevision
		if rev == "" || rev == old {
			return fmt.Errorf("update revision %q (old %q)", rev, old)
		}
		if s.ReadyReplicas != replicas || s.UpdatedReplicas != replicas || s.CurrentRevision != rev {
			return fmt.Errorf("ready %d, updated %d, current %s, update %s; pods %s", s.ReadyReplicas, s.UpdatedReplicas, s.CurrentRevision, rev, podLine(st))
		}
		for _, p := range st.Pods {
			if p.Revision != rev || (p.State != "Running" && p.State != "Available") {
				return fmt.Errorf("pods %s", podLine(st))
			}
		}
		return nil
	})
	return rev
}

func podLine(st client.SetDetail) string {
	var b strings.Builder
	for _, p := range st.Pods {
		fmt.Fprintf(&b, "[%s %s %s", p.Name, p.Revision, p.State)
		if p.Leader {
			b.WriteString(" leader")
		}
		if p.NotReady != "" {
			b.WriteString(" not ready: " + p.NotReady)
		}
		b.WriteString("] ")
	}
	return b.String()
}

// leader is the ordinal the daemon marks as the leader, or -1.
func (pc *pgCluster) leader() (int, error) {
	st, err := setStatus(pc.d, pgSet)
	if err != nil {
		return -1, err
	}
	for _, p := range st.Pods {
		if p.Leader {
			return p.Ordinal, nil
		}
	}
	return -1, nil
}

// waitLeader waits until the daemon marks ordinal ord as the leader.
func (pc *pgCluster) waitLeader(t *testing.T, ord int) {
	t.Helper()
	Eventually(t, 3*time.Minute, fmt.Sprintf("the daemon to mark %s-%d as the leader", pgSet, ord), func() error {
		got, err := pc.leader()
		if err != nil || got != ord {
			st, _ := setStatus(pc.d, pgSet)
			return fmt.Errorf("leader %d (%v); pods %s", got, err, podLine(st))
		}
		return nil
	})
}

// members lists the addresses of the pg service's instances Consul knows,
// healthy or not, by pod name. A pod may be listed at more than one
// address for a while: a member placed again keeps its old registration
// until its node's Nomad client removes it (a killed machine's, only once
// it is back).
func (pc *pgCluster) members() (map[string][]string, error) {
	entries, _, err := pc.consul.Health().Service("pg", "", false, nil)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, e := range entries {
		for _, tag := range e.Service.Tags {
			if strings.HasPrefix(tag, pgSet+"-") {
				out[tag] = append(out[tag], fmt.Sprintf("%s:%d", e.Service.Address, e.Service.Port))
			}
		}
	}
	return out, nil
}

// pgOpen connects to the member at hostport as the superuser, with the
// password the test put in the Nomad Variable.
func pgOpen(hostport string) (*sql.DB, error) {
	return pgOpenAs(hostport, "postgres", pgSuperuserPassword)
}

func pgOpenAs(hostport, user, password string) (*sql.DB, error) {
	host, port, _ := strings.Cut(hostport, ":")
	db, err := sql.Open("postgres", fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=postgres sslmode=disable connect_timeout=2",
		host, port, user, pgQuote(password)))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}

// pgMember is what one member says of itself, asked at its address.
type pgMember struct {
	addr       string
	inRecovery bool
	sysid      int64
	// slots are the replication slots it keeps: slot name -> active.
	slots map[string]bool
}

// pgAsk asks the server at hostport who it is (its cluster_name, which
// the example sets to the pod's name), whether it is in recovery, its
// system identifier and its replication slots.
func pgAsk(hostport string) (string, pgMember, error) {
	db, err := pgOpen(hostport)
	if err != nil {
		return "", pgMember{}, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m := pgMember{addr: hostport, slots: map[string]bool{}}
	var name, slots string
	err = db.QueryRowContext(ctx, `select current_setting('cluster_name'), pg_is_in_recovery(), (select system_identifier from pg_control_system()),
		(select coalesce(string_agg(slot_name || '=' || active, ' '), '') from pg_replication_slots)`).
		Scan(&name, &m.inRecovery, &m.sysid, &slots)
	for _, s := range strings.Fields(slots) {
		n, active, _ := strings.Cut(s, "=")
		m.slots[n] = active == "true"
	}
	return name, m, err
}

// pgSlot is the replication slot the example gives a member: its pod name
// as a slot name.
func pgSlot(ordinal int) string { return fmt.Sprintf("%s_%d", pgSet, ordinal) }

// survey asks every address Consul lists and returns the members that
// answered as the pod they are listed for.
func (pc *pgCluster) survey() (map[string]pgMember, error) {
	ms, err := pc.members()
	if err != nil {
		return nil, err
	}
	out := map[string]pgMember{}
	for pod, addrs := range ms {
		for _, hp := range addrs {
			if name, m, err := pgAsk(hp); err == nil && name == pod {
				out[pod] = m
				break
			}
		}
	}
	return out, nil
}

// primaries returns the members that say they are not in recovery, and
// every member that answered.
func (pc *pgCluster) primaries() ([]string, map[string]pgMember, error) {
	ms, err := pc.survey()
	if err != nil {
		return nil, nil, err
	}
	var out []string
	for pod, m := range ms {
		if !m.inRecovery {
			out = append(out, pod)
		}
	}
	sort.Strings(out)
	return out, ms, nil
}

// pgFormation is one cluster as PostgreSQL reports it.
type pgFormation struct {
	primary int
	// sysid is the primary's system identifier, sysids each ordinal's.
	sysid  int64
	sysids map[int]int64
	// streaming is pg_stat_replication on the primary: application_name
	// (the standby's pod name) -> state.
	streaming map[string]string
}

// formed checks that the three members form one cluster, as PostgreSQL
// itself says: each answers under its own name, exactly one is not in
// recovery, and that primary's pg_stat_replication lists both others as
// streaming. It returns the system identifiers without judging them.
func (pc *pgCluster) formed() (pgFormation, error) {
	f := pgFormation{primary: -1, sysids: map[int]int64{}, streaming: map[string]string{}}
	ms, err := pc.survey()
	if err != nil {
		return f, err
	}
	for o := 0; o < 3; o++ {
		pod := fmt.Sprintf("%s-%d", pgSet, o)
		m, ok := ms[pod]
		if !ok {
			return f, fmt.Errorf("%s does not answer (members %v)", pod, ms)
		}
		f.sysids[o] = m.sysid
		if m.inRecovery {
			continue
		}
		if f.primary >= 0 {
			return f, fmt.Errorf("%s-%d and %s both say they are the primary", pgSet, f.primary, pod)
		}
		f.primary, f.sysid = o, m.sysid
	}
	if f.primary < 0 {
		return f, fmt.Errorf("no member is the primary: %v", ms)
	}
	db, err := pgOpen(ms[fmt.Sprintf("%s-%d", pgSet, f.primary)].addr)
	if err != nil {
		return f, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "select application_name, state from pg_stat_replication")
	if err != nil {
		return f, fmt.Errorf("pg_stat_replication on %s-%d: %w", pgSet, f.primary, err)
	}
	defer rows.Close()
	for rows.Next() {
		var app, state string
		if err := rows.Scan(&app, &state); err != nil {
			return f, err
		}
		f.streaming[app] = state
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	for o := 0; o < 3; o++ {
		if pod := fmt.Sprintf("%s-%d", pgSet, o); o != f.primary && f.streaming[pod] != "streaming" {
			return f, fmt.Errorf("pg_stat_replication on the primary %s-%d: %v, want %s streaming", pgSet, f.primary, f.streaming, pod)
		}
	}
	// Replication slots: the primary keeps one for each standby, in use,
	// and no other (none left behind by a switchover); a standby keeps
	// none (those it had as a primary are dropped).
	want := map[string]bool{}
	for o := 0; o < 3; o++ {
		if o != f.primary {
			want[pgSlot(o)] = true
		}
	}
	for o := 0; o < 3; o++ {
		pod := fmt.Sprintf("%s-%d", pgSet, o)
		if got := ms[pod].slots; o == f.primary && fmt.Sprint(got) != fmt.Sprint(want) {
			return f, fmt.Errorf("the primary %s keeps the replication slots (name:active) %v, want %v", pod, got, want)
		} else if o != f.primary && len(got) > 0 {
			return f, fmt.Errorf("the standby %s keeps the replication slots %v, want none", pod, got)
		}
	}
	return f, nil
}

// waitFormed waits until the members form one cluster (formed), and
// checks that every member has the system identifier the cluster was
// formed with.
func (pc *pgCluster) waitFormed(t *testing.T) pgFormation {
	t.Helper()
	var f pgFormation
	Eventually(t, pgWaitLong, "the three members to form one cluster (pg_stat_replication on the primary lists both standbys streaming)", func() error {
		var err error
		f, err = pc.formed()
		return err
	})
	for o, id := range f.sysids {
		if pc.sysid != 0 && id != pc.sysid {
			t.Errorf("%s-%d has the system identifier %d, the cluster %d: not the same database", pgSet, o, id, pc.sysid)
		}
		if id != f.sysid {
			t.Errorf("%s-%d has the system identifier %d, the primary %d", pgSet, o, id, f.sysid)
		}
	}
	t.Logf("one cluster: primary %s-%d, pg_stat_replication %v, system identifier %d on every member", pgSet, f.primary, f.streaming, f.sysid)
	return f
}

// primaryDB waits for the one primary and opens it.
func (pc *pgCluster) primaryDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	var pod, hp string
	Eventually(t, 3*time.Minute, "one primary", func() error {
		ps, ms, err := pc.primaries()
		if err != nil {
			return err
		}
		if len(ps) != 1 {
			return fmt.Errorf("primaries %v among %v", ps, ms)
		}
		pod, hp = ps[0], ms[ps[0]].addr
		return nil
	})
	db, err := pgOpen(hp)
	if err != nil {
		t.Fatal(err)
	}
	return db, pod
}

// timeline is the primary's current WAL timeline. It asks again until
// the one primary answers: on a loaded machine a connection can time out.
func (pc *pgCluster) timeline(t *testing.T) int {
	t.Helper()
	var tl int
	Eventually(t, 3*time.Minute, "the primary's timeline", func() error {
		ps, ms, err := pc.primaries()
		if err != nil {
			return err
		}
		if len(ps) != 1 {
			return fmt.Errorf("primaries %v among %v", ps, ms)
		}
		db, err := pgOpen(ms[ps[0]].addr)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return db.QueryRowContext(ctx, "select ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int").Scan(&tl)
	})
	return tl
}

// pgStore is what identifies a member's data: its volume, the node the
// volume is on, and the inode of the data directory on it. The example
// makes a new data directory only when it clones a member (rm -rf, then
// pg_basebackup) or initdb's ordinal 0, so an unchanged inode means the
// member came back on the data it had.
type pgStore struct {
	volumeID, node, path string
	inode                uint64
}

func (pc *pgCluster) stores(t *testing.T) map[int]pgStore {
	t.Helper()
	out := map[int]pgStore{}
	for o := 0; o < 3; o++ {
		name := fmt.Sprintf("data-%s-%d", pgSet, o)
		vols := HostVolumes(t, pc.m.Server.Client, "default", name)
		if len(vols) != 1 {
			t.Fatalf("%d volumes %s", len(vols), name)
		}
		v, _, err := pc.m.Server.Client.HostVolumes().Get(vols[0].ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(v.HostPath, "pgdata")
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatalf("%s: the data directory of %s-%d: %v", name, pgSet, o, err)
		}
		out[o] = pgStore{volumeID: v.ID, node: v.NodeID, path: dir, inode: fi.Sys().(*syscall.Stat_t).Ino}
	}
	return out
}

// pgWriter writes rows one at a time, for the whole test, to whichever
// member is the primary (it asks every member Consul knows when it has
// none), and records every insert the primary acknowledged.
type pgWriter struct {
	pc *pgCluster

	mu        sync.Mutex
	acked     []int64
	ackAt     []time.Time
	attempts  int64
	failures  int
	switches  []string // "time pod" each time it found a primary
	twoAtOnce []string // moments two members said they were primary

	stop chan struct{}
	done chan struct{}
}

func (pc *pgCluster) startWriter(t *testing.T) {
	t.Helper()
	db, _ := pc.primaryDB(t)
	if _, err := db.Exec("create table if not exists nss_e2e_writes (id bigint primary key, at timestamptz not null default now())"); err != nil {
		t.Fatalf("creating the table: %v", err)
	}
	db.Close()
	pc.w = &pgWriter{pc: pc, stop: make(chan struct{}), done: make(chan struct{})}
	go pc.w.run()
	t.Cleanup(pc.w.halt)
}

func (w *pgWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *pgWriter) run() {
	defer close(w.done)
	var db *sql.DB
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	var id int64
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		if db == nil {
			// Each look asks Consul and connects to every member: 5 a
			// second keeps a long outage from loading the machine.
			ps, ms, err := w.pc.primaries()
			if err != nil || len(ps) == 0 {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if len(ps) > 1 {
				w.mu.Lock()
				w.twoAtOnce = append(w.twoAtOnce, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), ps))
				w.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if db, err = pgOpen(ms[ps[0]].addr); err != nil {
				db = nil
				continue
			}
			w.mu.Lock()
			w.switches = append(w.switches, time.Now().Format("15:04:05.000")+" "+ps[0])
			w.mu.Unlock()
		}
		id++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := db.ExecContext(ctx, "insert into nss_e2e_writes (id) values ($1)", id)
		cancel()
		now := time.Now()
		w.mu.Lock()
		w.attempts = id
		if err == nil {
			w.acked = append(w.acked, id)
			w.ackAt = append(w.ackAt, now)
		} else {
			w.failures++
		}
		w.mu.Unlock()
		if err != nil {
			db.Close()
			db = nil
			time.Sleep(20 * time.Millisecond)
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maxGap is the longest time between two acknowledged writes in [from, to]
// (counting from from to the first and from the last to to).
func (w *pgWriter) maxGap(from, to time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, gap, n := from, time.Duration(0), 0
	for _, at := range w.ackAt {
		if at.Before(from) || at.After(to) {
			continue
		}
		n++
		if d := at.Sub(prev); d > gap {
			gap = d
		}
		prev = at
	}
	if d := to.Sub(prev); d > gap {
		gap = d
	}
	return gap, n
}

// outage is the longest time without an acknowledged write in [from, to],
// with the acknowledged writes (or from, to) that bound it. A kill shows
// as the gap it opens: the killed primary may still acknowledge a write
// or two while its machine's processes are being killed.
func (w *pgWriter) outage(from, to time.Time) (time.Duration, time.Time, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, gap, begin, end := from, time.Duration(0), from, to
	for _, at := range w.ackAt {
		if at.Before(from) || at.After(to) {
			continue
		}
		if d := at.Sub(prev); d > gap {
			gap, begin, end = d, prev, at
		}
		prev = at
	}
	if d := to.Sub(prev); d > gap {
		gap, begin, end = d, prev, to
	}
	return gap, begin, end
}

// waitAcks waits until the writer has had n more acknowledged writes.
func (w *pgWriter) waitAcks(t *testing.T, n int, what string) {
	t.Helper()
	w.mu.Lock()
	want := len(w.acked) + n
	w.mu.Unlock()
	Eventually(t, pgWaitLong, fmt.Sprintf("%d acknowledged writes (%s)", n, what), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < want {
			return fmt.Errorf("%d of %d (%d failed)", len(w.acked), want, w.failures)
		}
		return nil
	})
}

// verify stops the writer and reads every acknowledged row back from the
// primary.
func (w *pgWriter) verify(t *testing.T) {
	t.Helper()
	w.halt()
	db, pod := w.pc.primaryDB(t)
	defer db.Close()
	rows, err := db.Query("select id from nss_e2e_writes")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var lost []int64
	for _, id := range w.acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes are missing on the primary %s: %v", len(lost), pod, head(lost, 20))
	}
	if len(w.twoAtOnce) > 0 {
		t.Errorf("two members answered as primary at once: %v", w.twoAtOnce)
	}
	t.Logf("writer: %d inserts tried, %d acknowledged, all %d read back from the primary %s (%d rows there; %d failed, unacknowledged); primaries it wrote to: %v",
		w.attempts, len(w.acked), len(w.acked)-len(lost), pod, len(have), w.failures, w.switches)

	// Every standby has replayed them all too (once it caught up).
	acked := append([]int64(nil), w.acked...)
	Eventually(t, 3*time.Minute, "every member to hold every acknowledged write", func() error {
		ms, err := w.pc.survey()
		if err != nil {
			return err
		}
		for o := 0; o < 3; o++ {
			pod := fmt.Sprintf("%s-%d", pgSet, o)
			m, ok := ms[pod]
			if !ok {
				return fmt.Errorf("%s does not answer", pod)
			}
			n, err := countIDs(m.addr, acked)
			if err != nil {
				return fmt.Errorf("%s: %w", pod, err)
			}
			if n != len(acked) {
				return fmt.Errorf("%s holds %d of the %d acknowledged writes", pod, n, len(acked))
			}
		}
		return nil
	})
}

// countIDs counts how many of ids the member at hostport holds.
func countIDs(hostport string, ids []int64) (int, error) {
	db, err := pgOpen(hostport)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	err = db.QueryRowContext(ctx, "select count(*) from nss_e2e_writes where id = any($1)", pq.Array(ids)).Scan(&n)
	return n, err
}

func head(ids []int64, n int) []int64 {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}

// since returns the events seen from t on, oldest first.
func (l *eventLog) since(from time.Time) []client.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []client.Event
	for _, ev := range l.all {
		if !ev.Time.Before(from) {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// steps is the order of the deletions and switchovers among events: "2",
// "0", "switchover", "1".
func steps(evs []client.Event) []string {
	var out []string
	for _, e := range evs {
		switch e.Type {
		case "Switchover":
			// The action ("handing leadership to …") and, once the
			// leader check passes elsewhere, "… leads, after a
			// switchover from … in …": the second is the switch.
			if strings.Contains(e.Message, "leads, after a switchover") {
				out = append(out, "switchover")
			}
		case "DeletePod":
			if o, ok := deletedOrdinal(e, pgSet); ok {
				out = append(out, o)
			}
		}
	}
	return out
}

// deletedOrdinals is the order in which the daemon took set's pods down
// among evs: the ordinals of its DeletePod events.
func deletedOrdinals(evs []client.Event, set string) []string {
	var out []string
	for _, e := range evs {
		if o, ok := deletedOrdinal(e, set); ok {
			out = append(out, o)
		}
	}
	return out
}

// deletedOrdinal is the ordinal a DeletePod event ("deleting web-2: …")
// took down.
func deletedOrdinal(e client.Event, set string) (string, bool) {
	if e.Type != "DeletePod" {
		return "", false
	}
	f := strings.Fields(e.Message)
	if len(f) < 2 {
		return "", false
	}
	return strings.TrimPrefix(strings.TrimSuffix(f[1], ":"), set+"-"), true
}

func eventLines(evs []client.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s %s %s", e.Time.Format("15:04:05.000"), e.Type, e.Message)
	}
	return b.String()
}

// execIn runs a command in the postgres task of pod's running allocation
// through Nomad's alloc exec API and returns its exit code and output.
func (pc *pgCluster) execIn(t *testing.T, pod string, command string, timeout time.Duration) (int, string) {
	t.Helper()
	allocs := Allocations(t, pc.m.Server.Client, "default", pod)
	var id string
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			id = a.ID
			break
		}
	}
	if id == "" {
		t.Fatalf("%s has no running allocation", pod)
	}
	alloc, _, err := pc.m.Server.Client.Allocations().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	code, err := pc.m.Server.Client.Allocations().Exec(ctx, alloc, "postgres", false, []string{"/bin/sh", "-c", command},
		strings.NewReader(""), &out, &out, nil, nil)
	if err != nil {
		t.Fatalf("exec in %s: %v (output %q)", pod, err, out.String())
	}
	return code, out.String()
}

// handSwitchover runs the example's switchover script in the leader, as
// the daemon would, to make ordinal to the primary.
func (pc *pgCluster) handSwitchover(t *testing.T, from, to int) time.Duration {
	t.Helper()
	start := time.Now()
	code, out := pc.execIn(t, fmt.Sprintf("%s-%d", pgSet, from),
		fmt.Sprintf("NSS_TARGET_POD=%s-%d NSS_TARGET_ORDINAL=%d exec /local/switchover.sh", pgSet, to, to), 3*time.Minute)
	if code != 0 {
		t.Fatalf("switchover by hand from %d to %d: exit %d: %s", from, to, code, out)
	}
	t.Logf("switchover by hand: %s", strings.TrimSpace(out))
	pc.waitLeader(t, to)
	return time.Since(start)
}

// rolloutResult is what one rollout measured.
type rolloutResult struct {
	mode        string
	took        time.Duration
	maxGap      time.Duration
	acked       int
	switchovers int
	// asked counts the switchover commands run (the "handing leadership
	// to" events) and failed the SwitchoverFailed events.
	asked, failed int
	timelines     [2]int
	steps         []string
}

// rollout changes the template (an env var) together with the given meta
// changes, waits until every pod runs the new revision, and measures it.
func (pc *pgCluster) rollout(t *testing.T, mode string, n int, meta map[string]string, edit func(*nomadapi.Task), during func()) rolloutResult {
	t.Helper()
	st, err := setStatus(pc.d, pgSet)
	if err != nil {
		t.Fatal(err)
	}
	old := st.Status.UpdateRevision
	tl := pc.timeline(t)
	start := time.Now()
	updateParent(t, pc.m.Cluster, pgSet, func(j *nomadapi.Job) {
		task := j.TaskGroups[0].Tasks[0]
		if task.Env == nil {
			task.Env = map[string]string{}
		}
		task.Env["NSS_E2E_ROLLOUT"] = fmt.Sprint(n)
		if edit != nil {
			edit(task)
		}
		for k, v := range meta {
			if v == "" {
				delete(j.Meta, k)
			} else {
				j.Meta[k] = v
			}
		}
	})
	if during != nil {
		during()
	}
	pc.waitRollout(t, old, pgWaitLong)
	end := time.Now()
	r := rolloutResult{mode: mode, took: end.Sub(start), timelines: [2]int{tl, pc.timeline(t)}}
	r.maxGap, r.acked = pc.w.maxGap(start, end)
	evs := pc.ev.since(start)
	r.steps = steps(evs)
	for _, st := range r.steps {
		if st == "switchover" {
			r.switchovers++
		}
	}
	for _, e := range evs {
		switch {
		case e.Type == "Switchover" && strings.Contains(e.Message, "handing leadership to"):
			r.asked++
		case e.Type == "SwitchoverFailed":
			r.failed++
		}
	}
	t.Logf("%s: rollout %v, longest write gap %v (%d writes acknowledged), %d switchover(s), timeline %d -> %d, steps %v; events:%s",
		mode, r.took.Round(100*time.Millisecond), r.maxGap.Round(time.Millisecond), r.acked, r.switchovers, r.timelines[0], r.timelines[1], r.steps, eventLines(evs))
	return r
}

func (pc *pgCluster) condition(typ, reason string) (client.Condition, bool, client.SetDetail) {
	st, err := setStatus(pc.d, pgSet)
	if err != nil {
		return client.Condition{}, false, st
	}
	for _, c := range st.Status.Conditions {
		if c.Type == typ && c.Status && (reason == "" || c.Reason == reason) {
			return c, true, st
		}
	}
	return client.Condition{}, false, st
}

// TestPostgres runs examples/postgres as a user would, with real
// PostgreSQL 15 on three Nomad clients and a client writing rows the whole
// time, through rollouts under each leader_update mode and without a
// leader check, a drain of two nodes at once (first held by the disruption
// check), and a kill -9 of the primary's machine, then its return.
// PostgreSQL itself says when the cluster has formed (pg_stat_replication
// on the primary), after the start, each disruption and at the end. It
// shows that no acknowledged write is lost (each is read back from every
// member), that every member keeps the system identifier, its volume and
// its data directory, that a switchover rollout takes the primary down
// last with exactly one switchover, that no more than one member is ever
// down and no ordinal runs twice (the watchdog), and measures the longest
// write gap of each disruption and the time without a primary when the
// primary's node dies.
func TestPostgres(t *testing.T) {
	began := time.Now()
	pc := startPostgres(t)
	pc.startWriter(t)
	stores := pc.stores(t)
	pc.m.Watchdog.TrackDown(pgSet, 3)
	var results []rolloutResult
	var disruptions []pgDisruption

	// The primary on a middle ordinal: the rollout order (2, 0, then the
	// leader) puts the switchover at the end.
	handFrom := time.Now()
	took := pc.handSwitchover(t, 0, 1)
	handGap, _ := pc.w.maxGap(handFrom, time.Now())
	t.Logf("switchover by hand 0 -> 1: %v, longest write gap %v", took.Round(100*time.Millisecond), handGap.Round(time.Millisecond))

	t.Run("switchover", func(t *testing.T) {
		r := pc.rollout(t, "switchover", 1, map[string]string{"statefulset_leader_update": "switchover"}, nil, nil)
		results = append(results, r)
		if r.switchovers != 1 || r.asked != 1 || r.failed != 0 {
			t.Errorf("%d switchovers in the rollout (%d commands run, %d failed), want exactly 1", r.switchovers, r.asked, r.failed)
		}
		if want := []string{"2", "0", "switchover", "1"}; strings.Join(r.steps, ",") != strings.Join(want, ",") {
			t.Errorf("steps %v, want %v: the leader last, after one switchover", r.steps, want)
		}
		if r.timelines[1] != r.timelines[0]+1 {
			t.Errorf("timeline %d -> %d, want one promotion", r.timelines[0], r.timelines[1])
		}
		pc.waitLeader(t, 0)
	})

	t.Run("last", func(t *testing.T) {
		// The template change of this rollout also makes the standbys'
		// check "primary" a warning (exit 1) instead of critical: the
		// same while the leader check is set (the leader is where it
		// passes, and it never counts against readiness), and what lets
		// the next scenario drop the leader check, where a critical
		// "primary" would keep every standby from being Ready.
		r := pc.rollout(t, "last", 2, map[string]string{"statefulset_leader_update": "last"}, standbyCheckWarns(t), nil)
		results = append(results, r)
		if r.switchovers != 0 || r.timelines[1] != r.timelines[0] {
			t.Errorf("%d switchovers, timeline %d -> %d; want none", r.switchovers, r.timelines[0], r.timelines[1])
		}
		if want := []string{"2", "1", "0"}; strings.Join(r.steps, ",") != strings.Join(want, ",") {
			t.Errorf("steps %v, want %v: the leader (0) last", r.steps, want)
		}
		pc.waitLeader(t, 0)
	})

	t.Run("no-leader-check", func(t *testing.T) {
		// Without the check the daemon knows no leader: plain order.
		pc.handSwitchover(t, 0, 1)
		r := pc.rollout(t, "no leader check", 3, map[string]string{"statefulset_leader_check": "", "statefulset_leader_update": ""}, nil, nil)
		results = append(results, r)
		if r.switchovers != 0 {
			t.Errorf("%d switchovers without a leader check", r.switchovers)
		}
		if want := []string{"2", "1", "0"}; strings.Join(r.steps, ",") != strings.Join(want, ",") {
			t.Errorf("steps %v, want %v", r.steps, want)
		}
	})

	t.Run("supervised", func(t *testing.T) {
		// Put the leader check back; the primary is postgres-1.
		var waited time.Duration
		r := pc.rollout(t, "supervised", 4, map[string]string{"statefulset_leader_check": "primary", "statefulset_leader_update": "supervised"}, nil, func() {
			var cond client.Condition
			last := ""
			Eventually(t, pgWaitLong, "the rollout to wait for approval before the primary", func() error {
				c, ok, st := pc.condition("WaitingForApproval", "")
				if seen := fmt.Sprintf("waiting for approval %v, updated %d; %s", ok, st.Status.UpdatedReplicas, podLine(st)); seen != last {
					t.Logf("%s %s", time.Now().Format("15:04:05.000"), seen)
					last = seen
				}
				if !ok {
					return fmt.Errorf("conditions %+v; pods %s", st.Status.Conditions, podLine(st))
				}
				cond = c
				if st.Status.UpdatedReplicas != 2 {
					return fmt.Errorf("updated %d", st.Status.UpdatedReplicas)
				}
				return nil
			})
			at := time.Now()
			time.Sleep(5 * time.Second)
			st, err := setStatus(pc.d, pgSet)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range st.Pods {
				if p.Ordinal == 1 && (p.Revision == st.Status.UpdateRevision || !p.Leader) {
					t.Fatalf("the primary went without approval: %s", podLine(st))
				}
			}
			out, err := pc.d.CLI("status", pgSet)
			if err != nil || !strings.Contains(out, "WaitingForApproval") || !strings.Contains(out, "(leader)") {
				t.Fatalf("status does not show WaitingForApproval and the leader: %v\n%s", err, out)
			}
			t.Logf("WaitingForApproval: %s\nstatus:\n%s", cond.Message, out)
			waited = time.Since(at)
			if out, err := pc.d.CLI("rollout", "approve", pgSet); err != nil {
				t.Fatalf("rollout approve: %v\n%s", err, out)
			}
		})
		r.mode = fmt.Sprintf("supervised (approved after %v)", waited.Round(time.Second))
		results = append(results, r)
		if r.switchovers != 0 {
			t.Errorf("%d switchovers under supervised", r.switchovers)
		}
		if want := []string{"2", "0", "1"}; strings.Join(r.steps, ",") != strings.Join(want, ",") {
			t.Errorf("steps %v, want %v: the leader (1) last, once approved", r.steps, want)
		}
		pc.waitLeader(t, 1)
	})

	t.Run("drain-two-nodes", func(t *testing.T) {
		// The nodes of both standbys are drained at once, first while the
		// operator holds disruptions (a row in nss_disruption_hold), then
		// with the hold lifted. Each member's volume lives on its node,
		// so neither can move: the daemon takes one down (the budget is
		// one member), which waits for its node; the other stays up on
		// its node until the first is back, then goes the same way.
		f := pc.waitFormed(t)
		var drained []int
		for o := 2; o >= 0; o-- {
			if o != f.primary {
				drained = append(drained, o)
			}
		}
		nodes := nodesOf(t, pc.m, pgSet, 3)
		if len(nodes) != 3 || nodes[0] == nodes[1] || nodes[0] == nodes[2] || nodes[1] == nodes[2] {
			t.Fatalf("members not on three nodes: %v", nodes)
		}
		db, _ := pc.primaryDB(t)
		defer db.Close()
		if _, err := db.Exec("insert into nss_disruption_hold (reason) values ('e2e: hold the drain')"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, o := range drained {
			if err := pc.m.clientOf(nodes[o]).Drain(10 * time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		var held client.Condition
		Eventually(t, 4*time.Minute, "the drain to be held by the disruption check", func() error {
			c, ok, st := pc.condition("Held", "DisruptionCheckFailed")
			if !ok {
				return fmt.Errorf("conditions %+v", st.Status.Conditions)
			}
			held = c
			return nil
		})
		// The check said no: both drained members are where they were.
		for _, o := range drained {
			if a := runningAlloc(t, pc.m, fmt.Sprintf("%s-%d", pgSet, o)); a == nil || a.NodeID != nodes[o] {
				t.Fatalf("%s-%d left its draining node while the disruption check said no", pgSet, o)
			}
		}
		out, _ := pc.d.CLI("status", pgSet)
		t.Logf("held %v: %s\nstatus:\n%s", time.Since(start).Round(time.Second), held.Message, out)
		if !strings.Contains(held.Message, "disruptions are held") {
			t.Errorf("the condition does not carry the check's output: %q", held.Message)
		}
		if _, err := db.Exec("delete from nss_disruption_hold"); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		left := map[int]bool{}
		for _, o := range drained {
			left[o] = true
		}
		var order []int
		for len(left) > 0 {
			down := -1
			Eventually(t, pgWaitLong, "a drained member to go and wait for its node", func() error {
				st, err := setStatus(pc.d, pgSet)
				if err != nil {
					return err
				}
				for _, p := range st.Pods {
					if left[p.Ordinal] && p.State == "WaitingForNode" {
						down = p.Ordinal
						return nil
					}
				}
				return fmt.Errorf("pods %s", podLine(st))
			})
			// The budget: every other drained member still runs on its
			// node while this one is down.
			for o := range left {
				if o == down {
					continue
				}
				if a := runningAlloc(t, pc.m, fmt.Sprintf("%s-%d", pgSet, o)); a == nil || a.NodeID != nodes[o] {
					t.Fatalf("%s-%d left its draining node while %s-%d was down", pgSet, o, pgSet, down)
				}
			}
			t.Logf("%s-%d waits for its node %v after the hold was lifted", pgSet, down, time.Since(released).Round(100*time.Millisecond))
			if err := pc.m.clientOf(nodes[down]).Undrain(); err != nil {
				t.Fatal(err)
			}
			pod := fmt.Sprintf("%s-%d", pgSet, down)
			Eventually(t, pgWaitLong, pod+" back on its node and ready", func() error {
				st, err := setStatus(pc.d, pgSet)
				if err != nil {
					return err
				}
				for _, p := range st.Pods {
					if p.Ordinal == down && isReady(p.State) && p.NodeID == nodes[down] {
						return nil
					}
				}
				return fmt.Errorf("pods %s", podLine(st))
			})
			delete(left, down)
			order = append(order, down)
		}
		pc.waitRollout(t, "", pgWaitLong)
		pc.waitFormed(t)
		for o, n := range nodesOf(t, pc.m, pgSet, 3) {
			if n != nodes[o] {
				t.Errorf("%s-%d runs on %s after the drain, was on %s (its volume's node)", pgSet, o, n, nodes[o])
			}
		}
		for _, o := range drained {
			taken := 0
			for _, e := range pc.ev.since(start) {
				if e.Type == "DeletePod" && strings.HasPrefix(e.Message, fmt.Sprintf("DeletePod %s-%d:", pgSet, o)) {
					taken++
				}
			}
			if taken != 1 {
				t.Errorf("%s-%d was taken down %d times by the daemon during the drain, want once:%s", pgSet, o, taken, eventLines(pc.ev.since(start)))
			}
		}
		end := time.Now()
		gap, acked := pc.w.maxGap(released, end)
		disruptions = append(disruptions, pgDisruption{name: "drain of two nodes (both standbys)", took: end.Sub(released), maxGap: gap, acked: acked})
		t.Logf("drain of two nodes: members down in the order %v, %v from the hold's end, longest write gap %v (%d writes acknowledged)",
			order, end.Sub(released).Round(100*time.Millisecond), gap.Round(time.Millisecond), acked)
	})

	t.Run("kill-primary-node", func(t *testing.T) {
		// kill -9 of the machine of the primary: its Nomad client, the
		// tasks, and its Consul agent. The example has no failover
		// manager: a standby is promoted only by the switchover command,
		// which the daemon runs before a disruption it makes itself, never
		// for a node it lost. So nothing is acknowledged until the
		// machine is back and its member starts again, on its volume, as
		// the primary; the writer measures that outage.
		f := pc.waitFormed(t)
		nodes := nodesOf(t, pc.m, pgSet, 3)
		victim := pc.m.clientOf(nodes[f.primary])
		if victim == nil {
			t.Fatalf("no client runs %s-%d: %v", pgSet, f.primary, nodes)
		}
		pc.w.waitAcks(t, 20, "before the kill")
		killed := time.Now()
		pc.m.killMachine(victim)
		Eventually(t, pgWaitLong, "Nomad to mark the killed node down", func() error {
			n, _, err := pc.m.Server.Client.Nodes().Info(victim.NodeID, nil)
			if err != nil || n.Status != "down" {
				return fmt.Errorf("node %v %v", n.Status, err)
			}
			return nil
		})
		downAfter := time.Since(killed)
		st, _ := setStatus(pc.d, pgSet)
		ps, ms, _ := pc.primaries()
		t.Logf("%s-%d's node down %v after the kill; pods %s; members answering %v, primaries among them %v",
			pgSet, f.primary, downAfter.Round(100*time.Millisecond), podLine(st), ms, ps)
		back := time.Now()
		pc.m.startMachine(victim)
		pc.waitRollout(t, "", pgWaitLong)
		g := pc.waitFormed(t)
		if g.primary != f.primary {
			t.Errorf("%s-%d is the primary after the node came back, want %s-%d: the example has no failover", pgSet, g.primary, pgSet, f.primary)
		}
		pc.w.waitAcks(t, 20, "after the node came back")
		for o, n := range nodesOf(t, pc.m, pgSet, 3) {
			if n != nodes[o] {
				t.Errorf("%s-%d runs on %s after the kill, was on %s", pgSet, o, n, nodes[o])
			}
		}
		end := time.Now()
		outage, last, next := pc.w.outage(killed, end)
		gap, acked := pc.w.maxGap(killed, end)
		disruptions = append(disruptions, pgDisruption{name: "kill -9 of the primary's node, then back", took: end.Sub(killed), maxGap: gap, acked: acked, noPrimary: outage})
		t.Logf("kill -9 of %s-%d's node: node down in Nomad after %v, machine started again %v after the kill; no write acknowledged for %v (%s to %s), the member back as the primary %v after the machine started",
			pgSet, f.primary, downAfter.Round(100*time.Millisecond), back.Sub(killed).Round(100*time.Millisecond), outage.Round(10*time.Millisecond),
			last.Format("15:04:05.000"), next.Format("15:04:05.000"), next.Sub(back).Round(100*time.Millisecond))
	})

	// At the end: one cluster by pg_stat_replication, every member with
	// the system identifier of the start (waitFormed), its volume and its
	// data directory, and every acknowledged write on every member.
	pc.waitFormed(t)
	pc.w.verify(t)
	after := pc.stores(t)
	for o := 0; o < 3; o++ {
		if before, now := stores[o], after[o]; before != now {
			t.Errorf("%s-%d: data %+v at the start, %+v at the end", pgSet, o, before, now)
		}
	}
	if n, at := pc.m.Watchdog.MaxDown(pgSet); n > 1 {
		t.Errorf("%d members down at once (%s), budget 1", n, at)
	}
	if v := pc.m.Watchdog.Violations(); len(v) > 0 {
		t.Errorf("watchdog: %v", v)
	}
	t.Logf("rollouts of 3 members (the example's defaults: min_healthy_time 10s, checks every 5s):")
	t.Logf("%-34s %10s %16s %12s", "leader update", "rollout", "longest write gap", "switchovers")
	for _, r := range results {
		t.Logf("%-34s %10v %16v %12d", r.mode, r.took.Round(100*time.Millisecond), r.maxGap.Round(10*time.Millisecond), r.switchovers)
	}
	t.Logf("%-42s %10s %16s %16s", "disruption", "took", "longest write gap", "without a primary")
	for _, d := range disruptions {
		np := "-"
		if d.noPrimary > 0 {
			np = d.noPrimary.Round(10 * time.Millisecond).String()
		}
		t.Logf("%-42s %10v %16v %16s", d.name, d.took.Round(100*time.Millisecond), d.maxGap.Round(10*time.Millisecond), np)
	}
	t.Logf("all Postgres scenarios: %v", time.Since(began).Round(time.Second))
}

// pgDisruption is what the writer saw during one disruption that is not a
// rollout.
type pgDisruption struct {
	name         string
	took, maxGap time.Duration
	acked        int
	// noPrimary is the longest time no write was acknowledged while the
	// primary was lost (pgWriter.outage), 0 when it was not lost.
	noPrimary time.Duration
}

func isReady(state string) bool { return state == "Ready" || state == "Available" }

// explainFailure, when the test failed, logs what a failure needs to be
// understood: the daemon's events, and each member's allocations with
// their task events and the end of the task's stderr (start.sh and
// postgres).
func (pc *pgCluster) explainFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	t.Logf("the daemon's events:%s", eventLines(pc.ev.since(time.Time{})))
	for o := 0; o < 3; o++ {
		job := fmt.Sprintf("%s-%d", pgSet, o)
		allocs, _, err := pc.m.Server.Client.Jobs().Allocations(job, true, nil)
		if err != nil {
			t.Logf("%s: %v", job, err)
			continue
		}
		for _, a := range allocs {
			var b strings.Builder
			fmt.Fprintf(&b, "%s allocation %s on %.8s: desired %s, client %s", job, a.ID[:8], a.NodeID, a.DesiredStatus, a.ClientStatus)
			for _, ts := range a.TaskStates {
				for _, e := range ts.Events {
					fmt.Fprintf(&b, "\n  %s %s %s", time.Unix(0, e.Time).UTC().Format("15:04:05.000"), e.Type, e.DisplayMessage)
				}
			}
			for _, c := range pc.m.Clients {
				logs, _ := filepath.Glob(filepath.Join(c.DataDir, "alloc", a.ID, "alloc", "logs", "postgres.stderr.*"))
				for _, l := range logs {
					if data, err := os.ReadFile(l); err == nil {
						lines := strings.Split(strings.TrimSpace(string(data)), "\n")
						fmt.Fprintf(&b, "\n  %s (last %d lines):\n    %s", filepath.Base(l), min(len(lines), 40), strings.Join(lines[max(0, len(lines)-40):], "\n    "))
					}
				}
			}
			t.Log(b.String())
		}
	}
}

// standbyCheckWarns edits the template's is-primary.sh so that a member
// that is not the primary fails its check "primary" with a warning (exit
// 1), not critical (exit 2).
func standbyCheckWarns(t *testing.T) func(*nomadapi.Task) {
	return func(task *nomadapi.Task) {
		for _, tm := range task.Templates {
			if tm.DestPath != nil && *tm.DestPath == "local/is-primary.sh" && tm.EmbeddedTmpl != nil {
				const from, to = `[ "$r" = primary ] || exit 2`, `[ "$r" = primary ] || exit 1`
				if !strings.Contains(*tm.EmbeddedTmpl, from) {
					t.Fatalf("is-primary.sh does not end with %q:\n%s", from, *tm.EmbeddedTmpl)
				}
				*tm.EmbeddedTmpl = strings.Replace(*tm.EmbeddedTmpl, from, to, 1)
				return
			}
		}
		t.Fatal("no template local/is-primary.sh")
	}
}

// unstickExecutors works around a race in Nomad's exec driver (seen with
// Nomad 1.10.5): an exec into a task (a script check, every second here)
// that starts as the task's init exits leaves a zombie runc:[2:INIT] child
// of the task's `nomad executor`, in the task's PID namespace. The exiting
// init then waits in zap_pid_ns_processes for it to be reaped, which the
// executor never does, and every kill fails ("executor Shutdown failed:
// process failed to exit after 15 seconds"): the allocation, and the pod,
// stay Terminating for good. Nothing of the daemon or the example is
// involved, and nothing they could do avoids it. When an executor of this
// cluster's clients is seen in that state twice, 3s apart, it is killed,
// which lets the zombie go and Nomad finish the kill; each time is logged
// at the end of the test.
func unstickExecutors(t *testing.T, m *MultiCluster) {
	var dirs []string
	for _, c := range m.Clients {
		dirs = append(dirs, c.DataDir)
	}
	var mu sync.Mutex
	var unstuck []string
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		suspects := map[int]bool{}
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			now := stuckExecutors(dirs)
			for pid, what := range now {
				if !suspects[pid] {
					continue
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
					t.Logf("worked around Nomad's exec race: killed %s", what)
					mu.Lock()
					unstuck = append(unstuck, time.Now().Format("15:04:05")+" "+what)
					mu.Unlock()
				}
			}
			suspects = map[int]bool{}
			for pid := range now {
				suspects[pid] = true
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, u := range unstuck {
			t.Logf("worked around Nomad's exec race (a zombie exec kept a task from dying): killed %s", u)
		}
	})
}

// stuckExecutors finds the `nomad executor` processes, of allocations under
// dirs, with a zombie runc:[2:INIT] child and another child stuck in
// zap_pid_ns_processes: pid -> a description.
func stuckExecutors(dirs []string) map[int]string {
	out := map[int]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	zombieInit := map[int]bool{}
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		st := string(b)
		i, j := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if i < 0 || j < i {
			continue
		}
		var pid, ppid int
		var state string
		fmt.Sscanf(st[:i], "%d", &pid)
		fmt.Sscanf(st[j+1:], " %s %d", &state, &ppid)
		children[ppid] = append(children[ppid], pid)
		if st[i+1:j] == "runc:[2:INIT]" && state == "Z" {
			zombieInit[ppid] = true
		}
	}
	for exe := range zombieInit {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", exe))
		if err != nil || !strings.Contains(string(cmd), "executor") {
			continue
		}
		ours := ""
		for _, d := range dirs {
			if strings.Contains(string(cmd), d) {
				ours = d
			}
		}
		if ours == "" {
			continue
		}
		for _, c := range children[exe] {
			if w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", c)); string(w) == "zap_pid_ns_processes" {
				out[exe] = fmt.Sprintf("executor %d (%s), its task's init %d waiting on the zombie", exe, ours, c)
			}
		}
	}
	return out
}

// runningAlloc is pod's running allocation, or nil.
func runningAlloc(t *testing.T, m *MultiCluster, pod string) *nomadapi.AllocationListStub {
	t.Helper()
	for _, a := range Allocations(t, m.Server.Client, "default", pod) {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			return a
		}
	}
	return nil
}

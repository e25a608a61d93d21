// Package testagent starts real Consul and Nomad agents for tests.
//
// Each agent runs on 127.0.0.1 with free ports and its own data directory,
// is waited on until it is really ready, and is torn down by t.Cleanup: the
// agent's process group is killed, and so is every process that still
// refers to the agent's directory (Nomad tasks, executors, logmon). The
// agents are started with Setpgid and Pdeathsig=SIGKILL, SIGINT and SIGTERM
// to the test binary tear everything down, and leftovers of a test binary
// that was killed outright are swept the next time an agent starts.
//
// The binaries come from `.cache/bin/` at the root of this module (built by
// `make tools`), or from the NOMAD_BIN and CONSUL_BIN environment variables.
// A missing binary fails the test; it is never skipped.
package testagent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// modulePath is the main module; the binaries live in .cache/bin beside its
// go.mod.
const modulePath = "github.com/nomad-statefulset/nomad-statefulset"

// rootDirName is the folder under os.TempDir() that holds every agent's
// directory, so that leftovers of killed test binaries can be found.
const rootDirName = "nss-testagent"

// ownerFile, in each agent directory, names the test process that owns it.
const ownerFile = "owner"

// TailLines is how many lines of an agent's log are printed when a test fails.
var TailLines = 80

// findBinary returns the path of a tool binary: $envVar if set, else
// <module root>/.cache/bin/<name>. It fails the test if there is none.
func findBinary(t testing.TB, name, envVar string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testagent: %s=%s: %v", envVar, p, err)
		}
		return p
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testagent: %v; set %s or run `make tools`", err, envVar)
	}
	p := filepath.Join(root, ".cache", "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testagent: no %s binary at %s: run `make tools` (or set %s)", name, p, envVar)
	}
	return p
}

// ModuleRoot returns the directory of this repository's go.mod, found by
// walking up from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// portMu serialises FreePorts; portClaims holds open the claim files of
// the ports this test binary handed out (claimPort), whose locks keep every
// test binary on this machine, this one included, from handing them out
// again.
var (
	portMu     sync.Mutex
	portClaims = map[int]*os.File{}
)

// portClaimDir holds one claim file per port a test binary on this machine
// handed out, locked with flock(2) for the life of that binary.
var portClaimDir = filepath.Join(os.TempDir(), "nss-testagent-ports")

// lockPortClaim opens port's claim file and locks it without waiting. It
// returns nil and no error when the claim is held, by another process or
// through another open file of this one (flock(2) locks conflict between
// open files, in one process as in two).
func lockPortClaim(port int) (*os.File, error) {
	if err := os.MkdirAll(portClaimDir, 0o777); err != nil {
		return nil, fmt.Errorf("making the port claim directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(portClaimDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening the claim file of port %d: %w", port, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("locking the claim file of port %d: %w", port, err)
	}
	return f, nil
}

// claimPort claims port for the life of this process, across processes:
// a port free when picked is freed again while its agent is stopped for a
// restart (TestConsulRestart keeps Consul down for ten seconds), and a test
// binary running beside it once picked such a port, so that Consul could
// not bind it again ("bind: address already in use"). The kernel drops the
// lock when the process exits, however it exits, so no claim outlives its
// binary. It reports false if the claim is held already.
func claimPort(port int) (bool, error) {
	f, err := lockPortClaim(port)
	if f == nil || err != nil {
		return false, err
	}
	portClaims[port] = f
	return true, nil
}

// releasePort gives up a claim this process holds.
func releasePort(port int) {
	if f := portClaims[port]; f != nil {
		_ = f.Close()
		delete(portClaims, port)
	}
}

// The agents' ports are picked in [portRangeLow, portRangeHigh): below
// Linux's ephemeral range (32768–60999), where every outgoing connection
// of every process takes its local port, and below Nomad's dynamic ports
// (20000–32000), which the allocations of the examples bind. A port picked
// from the ephemeral range can be taken by a connection in the moment
// between the pick and the agent's bind: a Consul that failed with
// "bind: address already in use" on its DNS port in an e2e run did so.
const (
	portRangeLow  = 10000
	portRangeHigh = 20000
)

// FreePorts returns n distinct ports on 127.0.0.1 in [portRangeLow,
// portRangeHigh) that were free for both TCP and UDP (DNS and Serf use
// both) when asked, and that no test binary on this machine has handed out
// before (claimPort): a port stays its agent's while the agent is stopped
// for a restart. Test binaries that run at once pick at random, so they
// seldom try the same port.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			_ = c.Close()
		}
	}()
	span := portRangeHigh - portRangeLow
	for tries := 0; len(ports) < n; tries++ {
		if tries > span {
			t.Fatalf("testagent: cannot find %d free ports in [%d, %d)", n, portRangeLow, portRangeHigh)
		}
		port := portRangeLow + rand.IntN(span)
		// Claimed before it is probed: a probe's bind of a port whose agent
		// is being restarted could fail that restart.
		claimed, err := claimPort(port)
		if err != nil {
			t.Fatalf("testagent: %v", err)
		}
		if !claimed {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			releasePort(port)
			continue
		}
		hold = append(hold, l)
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			releasePort(port)
			continue
		}
		hold = append(hold, u)
		ports = append(ports, port)
	}
	return ports
}

// process is one agent process and its directory.
type process struct {
	name    string // "consul" or "nomad", for messages
	bin     string
	args    []string
	env     []string
	dir     string // the agent's own directory (data dir, config, log)
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// forkRequests carries every process start to one goroutine that is locked to
// its OS thread for the life of the test binary: Pdeathsig fires when the
// thread that forked the child exits, so that thread must never exit early.
var (
	forkOnce     sync.Once
	forkRequests chan forkRequest
)

type forkRequest struct {
	cmd *exec.Cmd
	err chan error
}

func startOnLockedThread(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkRequests = make(chan forkRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range forkRequests {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := forkRequest{cmd: cmd, err: make(chan error, 1)}
	forkRequests <- r
	return <-r.err
}

// start runs the process, appending its output to the log file.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s is already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==> testagent: starting %s %s at %s\n", p.bin, strings.Join(p.args, " "), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnLockedThread(cmd); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited reports whether the current process has exited. p.mu must be held
// or the caller must otherwise own p.
func (p *process) exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the process is alive.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited()
}

// exitErr describes how the process exited.
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited() {
		return nil
	}
	if p.waitErr == nil {
		return errors.New("exited with status 0")
	}
	return p.waitErr
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	_ = cmd.Process.Signal(sig)
}

// stop asks the process to exit with SIGINT and kills its group after grace.
func (p *process) stop(grace time.Duration) {
	p.signal(syscall.SIGINT)
	if !p.wait(grace) {
		p.kill()
	}
}

// kill SIGKILLs the process group and waits for the exit.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// tail returns the last n lines of the log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// live holds every agent directory and process this test binary started, for
// the signal handler.
var (
	liveMu    sync.Mutex
	liveProcs = map[*process]bool{}
	sigOnce   sync.Once
)

func register(p *process) {
	liveMu.Lock()
	liveProcs[p] = true
	liveMu.Unlock()
	sigOnce.Do(installSignalHandler)
}

func unregister(p *process) {
	liveMu.Lock()
	delete(liveProcs, p)
	liveMu.Unlock()
}

// installSignalHandler tears every agent down on SIGINT or SIGTERM (go test
// forwards ^C; the agents are in their own process groups and do not see
// it), then lets the signal kill the test binary as it would have.
func installSignalHandler() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		liveMu.Lock()
		procs := make([]*process, 0, len(liveProcs))
		for p := range liveProcs {
			procs = append(procs, p)
		}
		liveMu.Unlock()
		for _, p := range procs {
			fmt.Fprintf(os.Stderr, "testagent: %v: tearing down %s in %s\n", sig, p.name, p.dir)
			teardown(p)
		}
		signal.Reset(syscall.SIGINT, syscall.SIGTERM)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		time.Sleep(time.Second)
		os.Exit(2)
	}()
}

// teardown kills the agent and everything that refers to its directory,
// unmounts what Nomad mounted there, and removes it (unless
// TESTAGENT_KEEP is set).
func teardown(p *process) {
	p.kill()
	killAllocCgroups(p.dir)
	killReferrers(p.dir)
	unmountUnder(p.dir)
	if os.Getenv("TESTAGENT_KEEP") == "" {
		if err := os.RemoveAll(p.dir); err != nil {
			// A busy mount: detach again and retry once.
			unmountUnder(p.dir)
			_ = os.RemoveAll(p.dir)
		}
	}
	unregister(p)
}

// newAgentDir makes the agent's directory under the shared root, records the
// owner, and sweeps leftovers of test binaries that died without cleaning up.
func newAgentDir(t testing.TB, name string) string {
	t.Helper()
	root := filepath.Join(os.TempDir(), rootDirName)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	sweepStale(root)
	dir, err := os.MkdirTemp(root, name+"-")
	if err != nil {
		t.Fatalf("testagent: %v", err)
	}
	owner := fmt.Sprintf("%d %s\n", os.Getpid(), procStartTime(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		t.Fatalf("testagent: %v", err)
	}
	return dir
}

var sweepOnce sync.Once

// sweepStale removes the directories, processes and mounts left by test
// binaries that are gone.
func sweepStale(root string) {
	sweepOnce.Do(func() {
		entries, err := os.ReadDir(root)
		if err != nil {
			return
		}
		for _, e := range entries {
			dir := filepath.Join(root, e.Name())
			b, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err == nil {
				f := strings.Fields(string(b))
				if len(f) == 2 {
					pid, _ := strconv.Atoi(f[0])
					if pid > 0 && procStartTime(pid) == f[1] {
						continue // its owner is alive
					}
				}
			} else if info, err := e.Info(); err == nil && time.Since(info.ModTime()) < time.Minute {
				continue // being created right now
			}
			killAllocCgroups(dir)
			killReferrers(dir)
			unmountUnder(dir)
			_ = os.RemoveAll(dir)
		}
	})
}

// killAllocCgroups kills the tasks of the Nomad allocations whose alloc
// directories are in dir (<dir>/*/alloc/<alloc ID>), and removes their
// cgroups. exec tasks run chrooted in their own mount namespace, so their
// root and working directory do not show that they belong to dir; their
// cgroup, named "<alloc ID>.<task>" under Nomad's parent (cgroups v1 and
// v2 alike), does.
func killAllocCgroups(dir string) {
	allocDirs, _ := filepath.Glob(filepath.Join(dir, "*", "alloc", "*"))
	ids := map[string]bool{}
	for _, d := range allocDirs {
		if id := filepath.Base(d); len(id) == 36 && strings.Count(id, "-") == 4 {
			ids[id] = true
		}
	}
	if len(ids) == 0 {
		return
	}
	var cgroups []string
	const base = "/sys/fs/cgroup"
	_ = filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, base), "/") > 5 {
			return filepath.SkipDir
		}
		name := d.Name()
		if i := strings.IndexByte(name, '.'); i == 36 && ids[name[:36]] {
			cgroups = append(cgroups, path)
			return filepath.SkipDir
		}
		return nil
	})
	for round := 0; round < 5; round++ {
		alive := false
		for _, cg := range cgroups {
			b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					alive = true
				}
			}
		}
		if !alive {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, cg := range cgroups {
		_ = os.Remove(cg) // an empty cgroup is removed with rmdir
	}
}

// procStartTime returns a process's start time in clock ticks (field 22 of
// /proc/<pid>/stat), which with the PID identifies it uniquely.
func procStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// killReferrers SIGKILLs every process whose command line, working
// directory, root or executable lies in dir: the Nomad tasks, executors and
// plugins that outlive the agent.
func killReferrers(dir string) {
	for round := 0; round < 5; round++ {
		pids := referrers(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func referrers(dir string) []int {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		if refersTo(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func refersTo(pid int, dir string) bool {
	in := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	for _, l := range []string{"cwd", "root", "exe"} {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/%s", pid, l)); err == nil && in(strings.TrimSuffix(target, " (deleted)")) {
			return true
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(b, []byte(dir+"/")) {
		return true
	}
	return false
}

// unmountUnder detaches every mount point below dir, deepest first, so that
// removing dir never reaches through a bind mount into the host.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, mp := range points {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// pluginSocketEnv returns env with PLUGIN_UNIX_SOCKET_DIR set to
// <processDir>/plugins, replacing any value env had, and that directory,
// made. go-plugin's servers (Nomad's executors and logmons, the daemon's
// plugins) make their sockets there, and their clients pass their own
// environment on. A plugin killed with its parent never removes its socket;
// inside the process's directory, teardown and the sweep of dead test
// binaries' directories do.
//
// A unix socket's path holds at most 107 bytes and a plugin adds 17 to the
// directory's, so under a longer TMPDIR env is returned as it is, with "":
// plugins that cannot listen would stop every task.
func pluginSocketEnv(env []string, processDir string) ([]string, string, error) {
	dir := filepath.Join(processDir, "plugins")
	if len(dir) > 90 {
		return env, "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("making the plugin socket directory: %w", err)
	}
	return append(without(env, "PLUGIN_UNIX_SOCKET_DIR"), "PLUGIN_UNIX_SOCKET_DIR="+dir), dir, nil
}

// envWithout returns the environment without the named variables.
func envWithout(names ...string) []string { return without(os.Environ(), names...) }

// without returns a copy of env without the named variables.
func without(env []string, names ...string) []string {
	var out []string
outer:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue outer
			}
		}
		out = append(out, kv)
	}
	return out
}

// waitFor polls cond until it returns nil, the process dies, or timeout.
func waitFor(p *process, timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited while waiting for %s: %v (last check: %v)", p.name, what, p.exitErr(), last)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %v", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Process is any long-running program a test starts with the same care as
// the agents: its own directory (working directory and log), its own
// process group, Pdeathsig, teardown at cleanup and on SIGINT/SIGTERM, and
// the tail of its log when the test fails. The e2e harness runs
// nomad-statefulset with it.
type Process struct {
	p *process
	t testing.TB

	pluginSocketDir string
}

// NewProcess prepares a process named name (for messages and its directory)
// that runs bin with args and env (nil env means os.Environ()). It does not
// start it; see Start. Its output goes to LogPath.
func NewProcess(t testing.TB, name, bin string, args, env []string) *Process {
	t.Helper()
	dir := newAgentDir(t, name)
	if env == nil {
		env = os.Environ()
	}
	// The daemon starts go-plugin plugins too; a SIGKILL in teardown would
	// leave their sockets in /tmp.
	env, sockets, err := pluginSocketEnv(env, dir)
	if err != nil {
		t.Fatalf("testagent: %v", err)
	}
	p := &process{name: name, bin: bin, args: args, env: env, dir: dir, logPath: filepath.Join(dir, name+".log")}
	register(p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testagent: last %d lines of the %s log %s:\n%s", TailLines, name, p.logPath, p.tail(TailLines))
		}
		teardown(p)
	})
	return &Process{p: p, t: t, pluginSocketDir: sockets}
}

// PluginSocketDir is where the go-plugin plugins the process starts put
// their unix sockets, or "" when they keep go-plugin's default (see
// pluginSocketEnv).
func (p *Process) PluginSocketDir() string { return p.pluginSocketDir }

// Dir is the process's own directory (its working directory), removed at
// cleanup.
func (p *Process) Dir() string { return p.p.dir }

// LogPath is the file that receives the process's stdout and stderr.
func (p *Process) LogPath() string { return p.p.logPath }

// Start starts the process (again, after Stop or Kill).
func (p *Process) Start() error { return p.p.start() }

// Stop sends SIGINT and SIGKILLs the process group after grace.
func (p *Process) Stop(grace time.Duration) { p.p.stop(grace) }

// Kill SIGKILLs the process group and waits for the exit.
func (p *Process) Kill() { p.p.kill() }

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) { p.p.signal(sig) }

// Running reports whether the process is alive.
func (p *Process) Running() bool { return p.p.running() }

// ExitErr describes how the process exited, or is nil while it runs.
func (p *Process) ExitErr() error { return p.p.exitErr() }

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string { return p.p.tail(n) }

// SetArgs replaces the arguments used by the next Start (for a config file
// written into Dir after NewProcess).
func (p *Process) SetArgs(args ...string) {
	p.p.mu.Lock()
	p.p.args = args
	p.p.mu.Unlock()
}

// PID is the running process's ID, or an error when it is not running.
func (p *Process) PID() (int, error) { return p.p.pid() }

// CPUTime is the CPU time (user and system) the running process has used,
// read from /proc/<pid>/stat. It counts the process itself and the children
// it has waited for, not children still running, so it fits an agent that
// does its work in its own process (Nomad with mock_driver, Consul, the
// daemon).
func (p *Process) CPUTime() (time.Duration, error) { return p.p.cpuTime() }

// clockTicks is the unit of the times in /proc/<pid>/stat (USER_HZ), which
// Linux fixes at 100 on every architecture it exposes to user space.
const clockTicks = 100

func (p *process) cpuTime() (time.Duration, error) {
	pid, err := p.pid()
	if err != nil {
		return 0, err
	}
	return procCPUTime(pid)
}

// pid is the running process's ID.
func (p *process) pid() (int, error) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil || !p.running() {
		return 0, fmt.Errorf("%s is not running", p.name)
	}
	return cmd.Process.Pid, nil
}

// procCPUTime reads the CPU time of pid from /proc/pid/stat.
func procCPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
	}
	d, err := parseProcStatCPU(string(raw))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// parseProcStatCPU sums utime, stime, cutime and cstime (fields 14–17) of
// a /proc/pid/stat line. The command name (field 2) may hold spaces and
// parentheses, so the fields are counted from its last closing one.
func parseProcStatCPU(s string) (time.Duration, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", s)
	}
	fields := strings.Fields(s[end+1:]) // fields[0] is field 3, the state
	if len(fields) < 15 {
		return 0, fmt.Errorf("%d fields after the command name, want ≥ 15", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:15] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %q is not a number: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

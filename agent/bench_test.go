package agent

// Scale benchmarks of issue 9, run on the simulated Nomad through the real
// agent code paths: the watcher and its cache, the work queue, the
// reconciler, the effects and the store. BENCHMARKS.md records their figures
// and the commands that produced them.
//
// The big scales are opt-in so that `make bench` stays short:
//
//	NSS_BENCH_SCALE=1000 NSS_BENCH_IDLE=30s go test -run '^$' -bench 'AgentScale' -benchtime 1x -cpu 2 ./agent/
//
// NSS_BENCH_SCALE is a comma list of set counts (default 100); each set has
// 10 replicas. NSS_BENCH_SIM=process runs the simulated Nomad in a child
// process, so that this process's RSS is the agent's alone. Run one scale per process when the peak RSS matters: the peak
// is reset at the start of each run, but memory freed by an earlier scale is
// not always returned to the OS at once.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/memory"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// benchReplicas is the size of every set in the scale benchmarks.
const benchReplicas = 10

// benchScales reads NSS_BENCH_SCALE.
func benchScales(b *testing.B) []int {
	v := os.Getenv("NSS_BENCH_SCALE")
	if v == "" {
		return []int{100}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("NSS_BENCH_SCALE=%q: want a comma list of positive set counts", v)
		}
		out = append(out, n)
	}
	return out
}

// benchEnvDuration reads a duration from the environment, or def.
func benchEnvDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a Go duration", name, v)
	}
	return d
}

// cpuTime is the user+system CPU time of this process. On a shared machine
// wall time measures the neighbours too; CPU time does not grow while the
// process waits for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatusMB reads a memory line ("VmHWM", "VmRSS") of /proc/self/status
// in MiB; 0 where /proc is missing.
func procStatusMB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field+":") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) >= 2 {
			kb, _ := strconv.ParseFloat(fs[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux ≥ 4.0),
// so that each run reports its own peak and not an earlier run's.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// liveHeapMB is the Go heap still reachable after a full collection.
func liveHeapMB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// writeHeapProfile writes the current heap profile to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// liveHeapNowMB is the heap the last collection left live, without forcing
// one.
func liveHeapNowMB() float64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// watchPeakHeap follows the live heap (as each collection leaves it) until
// the returned function is called, which returns its peak in MiB. With a
// path it also writes the heap profile each time the peak grows, so the
// file ends up showing what was live at the largest point of convergence.
func watchPeakHeap(b *testing.B, path string) func() float64 {
	var peak float64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if live := liveHeapNowMB(); live > peak {
				peak = live
				if path != "" {
					writeHeapProfile(b, path)
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		<-done
		return peak
	}
}

// reconciles is how many set reconciles the agent has finished, read from
// its reconcile-latency histogram.
func reconciles(a *Agent) uint64 {
	var m dto.Metric
	if err := a.metrics.reconcileDuration.Write(&m); err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

// sumCalls totals the simulator's call counters.
func sumCalls(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// scaleResult is what one run of the scale scenario measured.
type scaleResult struct {
	converge, convergeCPU    time.Duration
	convergeCalls            map[string]int
	convergeWrites           int
	convergeRelists          int64
	idle, idleCPU            time.Duration
	idleWrites, idleCalls    int
	idleReconciles           uint64
	resync, resyncList       []float64 // seconds
	resyncCPU                []float64 // seconds
	resyncReconciles         []float64
	resyncCalls              map[string]int // of the last resync
	peakRSS                  float64
	heapTotal, heapSim       float64
	heapAgent                float64
	convergeEventsPerSec     float64
	convergeReconcilesPerSet float64
	peakLive                 float64 // MiB
	convergePeakRSS          float64 // MiB, VmHWM once converged
}

// waitUntil polls cond every step until it holds or timeout passes.
func waitUntil(b *testing.B, what string, timeout, step time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(step)
	}
}

// converged reports whether every set's last reconcile saw all its replicas
// ready at the update revision, and no set is waiting in the queue.
func converged(a *Agent, c *controller, sets int) bool {
	return everySet(c, sets, func(_ string, st client.Status) bool {
		return st.ReadyReplicas == benchReplicas && st.UpdatedReplicas == benchReplicas && st.Replicas == benchReplicas
	})
}

// everySet reports whether no set waits in the queue, the agent shows
// exactly sets sets, and ok holds for each one's last status.
func everySet(c *controller, sets int, ok func(name string, st client.Status) bool) bool {
	if c.queue.(*queue).Len() > 0 {
		return false
	}
	list := c.sets.list()
	if len(list.Sets) != sets {
		return false
	}
	for _, d := range list.Sets {
		d, _ := c.sets.get(backend.SetKey{Namespace: d.Namespace, Name: d.Name})
		if !ok(d.Name, d.Status) {
			return false
		}
	}
	return true
}

// runScale runs the whole scenario once for sets × 10 replicas: start an
// agent on an empty simulated Nomad, register every parent at once, wait
// for convergence, watch an idle window, then force full resyncs.
func runScale(b *testing.B, sets int, policy string, idle time.Duration, resyncs int) scaleResult {
	b.Helper()
	debug.FreeOSMemory()
	resetPeakRSS()
	var r scaleResult

	sim := startBenchSim(b)
	a, c, stop := runBenchAgent(b, sim.api())

	parents := make([]*api.Job, sets)
	for i := range parents {
		parents[i] = parentJob(fmt.Sprintf("set%05d", i), map[string]string{
			"statefulset_replicas": strconv.Itoa(benchReplicas), "statefulset_pod_management_policy": policy,
		}, "v1")
	}
	sim.ResetCalls()
	idx0 := sim.Index()
	relists0 := c.watcher().Relists()
	stopPeak := watchPeakHeap(b, os.Getenv("NSS_BENCH_PEAKHEAPPROFILE"))
	cpu0, t0 := cpuTime(), time.Now()
	for _, j := range parents {
		if _, err := sim.api().RegisterJob(context.Background(), j, false, 0); err != nil {
			b.Fatal(err)
		}
	}
	waitUntil(b, fmt.Sprintf("%d sets to converge", sets), 30*time.Minute, 20*time.Millisecond, func() bool {
		return converged(a, c, sets)
	})
	r.converge, r.convergeCPU = time.Since(t0), cpuTime()-cpu0
	r.peakLive = stopPeak()
	r.convergePeakRSS = procStatusMB("VmHWM")
	r.convergeCalls = sim.Calls()
	r.convergeWrites = sim.Writes()
	r.convergeRelists = c.watcher().Relists() - relists0
	// Raft indexes are a lower bound of the events the agent consumed.
	r.convergeEventsPerSec = float64(sim.Index()-idx0) / r.converge.Seconds()
	r.convergeReconcilesPerSet = float64(reconciles(a)) / float64(sets)

	// Let the tail of the convergence (the last reconciles, status writes to
	// the store) finish before the idle window starts.
	time.Sleep(time.Second)
	sim.ResetCalls()
	rec0 := reconciles(a)
	cpu0, t0 = cpuTime(), time.Now()
	time.Sleep(idle)
	r.idle, r.idleCPU = time.Since(t0), cpuTime()-cpu0
	r.idleWrites, r.idleCalls = sim.Writes(), sumCalls(sim.Calls())
	r.idleReconciles = reconciles(a) - rec0
	r.heapTotal = liveHeapMB()
	if path := os.Getenv("NSS_BENCH_HEAPPROFILE"); path != "" {
		// The live heap of the converged agent and simulator, for
		// `go tool pprof -sample_index=inuse_space`; -memprofile would
		// only see the heap after the run has ended.
		writeHeapProfile(b, path)
	}

	for i := 0; i < resyncs; i++ {
		rec0, rel0 := reconciles(a), c.watcher().Relists()
		sim.ResetCalls()
		cpu0, t0 := cpuTime(), time.Now()
		c.watcher().RequestResync()
		waitUntil(b, "the re-list", time.Minute, 100*time.Microsecond, func() bool { return c.watcher().Relists() > rel0 })
		list := time.Since(t0)
		waitUntil(b, "every set to be reconciled again", 10*time.Minute, 100*time.Microsecond, func() bool {
			return reconciles(a) >= rec0+uint64(sets) && c.queue.(*queue).Len() == 0
		})
		r.resync = append(r.resync, time.Since(t0).Seconds())
		r.resyncCPU = append(r.resyncCPU, (cpuTime() - cpu0).Seconds())
		r.resyncList = append(r.resyncList, list.Seconds())
		r.resyncReconciles = append(r.resyncReconciles, float64(reconciles(a)-rec0))
		r.resyncCalls = sim.Calls()
		// Let the workers go idle so resyncs do not overlap.
		time.Sleep(200 * time.Millisecond)
	}
	r.peakRSS = procStatusMB("VmHWM")

	stop()
	if sim.remote() {
		// The simulator's heap is in its own process; this one's is the
		// agent's (and the benchmark's parents).
		r.heapSim = sim.liveHeapMB()
		r.heapAgent = r.heapTotal
		r.heapTotal += r.heapSim
	} else {
		// Without the agent only the simulator (and the test's parents)
		// stay reachable: its share of the heap.
		a, c = nil, nil
		_, _ = a, c
		r.heapSim = liveHeapMB()
		r.heapAgent = r.heapTotal - r.heapSim
	}
	sim.Close()
	runtime.KeepAlive(sim)
	runtime.KeepAlive(parents)
	return r
}

// runBenchAgent runs an agent of the scale benchmarks' shape (4 workers, no
// periodic resync) on sim until stop, and waits until it leads and has
// listed Nomad.
func runBenchAgent(b *testing.B, api nomad.API) (a *Agent, c *controller, stop func()) {
	b.Helper()
	a, err := New(Options{
		Logger: benchLogger(), Nomad: nomad.NewCluster(api, nomad.WithEventBufferSize(benchPaceBuffer())), PluginBuiltins: hostVolumeBuiltin(api), Store: memory.NewStore(),
		HTTPAddr: "127.0.0.1:0", Workers: 4, ResyncInterval: time.Hour,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			b.Errorf("agent: %v", err)
		}
	}()
	waitUntil(b, "the agent to lead and list", 10*time.Second, time.Millisecond, func() bool {
		c = a.current.Load()
		return c != nil && c.cache().Synced()
	})
	return a, c, func() { cancel(); <-done }
}

// benchLogger is the benchmarks' agent's logger: silent, unless
// NSS_BENCH_LOG names a level (warn, info, …) to write to stderr, to see
// why a run re-listed or stalled.
func benchLogger() hclog.Logger {
	level := os.Getenv("NSS_BENCH_LOG")
	if level == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "bench-agent", Level: hclog.LevelFromString(level), Output: os.Stderr})
}

// benchSimConfig is the simulated Nomad of the scale benchmark. Sub-10ms
// lifecycle delays keep the scheduler's own latency small, so convergence
// time is dominated by the agent's work, not by waiting.
// NSS_BENCH_DROP_SLOW=1 makes it drop a subscriber that falls behind its
// event buffer, as Nomad does (BenchmarkEventStreamAtScale); it is read here
// so that the simulator in a child process (NSS_BENCH_SIM=process) gets it
// too.
func benchSimConfig() nomadsim.NomadConfig {
	return nomadsim.NomadConfig{
		JSONPayloads: true, PlaceDelay: time.Millisecond, StartDelay: 2 * time.Millisecond,
		HealthyDelay: 3 * time.Millisecond, StopDelay: 2 * time.Millisecond,
		DropSlowSubscribers: os.Getenv("NSS_BENCH_DROP_SLOW") == "1",
	}
}

// benchSim is the simulated Nomad the scale scenario runs on: in this
// process (the default), or with NSS_BENCH_SIM=process in a child process
// that serves it over Nomad's HTTP API (nomadsim.Nomad.Handler), the agent
// then talking to it through the daemon's real nomad.Client. Only the second
// measures the agent's own RSS: in-process, the simulator's state and the
// event backlog it holds for a lagging reader share the heap.
type benchSim struct {
	local  *nomadsim.Nomad
	client *nomad.Client
	base   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
}

func startBenchSim(b *testing.B) *benchSim {
	b.Helper()
	switch os.Getenv("NSS_BENCH_SIM") {
	case "", "inprocess":
		return &benchSim{local: nomadsim.NewNomad(benchSimConfig())}
	case "process":
	default:
		b.Fatalf("NSS_BENCH_SIM=%q: want inprocess or process", os.Getenv("NSS_BENCH_SIM"))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkAgentScale$", "-test.benchtime=1x")
	// The simulator is not the daemon: no memory limit meant for the agent.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NSS_BENCH_SIM_SERVE=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting the simulator process: %v", err)
	}
	sc := bufio.NewScanner(stdout)
	var base string
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "NSS_BENCH_SIM_ADDR="); ok {
			base = v
			break
		}
	}
	if base == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatal("the simulator process did not say where it listens")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	c, err := api.NewClient(&api.Config{Address: base})
	if err != nil {
		b.Fatal(err)
	}
	return &benchSim{client: nomad.NewAPI(c), base: base, cmd: cmd, stdin: stdin}
}

func (s *benchSim) remote() bool { return s.local == nil }

func (s *benchSim) api() nomad.API {
	if s.local != nil {
		return s.local
	}
	return s.client
}

// simStats is what the simulator process reports about itself.
type simStats struct {
	Calls  map[string]int
	Writes int
	Index  uint64
	HeapMB float64
}

func (s *benchSim) stats(path string) simStats {
	resp, err := http.Get(s.base + path)
	if err != nil {
		panic("asking the simulator process: " + err.Error())
	}
	defer resp.Body.Close()
	var st simStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		panic("reading the simulator process's answer: " + err.Error())
	}
	return st
}

func (s *benchSim) ResetCalls() {
	if s.local != nil {
		s.local.ResetCalls()
		return
	}
	s.stats("/bench/reset")
}

func (s *benchSim) Calls() map[string]int {
	if s.local != nil {
		return s.local.Calls()
	}
	return s.stats("/bench/calls").Calls
}

func (s *benchSim) Writes() int {
	if s.local != nil {
		return s.local.Writes()
	}
	return s.stats("/bench/calls").Writes
}

func (s *benchSim) Index() uint64 {
	if s.local != nil {
		return s.local.Index()
	}
	return s.stats("/bench/calls").Index
}

func (s *benchSim) liveHeapMB() float64 { return s.stats("/bench/heap").HeapMB }

func (s *benchSim) Close() {
	if s.local != nil {
		s.local.Close()
		return
	}
	_ = s.stdin.Close()
	_ = s.cmd.Wait()
}

// serveBenchSim is the simulator process: it serves a simulated Nomad on a
// free port, says where on stdout, and exits when its stdin closes.
func serveBenchSim() {
	sim := nomadsim.NewNomad(benchSimConfig())
	mux := http.NewServeMux()
	mux.Handle("/v1/", sim.Handler())
	answer := func(w http.ResponseWriter, st simStats) {
		st.Calls, st.Writes, st.Index = sim.Calls(), sim.Writes(), sim.Index()
		_ = json.NewEncoder(w).Encode(st)
	}
	mux.HandleFunc("/bench/calls", func(w http.ResponseWriter, _ *http.Request) { answer(w, simStats{}) })
	mux.HandleFunc("/bench/reset", func(w http.ResponseWriter, _ *http.Request) {
		sim.ResetCalls()
		answer(w, simStats{})
	})
	mux.HandleFunc("/bench/heap", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, simStats{HeapMB: liveHeapMB()})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "simulator process:", err)
		os.Exit(1)
	}
	fmt.Printf("NSS_BENCH_SIM_ADDR=http://%s\n", ln.Addr())
	go func() { _ = http.Serve(ln, mux) }()
	_, _ = io.Copy(io.Discard, os.Stdin)
	sim.Close()
	os.Exit(0)
}

// BenchmarkAgentScale is the scale scenario of issue 9. One op is one whole
// scenario; the figures are the reported metrics:
//   - converge-s, converge-cpu-s: from registering every parent at once to
//     every set ready with 10 replicas (wall, and process CPU);
//   - calls/set, writes/set: Nomad API calls (writes) per converged set;
//   - relists: full re-lists during convergence (event stream gaps);
//   - idle-cpu-ms/s, idle-writes, idle-calls: the idle window after
//     convergence (NSS_BENCH_IDLE, default 5s);
//   - resync-s, resync-list-s, resync-cpu-s: a forced full resync, until
//     every set was reconciled again (median of NSS_BENCH_RESYNCS, default 3);
//     resync-calls: the Nomad calls of the last one;
//   - peak-RSS-MB: the process's peak RSS: agent and simulator together, or
//     with NSS_BENCH_SIM=process (the simulator in a child process, reached
//     over HTTP through nomad.Client) the agent's alone;
//   - converge-peak-live-MB: the largest live heap a collection left during
//     convergence (NSS_BENCH_PEAKHEAPPROFILE=<file> writes its profile), and
//     converge-peak-RSS-MB the peak RSS until convergence (peak-RSS-MB
//     includes the idle window and the resyncs);
//     heap-total-MB, heap-sim-MB, heap-agent-MB: the live Go heap after
//     convergence, the simulator's share and the agent's.
func BenchmarkAgentScale(b *testing.B) {
	if os.Getenv("NSS_BENCH_SIM_SERVE") != "" {
		serveBenchSim()
	}
	idle := benchEnvDuration(b, "NSS_BENCH_IDLE", 5*time.Second)
	resyncs := 3
	if v := os.Getenv("NSS_BENCH_RESYNCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("NSS_BENCH_RESYNCS=%q: want a positive count", v)
		}
		resyncs = n
	}
	// NSS_BENCH_POLICY=Parallel creates the 10 ordinals of a set at once:
	// the only way the 5,000-set scale converges in minutes, since an
	// OrderedReady set waits for each ordinal in turn.
	policy := os.Getenv("NSS_BENCH_POLICY")
	if policy == "" {
		policy = string(reconciler.OrderedReady)
	}
	for _, sets := range benchScales(b) {
		b.Run(fmt.Sprintf("sets=%d/%s", sets, policy), func(b *testing.B) {
			var r scaleResult
			// The timer stays on: a scenario takes longer than -benchtime's
			// default second, so the framework runs it once.
			for i := 0; i < b.N; i++ {
				r = runScale(b, sets, policy, idle, resyncs)
			}
			// The benchmark's own registration of each parent is not the agent's.
			calls := sumCalls(r.convergeCalls) - sets
			b.ReportMetric(r.converge.Seconds(), "converge-s")
			b.ReportMetric(r.convergeCPU.Seconds(), "converge-cpu-s")
			b.ReportMetric(float64(calls)/float64(sets), "calls/set")
			b.ReportMetric(float64(r.convergeWrites-sets)/float64(sets), "writes/set")
			b.ReportMetric(r.convergeReconcilesPerSet, "reconciles/set")
			b.ReportMetric(r.convergeEventsPerSec, "converge-idx/s")
			b.ReportMetric(float64(r.convergeRelists), "relists")
			b.ReportMetric(float64(r.idleCPU.Milliseconds())/r.idle.Seconds(), "idle-cpu-ms/s")
			b.ReportMetric(float64(r.idleWrites), "idle-writes")
			b.ReportMetric(float64(r.idleCalls), "idle-calls")
			b.ReportMetric(median(r.resync), "resync-s")
			b.ReportMetric(median(r.resyncList), "resync-list-s")
			b.ReportMetric(median(r.resyncCPU), "resync-cpu-s")
			b.ReportMetric(r.peakRSS, "peak-RSS-MB")
			b.ReportMetric(r.peakLive, "converge-peak-live-MB")
			b.ReportMetric(r.convergePeakRSS, "converge-peak-RSS-MB")
			b.ReportMetric(r.heapTotal, "heap-total-MB")
			b.ReportMetric(r.heapSim, "heap-sim-MB")
			b.ReportMetric(r.heapAgent, "heap-agent-MB")
			b.ReportMetric(float64(sumCalls(r.resyncCalls)), "resync-calls")
			b.Logf("sets=%d calls by verb during convergence: %v; resyncs (s): %v, list (s): %v, cpu (s): %v, reconciles: %v; calls of the last resync: %v",
				sets, r.convergeCalls, r.resync, r.resyncList, r.resyncCPU, r.resyncReconciles, r.resyncCalls)
		})
	}
}

// burstAPI is the simulator with a scripted event stream: the first
// subscription returns the benchmark's channel, later ones a stream that
// stays silent, so the benchmark alone decides what the watcher consumes.
type burstAPI struct {
	*nomadsim.Nomad
	ch         chan *api.Events
	subscribed chan struct{}
	once       sync.Once
}

func (f *burstAPI) Events(ctx context.Context, _ uint64) (<-chan *api.Events, error) {
	out := make(chan *api.Events)
	f.once.Do(func() {
		out = f.ch
		close(f.subscribed)
	})
	return out, nil
}

// eventWorld is a simulated Nomad holding sets × 10 healthy child jobs,
// built once per process because building it dwarfs the benchmark.
type eventWorld struct {
	sim      *nomadsim.Nomad
	children []*api.Job
	allocs   []*api.Allocation
}

var (
	eventWorldOnce sync.Once
	eventWorldVal  *eventWorld
)

// eventWorldSets is the size of the world the event benchmark runs on: the
// 1,000-set scale of issue 9.
const eventWorldSets = 1000

func buildEventWorld(b *testing.B) *eventWorld {
	eventWorldOnce.Do(func() {
		sim := nomadsim.NewNomad(nomadsim.NomadConfig{Manual: true, JSONPayloads: true})
		w := &eventWorld{sim: sim}
		ctx := context.Background()
		for s := 0; s < eventWorldSets; s++ {
			set := fmt.Sprintf("set%05d", s)
			for o := 0; o < benchReplicas; o++ {
				j := parentJob(fmt.Sprintf("%s-%d", set, o), nil, "v1")
				j.Meta = map[string]string{"statefulset_parent": set, "statefulset_ordinal": strconv.Itoa(o)}
				j.TaskGroups[0].Count = ptr(1)
				j.TaskGroups[0].Volumes = nil
				j.TaskGroups[0].Tasks[0].VolumeMounts = nil
				if _, err := sim.RegisterJob(ctx, j, false, 0); err != nil {
					panic(err)
				}
			}
			sim.Advance(0)
		}
		sim.Settle()
		for s := 0; s < eventWorldSets; s++ {
			for o := 0; o < benchReplicas; o++ {
				id := fmt.Sprintf("set%05d-%d", s, o)
				job := sim.Job("default", id)
				stubs := sim.Allocs("default", id)
				if job == nil || len(stubs) != 1 {
					panic(fmt.Sprintf("child %s: job %v, %d allocs", id, job != nil, len(stubs)))
				}
				w.children = append(w.children, job)
				w.allocs = append(w.allocs, sim.Alloc(stubs[0].ID))
			}
		}
		eventWorldVal = w
	})
	if eventWorldVal == nil {
		b.Fatal("building the event world failed")
	}
	return eventWorldVal
}

// jsonPayload is obj as the real client (nomad.Client.Events) hands it
// over: its JSON, kept undecoded.
func jsonPayload(b *testing.B, key string, obj any) map[string]any {
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]any{key: json.RawMessage(raw)}
}

// genericPayload is obj as the api package's own event stream hands it
// over: a generic map decoded from JSON, which the watcher used to read.
func genericPayload(b *testing.B, key string, obj any) map[string]any {
	raw, err := json.Marshal(map[string]any{key: obj})
	if err != nil {
		b.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkWatcherEvents is the event handling rate of issue 9 (goal ≥
// 10,000 events/s): a burst of events goes through the real watcher, its
// cache and the agent's work queue over a 1,000-set × 10 world. One op is one
// event, in its own stream message (the worst case: Nomad often batches
// several per index). The queue is not drained: deduplication keeps it at
// one entry per set, as it is while the workers are busy. Payloads are raw
// JSON, as nomad.Client delivers them. job events are status changes of a
// child (its spec's JobModifyIndex unchanged, so the digest of the spec is
// carried over), the most common job event of a busy stream; job-spec
// events register a new spec, whose digest is computed.
//
// Only the events are timed. The watcher lists the world before it applies
// any event, and that listing (10,000 children) would otherwise be most of
// a short burst and a varying share of a long one, so the figure would
// depend on -benchtime. The clock starts once the listing is in and a
// warm-up event after it has been applied: the watcher applies in order, so
// by then the listing's own reports to the queue are done too.
func BenchmarkWatcherEvents(b *testing.B) {
	for _, kind := range []string{"alloc", "job", "job-spec"} {
		b.Run(kind, func(b *testing.B) {
			w := buildEventWorld(b)
			base := w.sim.Index()
			// evs[0] is the warm-up event, applied before the clock starts.
			evs := make([]*api.Events, b.N+1)
			for i := range evs {
				n := i % len(w.allocs)
				idx := base + uint64(i) + 1
				ev := api.Event{Index: idx, Type: "AllocationUpdated", Topic: api.TopicAllocation}
				if kind == "alloc" {
					al := *w.allocs[n]
					al.ModifyIndex, al.AllocModifyIndex = idx, idx
					ev.Key, ev.Payload = al.ID, jsonPayload(b, "Allocation", &al)
				} else {
					j := *w.children[n]
					j.ModifyIndex = ptr(idx)
					if kind == "job-spec" {
						// A registration of a new spec: its digest is
						// computed, not carried over from the cache.
						j.JobModifyIndex = ptr(idx)
						j.Version = ptr(*j.Version + 1)
					}
					ev.Type, ev.Topic = "JobRegistered", api.TopicJob
					ev.Key, ev.Payload = *j.ID, jsonPayload(b, "Job", &j)
				}
				evs[i] = &api.Events{Index: idx, Events: []api.Event{ev}}
			}
			q := newQueue(time.Millisecond, time.Second)
			cache := nomad.NewCache()
			fake := &burstAPI{Nomad: w.sim, ch: make(chan *api.Events, 256), subscribed: make(chan struct{})}
			listed := make(chan struct{})
			var listedOnce sync.Once
			cfg := nomad.WatcherConfig{ResyncInterval: time.Hour, OnRelist: func() { listedOnce.Do(func() { close(listed) }) }}
			watcher := nomad.NewWatcher(fake, cache, cfg, hclog.NewNullLogger(),
				func(k backend.SetKey) { q.Add(k.String()) })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = watcher.Run(ctx)
			}()
			<-fake.subscribed
			<-listed
			if got := watcher.Relists(); got != 1 {
				b.Fatalf("%d listings before the burst; want 1", got)
			}
			fake.ch <- evs[0]
			for cache.Index() < base+1 {
				runtime.Gosched()
			}
			// The listing's garbage is not the events' to collect.
			runtime.GC()
			last := base + uint64(b.N) + 1
			cpu0 := cpuTime()
			b.ResetTimer()
			for _, e := range evs[1:] {
				fake.ch <- e
			}
			for cache.Index() < last {
				runtime.Gosched()
			}
			b.StopTimer()
			if got := watcher.Relists(); got != 1 {
				b.Fatalf("%d listings by the end of the burst; want 1: a re-list was timed", got)
			}
			cpu := cpuTime() - cpu0
			cancel()
			<-done
			if q.Len() == 0 || q.Len() > eventWorldSets {
				b.Fatalf("queue depth %d after %d events over %d sets", q.Len(), b.N, eventWorldSets)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkHashRevision is the revision hash of one parent's canonical
// template (reconciler.HashRevision over jobs.RevisionData), paid once per
// parent change and per resync when the stored revisions are compared.
func BenchmarkHashRevision(b *testing.B) {
	data, err := jobs.RevisionData(parentJob("web", nil, "v1"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if reconciler.HashRevision(data, 0) == "" {
			b.Fatal("empty hash")
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkParseRenderCPU is jobs.BenchmarkParseRender with the process CPU
// time per op next to the wall time, on the parent job the scale benchmarks
// use: parse the annotations and render one child.
func BenchmarkParseRenderCPU(b *testing.B) {
	job := parentJob("web", map[string]string{"statefulset_replicas": "10"}, "v1")
	data, err := jobs.RevisionData(job)
	if err != nil {
		b.Fatal(err)
	}
	hash := reconciler.HashRevision(data, 0)
	rev := reconciler.Revision{Name: "web-" + hash, Hash: hash, Number: 1, Data: data}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		spec, err := jobs.Parse(job)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := jobs.RenderChild(spec, rev, 2); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkDecodeAllocPayload compares the two ways of reading an event
// payload (BENCHMARKS.md, "Event handling rate"): re-encoding the generic
// map that the api package's stream decoded and decoding it again (map, the
// watcher before the fix), and decoding the raw JSON that nomad.Client now
// keeps, once (raw). One op is one allocation payload of the event
// benchmark.
func BenchmarkDecodeAllocPayload(b *testing.B) {
	w := buildEventWorld(b)
	al := w.allocs[0]
	raw, err := json.Marshal(al)
	if err != nil {
		b.Fatal(err)
	}
	generic := genericPayload(b, "Allocation", al)["Allocation"]
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			enc, err := json.Marshal(generic)
			if err != nil {
				b.Fatal(err)
			}
			var out api.Allocation
			if err := json.Unmarshal(enc, &out); err != nil || out.ID != al.ID {
				b.Fatalf("decoded %q: %v", out.ID, err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out api.Allocation
			if err := json.Unmarshal(raw, &out); err != nil || out.ID != al.ID {
				b.Fatalf("decoded %q: %v", out.ID, err)
			}
		}
	})
}

// BenchmarkSteadySync is one reconcile of a converged set, by replicas: what
// every event about the set and every resync costs once nothing is left to
// do. The agent is stopped once the set has converged, so its watcher and
// workers are quiet and the benchmark's passes are the only ones over the
// frozen cache. A pass that writes to Nomad fails the benchmark: it would
// not be steady state.
func BenchmarkSteadySync(b *testing.B) {
	for _, replicas := range []int{10, 300} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			sim := nomadsim.NewNomad(fastSim())
			b.Cleanup(sim.Close)
			a, _, stop := runBenchAgent(b, sim)
			b.Cleanup(stop)

			key := backend.SetKey{Namespace: "default", Name: "web"}
			meta := map[string]string{"statefulset_replicas": strconv.Itoa(replicas), "statefulset_pod_management_policy": "Parallel"}
			if _, err := sim.RegisterJob(context.Background(), parentJob(key.Name, meta, "v1"), false, 0); err != nil {
				b.Fatal(err)
			}
			var c *controller
			waitUntil(b, "the set to converge", time.Minute, 10*time.Millisecond, func() bool {
				c = a.current.Load()
				d, ok := a.view(key)
				return c != nil && ok && d.Status.ReadyReplicas == replicas && c.queue.(*queue).Len() == 0
			})
			stop()

			sim.ResetCalls()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.sync(context.Background(), key); err != nil {
					b.Fatal(err)
				}
			}
			if w := sim.Writes(); w != 0 {
				b.Fatalf("steady passes made %d Nomad writes (%v); want none", w, sim.Calls())
			}
		})
	}
}

// benchPaceBuffer is the event_buffer_size the agent paces its writes by
// (NSS_BENCH_PACE_BUFFER; default Nomad's 100, the simulator's too).
func benchPaceBuffer() int {
	n, _ := strconv.Atoi(os.Getenv("NSS_BENCH_PACE_BUFFER"))
	return n
}

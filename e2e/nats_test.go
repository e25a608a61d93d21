package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// The NATS example (examples/nats) on one Nomad server and three clients,
// each with its own Consul agent, against Debian's nats-server. The job
// runs as the file says: nothing in it is substituted (its ports are
// dynamic, and its routes come from Consul). Its credentials come from the
// Nomad Variable the file names, which the test makes first, as a user
// would.

const (
	natsSet     = "nats"
	natsExample = "examples/nats/nats.nomad.hcl"
	natsBin     = "/usr/sbin/nats-server"
	natsInstall = "`make test-e2e` installs it (apt-get install -y nats-server), or run that apt-get yourself"
	natsStream  = "E2E"
	natsWait    = 3 * time.Minute
	// natsVar is the Nomad Variable the example reads its credentials
	// from: nomad/jobs/<set>.
	natsVar = "nomad/jobs/" + natsSet
)

// natsCluster is the example running on a MultiCluster, with the daemon,
// a writer and the daemon's events.
type natsCluster struct {
	m  *MultiCluster
	d  *Daemon
	w  *natsWriter
	ev *eventLog
	t  *testing.T

	// The credentials of natsVar: clients', and the routes'.
	user, password, routeUser, routePassword string
	// first is the set's first ordinal (statefulset_ordinals_start).
	first int
}

// ordinals are the set's three ordinals.
func (nc *natsCluster) ordinals() []int { return []int{nc.first, nc.first + 1, nc.first + 2} }

// natsSecret is a random password of hex digits, as `openssl rand -hex`
// gives (the example wants letters and digits: the route password goes
// into URLs).
func natsSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// putNATSVar makes the example's Nomad Variable through Nomad's API, as
// the example's header says to before the job runs.
func (nc *natsCluster) putNATSVar(t *testing.T) {
	t.Helper()
	nc.user, nc.password = "app", natsSecret(t)
	nc.routeUser, nc.routePassword = "route", natsSecret(t)
	_, _, err := nc.m.Server.Client.Variables().Create(&nomadapi.Variable{
		Path: natsVar,
		Items: nomadapi.VariableItems{
			"user": nc.user, "password": nc.password,
			"route_user": nc.routeUser, "route_password": nc.routePassword,
		},
	}, nil)
	if err != nil {
		t.Fatalf("creating the Nomad Variable %s: %v", natsVar, err)
	}
}

// natsMember is one running member as Nomad placed it.
type natsMember struct {
	ordinal                  int
	allocID, nodeID          string
	client, cluster, monitor string // host:port
}

func (m natsMember) name() string { return fmt.Sprintf("%s-%d", natsSet, m.ordinal) }

// startNATS starts the cluster and the daemon, runs the example and waits
// until NATS says its three members form one JetStream cluster.
func startNATS(t *testing.T) *natsCluster {
	t.Helper()
	return startNATSWith(t, "", 0)
}

// startNATSWith is startNATS with the job's HCL variables vars (as in a
// -var-file), whose statefulset_ordinals_start is first.
func startNATSWith(t *testing.T, vars string, first int) *natsCluster {
	t.Helper()
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("nats-server is not installed (%v): %s", err, natsInstall)
	}
	// The harness's exec chroot is minimal (Nomad's default copies all of
	// /usr); nats-server needs only the C library, which it has.
	m := NewMultiClusterConsulPerNode(t, 3, testagent.WithChrootEnv(map[string]string{natsBin: natsBin}))
	d := StartDaemon(t, m.Server, m.Consul)
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nc := &natsCluster{m: m, d: d, t: t, first: first}
	nc.putNATSVar(t)
	src, err := os.ReadFile(filepath.Join(root, natsExample))
	if err != nil {
		t.Fatal(err)
	}
	job, err := m.Server.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parsing %s with %q: %v", natsExample, vars, err)
	}
	if _, _, err := m.Server.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering %s: %v", natsExample, err)
	}
	nc.ev = recordEvents(t, nc.d, natsSet)
	nc.waitSet(t, "")
	nc.waitFormed(t)
	t.Logf("the example converged and formed one JetStream cluster in %v", time.Since(start).Round(time.Second))
	return nc
}

// members returns the running member of each ordinal and its ports.
func (nc *natsCluster) members() (map[int]natsMember, error) {
	out := map[int]natsMember{}
	for _, o := range nc.ordinals() {
		job := fmt.Sprintf("%s-%d", natsSet, o)
		allocs, _, err := nc.m.Server.Client.Jobs().Allocations(job, true, nil)
		if err != nil {
			return nil, err
		}
		for _, a := range allocs {
			if a.ClientStatus != "running" || a.DesiredStatus != "run" {
				continue
			}
			info, _, err := nc.m.Server.Client.Allocations().Info(a.ID, nil)
			if err != nil {
				return nil, err
			}
			mem := natsMember{ordinal: o, allocID: a.ID, nodeID: a.NodeID}
			if info.AllocatedResources != nil {
				for _, p := range info.AllocatedResources.Shared.Ports {
					hp := fmt.Sprintf("%s:%d", p.HostIP, p.Value)
					switch p.Label {
					case "client":
						mem.client = hp
					case "cluster":
						mem.cluster = hp
					case "monitor":
						mem.monitor = hp
					}
				}
			}
			if mem.client == "" || mem.monitor == "" {
				return nil, fmt.Errorf("%s: allocation %s has no client or monitor port", job, a.ID[:8])
			}
			out[o] = mem
		}
	}
	return out, nil
}

// natsHTTP reads a monitoring endpoint of one member into v.
func natsHTTP(hostport, path string, v any) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + hostport + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, body.Error)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// natsJsz is the part of /jsz the test reads.
type natsJsz struct {
	Messages uint64 `json:"messages"`
	Meta     *struct {
		Leader   string `json:"leader"`
		Size     int    `json:"cluster_size"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Streams []struct {
			Name  string `json:"name"`
			State struct {
				Messages uint64 `json:"messages"`
				LastSeq  uint64 `json:"last_seq"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// formed checks, as NATS itself reports it, that the three members form
// one cluster: each answers /healthz ok under its own server name and sees
// a JetStream meta group of three with the same leader, and the leader
// has its two peers current.
func (nc *natsCluster) formed() (leader string, err error) {
	ms, err := nc.members()
	if err != nil {
		return "", err
	}
	if len(ms) != 3 {
		return "", fmt.Errorf("%d members running", len(ms))
	}
	for _, o := range nc.ordinals() {
		mem := ms[o]
		var health struct {
			Status string `json:"status"`
		}
		if err := natsHTTP(mem.monitor, "/healthz", &health); err != nil || health.Status != "ok" {
			return "", fmt.Errorf("%s /healthz: %q %v", mem.name(), health.Status, err)
		}
		var varz struct {
			Name string `json:"server_name"`
		}
		if err := natsHTTP(mem.monitor, "/varz", &varz); err != nil {
			return "", err
		}
		if varz.Name != mem.name() {
			return "", fmt.Errorf("the member of ordinal %d calls itself %q", o, varz.Name)
		}
		var jsz natsJsz
		if err := natsHTTP(mem.monitor, "/jsz", &jsz); err != nil {
			return "", err
		}
		if jsz.Meta == nil || jsz.Meta.Size != 3 || jsz.Meta.Leader == "" {
			return "", fmt.Errorf("%s: meta cluster %+v", mem.name(), jsz.Meta)
		}
		if leader == "" {
			leader = jsz.Meta.Leader
		} else if jsz.Meta.Leader != leader {
			return "", fmt.Errorf("%s sees meta leader %s, another member %s", mem.name(), jsz.Meta.Leader, leader)
		}
		// The leader reports its peers' replication.
		if jsz.Meta.Leader != mem.name() {
			continue
		}
		peers := 0
		for _, r := range jsz.Meta.Replicas {
			if r.Offline || !r.Current {
				return "", fmt.Errorf("%s: peer %s current %t offline %t", mem.name(), r.Name, r.Current, r.Offline)
			}
			peers++
		}
		if peers != 2 {
			return "", fmt.Errorf("the meta leader %s has %d peers", mem.name(), peers)
		}
	}
	return leader, nil
}

func (nc *natsCluster) waitFormed(t *testing.T) string {
	t.Helper()
	var leader string
	Eventually(t, natsWait, "the three NATS members to form one JetStream cluster", func() error {
		var err error
		leader, err = nc.formed()
		return err
	})
	return leader
}

// waitSet waits until the daemon reports every pod Ready at the update
// revision (one other than old, when old is set) and returns it.
func (nc *natsCluster) waitSet(t *testing.T, old string) string {
	t.Helper()
	return waitAllUpdated(t, nc.d, natsSet, 3, old, natsWait)
}

// natsPods is a one-line view of the pods: "nats-0 Running n1234abc, …".
func natsPods(st client.SetDetail) string {
	var parts []string
	for _, p := range st.Pods {
		node := p.NodeID
		if len(node) > 8 {
			node = node[:8]
		}
		s := fmt.Sprintf("%s %s %s", p.Name, p.State, node)
		if p.NotReady != "" {
			s += " (" + p.NotReady + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// podState is the daemon's state of one pod.
func (nc *natsCluster) podState(ordinal int) (client.Pod, error) {
	st, err := setStatus(nc.d, natsSet)
	if err != nil {
		return client.Pod{}, err
	}
	for _, p := range st.Pods {
		if p.Ordinal == ordinal {
			return p, nil
		}
	}
	return client.Pod{}, fmt.Errorf("no pod %d: %s", ordinal, natsPods(st))
}

// natsWriter publishes to a stream of three replicas for the whole test
// and records every message JetStream acknowledged.
type natsWriter struct {
	nc *natsCluster

	mu       sync.Mutex
	acked    map[string]uint64 // message ID -> stream sequence
	ackAt    []time.Time
	attempts int
	failures int
	lastErr  string
	redials  int

	stop chan struct{}
	done chan struct{}
}

// clientURLs are the members' client URLs as Nomad placed them.
func (nc *natsCluster) clientURLs() (string, error) {
	ms, err := nc.members()
	if err != nil {
		return "", err
	}
	var urls []string
	for _, o := range nc.ordinals() {
		if m, ok := ms[o]; ok {
			urls = append(urls, "nats://"+m.client)
		}
	}
	if len(urls) == 0 {
		return "", fmt.Errorf("no member runs")
	}
	return strings.Join(urls, ","), nil
}

func (nc *natsCluster) connect() (*nats.Conn, jetstream.JetStream, error) {
	urls, err := nc.clientURLs()
	if err != nil {
		return nil, nil, err
	}
	conn, err := nats.Connect(urls, nats.UserInfo(nc.user, nc.password),
		nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(conn)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, js, nil
}

// startWriter creates the stream (three replicas, file storage) and starts
// publishing to it.
func (nc *natsCluster) startWriter(t *testing.T) {
	t.Helper()
	// A cluster that has just formed may not place a stream of three
	// replicas at once (a peer's first heartbeat after an election, or a
	// slow machine): NATS answers with an error or not in time, and a
	// client tries again. Each try is logged, so that a cluster that never
	// takes the stream says why.
	tries := 0
	Eventually(t, natsWait, "the stream "+natsStream+" to be created", func() error {
		tries++
		conn, js, err := nc.connect()
		if err != nil {
			t.Logf("creating the stream, try %d: connecting to NATS: %v", tries, err)
			return fmt.Errorf("connecting to NATS: %w", err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: natsStream, Subjects: []string{"e2e.>"}, Replicas: 3, Storage: jetstream.FileStorage,
		}); err != nil {
			t.Logf("creating the stream, try %d: %v", tries, err)
			return fmt.Errorf("creating the stream %s: %w", natsStream, err)
		}
		return nil
	})
	nc.w = &natsWriter{nc: nc, acked: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go nc.w.run()
	t.Cleanup(nc.w.halt)
}

func (w *natsWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *natsWriter) run() {
	defer close(w.done)
	var conn *nats.Conn
	var js jetstream.JetStream
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	lastOK := time.Now()
	for n := 1; ; n++ {
		select {
		case <-w.stop:
			return
		default:
		}
		// The client follows the cluster by itself (it learns the
		// members' new addresses from the server it is connected to).
		// Should it lose them all, connect again from Nomad's view.
		if conn == nil || (conn.Status() != nats.CONNECTED && time.Since(lastOK) > 5*time.Second) {
			if conn != nil {
				conn.Close()
				w.mu.Lock()
				w.redials++
				w.mu.Unlock()
			}
			var err error
			if conn, js, err = w.nc.connect(); err != nil {
				conn = nil
				w.mu.Lock()
				w.lastErr = err.Error()
				w.mu.Unlock()
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		id := "m-" + strconv.Itoa(n)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ack, err := js.Publish(ctx, "e2e.w", []byte(id), jetstream.WithMsgID(id))
		cancel()
		now := time.Now()
		w.mu.Lock()
		w.attempts++
		if err == nil {
			w.acked[id] = ack.Sequence
			w.ackAt = append(w.ackAt, now)
			lastOK = now
		} else {
			w.failures++
			w.lastErr = err.Error()
		}
		w.mu.Unlock()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maxGap is the longest time without an acknowledged publish in
// [from, to], and how many were acknowledged then.
func (w *natsWriter) maxGap(from, to time.Time) (time.Duration, time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, gap, at, n := from, time.Duration(0), from, 0
	for _, a := range w.ackAt {
		if a.Before(from) {
			continue
		}
		if a.After(to) {
			break
		}
		n++
		if d := a.Sub(prev); d > gap {
			gap, at = d, prev
		}
		prev = a
	}
	if d := to.Sub(prev); d > gap {
		gap, at = d, prev
	}
	return gap, at, n
}

// waitAcks waits until the writer has had n more acknowledgements.
func (w *natsWriter) waitAcks(t *testing.T, n int, what string) {
	t.Helper()
	w.mu.Lock()
	want := len(w.ackAt) + n
	w.mu.Unlock()
	Eventually(t, natsWait, fmt.Sprintf("%d acknowledged publishes (%s)", n, what), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.ackAt) < want {
			return fmt.Errorf("%d of %d; last error %s", len(w.ackAt), want, w.lastErr)
		}
		return nil
	})
}

// verify stops the writer and reads the stream back: every acknowledged
// message is there, at the sequence its acknowledgement gave; and every
// member holds all of the stream's messages in its own store.
func (w *natsWriter) verify(t *testing.T) {
	t.Helper()
	w.halt()
	conn, js, err := w.nc.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, natsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]uint64{}
	for read := uint64(0); read < last; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			have[string(msg.Data())] = md.Sequence.Stream
			read = md.Sequence.Stream
			got++
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("reading the stream at %d of %d: %v", read, last, err)
		}
		if got == 0 {
			t.Fatalf("reading the stream: nothing after sequence %d of %d", read, last)
		}
	}
	w.mu.Lock()
	var lost []string
	for id, seq := range w.acked {
		if have[id] != seq {
			lost = append(lost, fmt.Sprintf("%s@%d (read %d)", id, seq, have[id]))
		}
	}
	acked, attempts, failures, redials := len(w.acked), w.attempts, w.failures, w.redials
	w.mu.Unlock()
	sort.Strings(lost)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged messages are not in the stream as acknowledged: %v", len(lost), lost[:min(len(lost), 20)])
	}
	t.Logf("writer: %d publishes tried, %d acknowledged, every one read back at its sequence (%d messages in the stream; %d failed, unacknowledged; %d reconnects from scratch)",
		attempts, acked, len(have), failures, redials)

	// Each member's own store holds the whole stream.
	Eventually(t, time.Minute, "every member to hold all of the stream", func() error {
		ms, err := w.nc.members()
		if err != nil {
			return err
		}
		for _, o := range w.nc.ordinals() {
			var jsz natsJsz
			if err := natsHTTP(ms[o].monitor, "/jsz?streams=true", &jsz); err != nil {
				return err
			}
			var state string
			for _, a := range jsz.Accounts {
				for _, st := range a.Streams {
					if st.Name == natsStream {
						if st.State.LastSeq != last || st.State.Messages != last {
							return fmt.Errorf("%s holds %d messages up to %d, the stream %d", ms[o].name(), st.State.Messages, st.State.LastSeq, last)
						}
						state = "ok"
					}
				}
			}
			if state == "" {
				return fmt.Errorf("%s has no replica of %s", ms[o].name(), natsStream)
			}
		}
		return nil
	})
}

// natsStore is what identifies a member's JetStream store on its volume:
// the volume, and the inode of the stream's first message block, which
// NATS writes once and keeps while the store lives.
type natsStore struct {
	volumeID, node, path string
	inode                uint64
}

func (nc *natsCluster) stores(t *testing.T) map[int]natsStore {
	t.Helper()
	out := map[int]natsStore{}
	for o := 0; o < 3; o++ {
		name := fmt.Sprintf("data-%s-%d", natsSet, o)
		vols := HostVolumes(t, nc.m.Server.Client, "default", name)
		if len(vols) != 1 {
			t.Fatalf("%d volumes %s", len(vols), name)
		}
		v, _, err := nc.m.Server.Client.HostVolumes().Get(vols[0].ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		blk := filepath.Join(v.HostPath, "jetstream", "$G", "streams", natsStream, "msgs", "1.blk")
		fi, err := os.Stat(blk)
		if err != nil {
			t.Fatalf("%s: the store of %s-%d: %v", name, natsSet, o, err)
		}
		out[o] = natsStore{volumeID: v.ID, node: v.NodeID, path: blk, inode: fi.Sys().(*syscall.Stat_t).Ino}
	}
	return out
}

// metaLeader is the meta leader's ordinal, as the members report it.
func (nc *natsCluster) metaLeader(t *testing.T) int {
	t.Helper()
	leader := nc.waitFormed(t)
	o, err := strconv.Atoi(strings.TrimPrefix(leader, natsSet+"-"))
	if err != nil {
		t.Fatalf("meta leader %q is no member of the set", leader)
	}
	return o
}

// streamLeader is the leader of the test's stream, as a member reports it.
func (nc *natsCluster) streamLeader() string {
	ms, err := nc.members()
	if err != nil {
		return err.Error()
	}
	for _, m := range ms {
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster *struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if natsHTTP(m.monitor, "/jsz?streams=true", &jsz) != nil {
			continue
		}
		for _, a := range jsz.Accounts {
			for _, st := range a.Streams {
				if st.Name == natsStream && st.Cluster != nil && st.Cluster.Leader != "" {
					return st.Cluster.Leader
				}
			}
		}
	}
	return "unknown"
}

// natsPhase is one disruption and what the writer saw during it.
type natsPhase struct {
	name   string
	took   time.Duration
	maxGap time.Duration
	at     time.Time
	acked  int
}

// TestNATS runs examples/nats as a user would and puts it through a
// rolling update, a drain of two nodes at once and the death of the node
// of the meta leader, while a client publishes to a stream of three
// replicas. NATS itself says when the cluster has formed (/healthz, the
// meta group in /jsz). At the end every acknowledged message is read back,
// each member still has its name, its volume and its store, no ordinal
// ever ran twice, and no more than one member was ever down. Before the
// writer starts and again at the end, every member refuses clients and
// routes without the credentials of the example's Nomad Variable.
func TestNATS(t *testing.T) {
	began := time.Now()
	nc := startNATS(t)
	nc.checkAuth(t)
	nc.startWriter(t)
	nc.w.waitAcks(t, 100, "a steady cluster")
	// A new stream makes each member's /healthz fail until its replica is
	// current, and the daemon sees that: let it settle, so that the
	// rollout starts from three ready members. (An outdated member that
	// is not ready would be replaced first, out of order.)
	nc.waitFormed(t)
	nc.waitSet(t, "")
	stores := nc.stores(t)
	nc.m.Watchdog.TrackDown(natsSet, 3)
	var phases []natsPhase
	phase := func(name string, run func()) {
		start := time.Now()
		run()
		end := time.Now()
		p := natsPhase{name: name, took: end.Sub(start)}
		p.maxGap, p.at, p.acked = nc.w.maxGap(start, end)
		phases = append(phases, p)
		t.Logf("%s: %v, longest time without an acknowledged publish %v (from %s), %d acknowledged",
			name, p.took.Round(100*time.Millisecond), p.maxGap.Round(time.Millisecond), p.at.Format("15:04:05.000"), p.acked)
	}

	phase("rolling update", func() {
		st, err := setStatus(nc.d, natsSet)
		if err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		updateParent(t, nc.m.Cluster, natsSet, func(j *nomadapi.Job) {
			task := j.TaskGroups[0].Tasks[0]
			if task.Env == nil {
				task.Env = map[string]string{}
			}
			task.Env["NSS_E2E_ROLLOUT"] = "1"
		})
		nc.waitSet(t, st.Status.UpdateRevision)
		nc.waitFormed(t)
		if got := deletedOrdinals(nc.ev.since(from), natsSet); strings.Join(got, ",") != "2,1,0" {
			t.Errorf("the rollout took pods down in the order %v, want 2,1,0; events:%s", got, eventLines(nc.ev.since(from)))
		}
	})

	phase("drain of two nodes", func() {
		// The nodes of nats-1 and nats-2. Their volumes live there, so
		// neither member can move: the daemon takes one down (the
		// budget is one), it waits for its node, and the other stays up
		// until the first is back, on its node, with its store.
		nodes := nodesOf(t, nc.m, natsSet, 3)
		a, b := nc.m.clientOf(nodes[2]), nc.m.clientOf(nodes[1])
		if a == nil || b == nil || a == b || nodes[0] == nodes[1] || nodes[0] == nodes[2] {
			t.Fatalf("members not on three nodes: %v", nodes)
		}
		from := time.Now()
		for _, c := range []*testagent.NomadAgent{a, b} {
			if err := c.Drain(10 * time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for _, step := range []struct {
			ord   int
			node  *testagent.NomadAgent
			other int
		}{{2, a, 1}, {1, b, -1}} {
			Eventually(t, natsWait, fmt.Sprintf("%s-%d to wait for its drained node", natsSet, step.ord), func() error {
				p, err := nc.podState(step.ord)
				if err != nil {
					return err
				}
				if p.State != "WaitingForNode" {
					return fmt.Errorf("%s is %s", p.Name, p.State)
				}
				return nil
			})
			if step.other >= 0 {
				// Held by the budget: the other drained member stays up
				// (the daemon shows it NodeDraining) and in the cluster.
				time.Sleep(3 * time.Second)
				p, err := nc.podState(step.other)
				if err != nil {
					t.Fatal(err)
				}
				if on := nodesOf(t, nc.m, natsSet, 3)[step.other]; on != b.NodeID || p.State != "NodeDraining" {
					t.Fatalf("%s-%d left its draining node while %s-%d was down: %s on %s", natsSet, step.other, natsSet, step.ord, p.State, on)
				}
				t.Logf("%s-%d waits for its node, %s-%d is %s", natsSet, step.ord, natsSet, step.other, p.State)
			}
			if err := step.node.Undrain(); err != nil {
				t.Fatal(err)
			}
			Eventually(t, natsWait, fmt.Sprintf("%s-%d back and ready", natsSet, step.ord), func() error {
				p, err := nc.podState(step.ord)
				if err != nil {
					return err
				}
				if p.State != "Running" && p.State != "Available" {
					return fmt.Errorf("%s is %s", p.Name, p.State)
				}
				return nil
			})
		}
		nc.waitSet(t, "")
		nc.waitFormed(t)
		if got := deletedOrdinals(nc.ev.since(from), natsSet); strings.Join(got, ",") != "2,1" {
			t.Errorf("the drain took pods down in the order %v, want 2,1; events:%s", got, eventLines(nc.ev.since(from)))
		}
	})

	phase("kill -9 of the meta leader's node", func() {
		leader := nc.metaLeader(t)
		t.Logf("meta leader %s-%d, stream leader %s", natsSet, leader, nc.streamLeader())
		nodes := nodesOf(t, nc.m, natsSet, 3)
		victim := nc.m.clientOf(nodes[leader])
		if victim == nil {
			t.Fatalf("no client runs %s-%d", natsSet, leader)
		}
		killed := time.Now()
		victim.KillHard()
		// Two members keep the majority: publishing goes on while Nomad
		// notices the node is gone.
		nc.w.waitAcks(t, 50, "two members left")
		var newLeader string
		Eventually(t, natsWait, "a new meta leader among the two others", func() error {
			ms, err := nc.members()
			if err != nil {
				return err
			}
			for o, mem := range ms {
				if o == leader {
					continue
				}
				var jsz natsJsz
				if err := natsHTTP(mem.monitor, "/jsz", &jsz); err != nil {
					return err
				}
				if jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Leader == fmt.Sprintf("%s-%d", natsSet, leader) {
					return fmt.Errorf("%s sees meta leader %+v", mem.name(), jsz.Meta)
				}
				newLeader = jsz.Meta.Leader
			}
			return nil
		})
		t.Logf("meta leader %s-%d killed with its node; %s leads %v later", natsSet, leader, newLeader, time.Since(killed).Round(100*time.Millisecond))
		Eventually(t, natsWait, "Nomad to mark the killed node down", func() error {
			n, _, err := nc.m.Server.Client.Nodes().Info(victim.NodeID, nil)
			if err != nil || n.Status != "down" {
				return fmt.Errorf("node %v %v", n.Status, err)
			}
			return nil
		})
		if p, err := nc.podState(leader); err == nil {
			t.Logf("%s-%d while its node is down: %s (%s)", natsSet, leader, p.State, p.NotReady)
		}
		victim.Start()
		nc.waitSet(t, "")
		nc.waitFormed(t)
	})

	nc.w.verify(t)
	// The members as they came back (re-rendered, restarted, replaced)
	// still let in only those with the credentials.
	nc.checkAuth(t)

	// Identity: the same name (checked by formed), the same volume, the
	// same store on it.
	after := nc.stores(t)
	for o := 0; o < 3; o++ {
		if before, now := stores[o], after[o]; before != now {
			t.Errorf("%s-%d: store %+v before, %+v after", natsSet, o, before, now)
		}
	}
	if n, at := nc.m.Watchdog.MaxDown(natsSet); n > 1 {
		t.Errorf("%d members down at once (%s), budget 1", n, at)
	}
	if v := nc.m.Watchdog.Violations(); len(v) > 0 {
		t.Errorf("watchdog: two allocations of one ordinal: %v", v)
	}
	var worst natsPhase
	// A gap is the longest time between two acknowledged publishes: no
	// quorum or no stream leader, and the client's own 2s timeout on a
	// request to a server that died under it.
	t.Logf("%-36s %10s %22s %8s", "disruption", "took", "longest without an ack", "acked")
	for _, p := range phases {
		t.Logf("%-36s %10v %22v %8d", p.name, p.took.Round(100*time.Millisecond), p.maxGap.Round(10*time.Millisecond), p.acked)
		if p.maxGap > worst.maxGap {
			worst = p
		}
	}
	t.Logf("longest time with no acknowledged publish (no quorum or no leader): %v, during the %s; whole test %v",
		worst.maxGap.Round(10*time.Millisecond), worst.name, time.Since(began).Round(time.Second))
}

// routeProbe connects to a member's route port as a peer would, sends a
// route CONNECT with the credentials given (none when user is empty) and
// no cluster name, and returns the server's first answer. A server that
// takes the credentials goes on to refuse the missing cluster name, so
// the probe never becomes a route.
func routeProbe(hostport, user, password string) (string, error) {
	conn, err := net.DialTimeout("tcp", hostport, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO ") {
		return "", fmt.Errorf("no INFO from the route port: %q %v", info, err)
	}
	connect := map[string]any{"verbose": false, "pedantic": false, "name": "e2e-route-probe"}
	if user != "" {
		connect["user"], connect["pass"] = user, password
	}
	b, err := json.Marshal(connect)
	if err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", b); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// checkAuth checks, on every member, that NATS lets in only those with the
// credentials of natsVar: a client without credentials, with a wrong
// password, or with the routes' credentials is refused; so is a route
// without credentials, with a wrong password or with the clients'
// credentials, while the routes' own pass the authorization (the probe is
// then refused for its missing cluster name). And the configuration that
// `nomad alloc fs` shows (local/nats.conf) holds no password, while the
// files that do (secrets/) are not shown.
func (nc *natsCluster) checkAuth(t *testing.T) {
	t.Helper()
	ms, err := nc.members()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no member runs")
	}
	const violation = "-ERR 'Authorization Violation'"
	for _, o := range sortedOrdinals(ms) {
		mem := ms[o]
		for _, c := range []struct {
			what       string
			user, pass string
		}{
			{"without credentials", "", ""},
			{"with a wrong password", nc.user, nc.password + "x"},
			{"with the routes' credentials", nc.routeUser, nc.routePassword},
		} {
			opts := []nats.Option{nats.NoReconnect(), nats.Timeout(2 * time.Second)}
			if c.user != "" {
				opts = append(opts, nats.UserInfo(c.user, c.pass))
			}
			conn, err := nats.Connect("nats://"+mem.client, opts...)
			if err == nil {
				conn.Close()
				t.Errorf("%s let a client in %s", mem.name(), c.what)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("%s: a client %s: %v, want %v", mem.name(), c.what, err, nats.ErrAuthorization)
			}
		}
		conn, err := nats.Connect("nats://"+mem.client, nats.UserInfo(nc.user, nc.password), nats.NoReconnect(), nats.Timeout(2*time.Second))
		if err != nil {
			t.Errorf("%s refuses a client with the credentials of %s: %v", mem.name(), natsVar, err)
		} else {
			conn.Close()
		}

		if mem.cluster == "" {
			t.Fatalf("%s: no cluster port", mem.name())
		}
		for _, c := range []struct {
			what       string
			user, pass string
			want       string
		}{
			{"without credentials", "", "", violation},
			{"with a wrong password", nc.routeUser, nc.routePassword + "x", violation},
			{"with the clients' credentials", nc.user, nc.password, violation},
			{"with the routes' credentials", nc.routeUser, nc.routePassword, "-ERR 'Rejecting connection, cluster name"},
		} {
			got, err := routeProbe(mem.cluster, c.user, c.pass)
			if err != nil {
				t.Errorf("%s: a route %s: %v", mem.name(), c.what, err)
			} else if !strings.HasPrefix(got, c.want) {
				t.Errorf("%s: a route %s: the server answered %q, want %q", mem.name(), c.what, got, c.want)
			}
		}

		// What anyone with read-fs sees.
		alloc, _, err := nc.m.Server.Client.Allocations().Info(mem.allocID, nil)
		if err != nil {
			t.Fatal(err)
		}
		conf, err := allocCat(nc.m.Server.Client, alloc, "nats/local/nats.conf")
		if err != nil {
			t.Errorf("%s: reading local/nats.conf: %v", mem.name(), err)
		} else {
			if !strings.Contains(conf, "server_name: "+mem.name()) || !strings.Contains(conf, `include "../secrets/routes.conf"`) {
				t.Errorf("%s: local/nats.conf is not the example's:\n%s", mem.name(), conf)
			}
			for _, secret := range []string{nc.password, nc.routePassword} {
				if strings.Contains(conf, secret) {
					t.Errorf("%s: local/nats.conf holds a password", mem.name())
				}
			}
		}
		// Nomad answers a read of secrets/ with its refusal as the body.
		for _, f := range []string{"nats/secrets/clients.conf", "nats/secrets/routes.conf"} {
			body, err := allocCat(nc.m.Server.Client, alloc, f)
			if err != nil {
				continue
			}
			switch {
			case strings.Contains(body, nc.password) || strings.Contains(body, nc.routePassword):
				t.Errorf("%s: `nomad alloc fs` shows the passwords in %s", mem.name(), f)
			case !strings.Contains(body, "Reading secret file prohibited"):
				t.Errorf("%s: `nomad alloc fs` of %s: %q, want Nomad's refusal", mem.name(), f, body)
			}
		}
	}
}

// allocCat is `nomad alloc fs <alloc> <path>`.
func allocCat(client *nomadapi.Client, alloc *nomadapi.Allocation, path string) (string, error) {
	r, err := client.AllocFS().Cat(alloc, path, nil)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

func sortedOrdinals(ms map[int]natsMember) []int {
	var out []int
	for o := range ms {
		out = append(out, o)
	}
	sort.Ints(out)
	return out
}

// TestNATSOrdinalsStart runs the example as `nomad job run -var
// ordinals_start=5` does: members nats-5, nats-6 and nats-7, whose route
// seeds are those ordinals, form one JetStream cluster (NATS says so, as
// in TestNATS), refuse whoever lacks the credentials, and keep every
// acknowledged write. With the seeds the file once had (0, 1 and 2) no
// member would find another.
func TestNATSOrdinalsStart(t *testing.T) {
	nc := startNATSWith(t, "ordinals_start = 5", 5)
	for _, o := range nc.ordinals() {
		job, _, err := nc.m.Server.Client.Jobs().Info(fmt.Sprintf("%s-%d", natsSet, o), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := job.Meta["nats_route_seeds"]; got != "5,6,7" {
			t.Errorf("%s-%d: nats_route_seeds = %q, want 5,6,7", natsSet, o, got)
		}
	}
	nc.checkAuth(t)
	nc.startWriter(t)
	nc.w.waitAcks(t, 300, "a cluster of ordinals 5 to 7")
	nc.w.verify(t)
}

// TestNATSRouteSeeds: the example's route seeds follow its replicas and
// first ordinal, as Nomad parses the file with the variables a user
// would give (`nomad job run -var replicas=5 ...`): the first three
// ordinals of the set, or all of them when it has fewer. The daemon reads
// the same replicas and first ordinal from the annotations, so the seeds
// are always members of the set. (TestNATS runs the defaults, whose
// routes form the cluster; the template turns each seed ordinal into a
// route the same way for any of them.)
func TestNATSRouteSeeds(t *testing.T) {
	root, err := testagent.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, natsExample))
	if err != nil {
		t.Fatal(err)
	}
	n := testagent.Nomad(t)
	for _, c := range []struct {
		vars      string
		replicas  int
		start     int
		wantSeeds string
	}{
		{"", 3, 0, "0,1,2"},
		{"replicas = 5", 5, 0, "0,1,2"},
		{"replicas = 1", 1, 0, "0"},
		{"replicas = 2\nordinals_start = 10", 2, 10, "10,11"},
		{"replicas = 4\nordinals_start = 7", 4, 7, "7,8,9"},
	} {
		job, err := n.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Variables: c.vars, Canonicalize: true})
		if err != nil {
			t.Fatalf("parsing %s with %q: %v", natsExample, c.vars, err)
		}
		spec, err := jobs.Parse(job)
		if err != nil {
			t.Fatalf("%q: the daemon rejects the job: %v", c.vars, err)
		}
		if spec.Replicas != c.replicas || spec.OrdinalsStart != c.start {
			t.Errorf("%q: the daemon reads replicas %d from %d, want %d from %d", c.vars, spec.Replicas, spec.OrdinalsStart, c.replicas, c.start)
		}
		seeds := job.Meta["nats_route_seeds"]
		if seeds != c.wantSeeds {
			t.Errorf("%q: nats_route_seeds = %q, want %q", c.vars, seeds, c.wantSeeds)
		}
		for _, s := range strings.Split(seeds, ",") {
			o, err := strconv.Atoi(s)
			if err != nil || o < spec.OrdinalsStart || o >= spec.OrdinalsStart+spec.Replicas {
				t.Errorf("%q: seed %q is no ordinal of the set (%d from %d)", c.vars, s, spec.Replicas, spec.OrdinalsStart)
			}
		}
	}
}

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// MultiCluster is one Nomad server and several client agents on 127.0.0.1,
// each its own node with its own data and host volume directories and node
// meta rack=r<i>, with Consul and a watchdog.
type MultiCluster struct {
	*Cluster
	// Server is the server agent (no client); Clients are the client agents.
	Server  *testagent.NomadAgent
	Clients []*testagent.NomadAgent
	// ClientConsuls[i] is the Consul client agent beside Clients[i]
	// (NewMultiClusterConsulPerNode), nil when the clients share m.Consul.
	ClientConsuls []*testagent.ConsulAgent
}

// NewMultiCluster starts Consul, one Nomad server and n client agents, each
// with clientOpts. The clients share the one Consul agent: enough for sets
// without services.
func NewMultiCluster(t testing.TB, n int, clientOpts ...testagent.NomadOption) *MultiCluster {
	t.Helper()
	return newMultiCluster(t, n, false, clientOpts...)
}

// NewMultiClusterConsulPerNode is NewMultiCluster with a Consul client
// agent beside each Nomad client, joined to the Consul server, as in
// production. Sets with services need it: Nomad clients that share one
// Consul agent deregister each other's services.
func NewMultiClusterConsulPerNode(t testing.TB, n int, clientOpts ...testagent.NomadOption) *MultiCluster {
	t.Helper()
	return newMultiCluster(t, n, true, clientOpts...)
}

func newMultiCluster(t testing.TB, n int, consulPerNode bool, clientOpts ...testagent.NomadOption) *MultiCluster {
	t.Helper()
	m := &MultiCluster{Cluster: &Cluster{t: t}}
	m.Consul = testagent.Consul(t)
	m.Server = testagent.Nomad(t, testagent.WithConsul(m.Consul), testagent.WithoutClient())
	for i := 0; i < n; i++ {
		opts := clientOpts
		var own *testagent.ConsulAgent
		if consulPerNode {
			own = testagent.ConsulClient(t, m.Consul)
			opts = append([]testagent.NomadOption{testagent.WithConsul(own)}, clientOpts...)
		}
		m.Clients = append(m.Clients, testagent.NomadClient(t, m.Server, map[string]string{"rack": fmt.Sprintf("r%d", i)}, opts...))
		m.ClientConsuls = append(m.ClientConsuls, own)
	}
	m.Nomad = m.Server
	m.Watchdog = StartWatchdog(t, m.Server.Client)
	return m
}

// clientOf returns the client agent whose node is id.
func (m *MultiCluster) clientOf(id string) *testagent.NomadAgent {
	for _, c := range m.Clients {
		if c.NodeID == id {
			return c
		}
	}
	return nil
}

// killMachine kills c's whole machine with SIGKILL, as a power loss would:
// its Nomad client, the tasks the client leaves running, and its own Consul
// agent when it has one (so the services registered there turn critical
// in the catalog, as they do when a machine dies). startMachine brings it
// back on the same data directories, Consul first, as a booting machine
// would.
func (m *MultiCluster) killMachine(c *testagent.NomadAgent) {
	c.KillHard()
	if own := m.consulOf(c); own != nil {
		own.Kill()
	}
}

// startMachine starts what killMachine killed, and waits until the Nomad
// client is ready.
func (m *MultiCluster) startMachine(c *testagent.NomadAgent) {
	if own := m.consulOf(c); own != nil {
		own.Start()
	}
	c.Start()
}

// consulOf is the Consul agent of c's machine, or nil when it shares one.
func (m *MultiCluster) consulOf(c *testagent.NomadAgent) *testagent.ConsulAgent {
	for i, cl := range m.Clients {
		if cl == c && i < len(m.ClientConsuls) {
			return m.ClientConsuls[i]
		}
	}
	return nil
}

// killNodeOf kills hard (SIGKILL, its executors too: a machine that died)
// the client holding volume name, waits until Nomad marks its node down,
// and returns the client and the volume.
func (m *MultiCluster) killNodeOf(t *testing.T, name string) (*testagent.NomadAgent, *nomadapi.HostVolumeStub) {
	t.Helper()
	vols := HostVolumes(t, m.Server.Client, "default", name)
	if len(vols) != 1 {
		t.Fatalf("%d %s volumes", len(vols), name)
	}
	victim := m.clientOf(vols[0].NodeID)
	if victim == nil {
		t.Fatalf("no client holds %s", name)
	}
	victim.KillHard()
	Eventually(t, 3*time.Minute, "the killed client's node to be down", func() error {
		n, _, err := m.Server.Client.Nodes().Info(victim.NodeID, nil)
		if err != nil || n.Status != "down" {
			return fmt.Errorf("node %v %v", n.Status, err)
		}
		return nil
	})
	return victim, vols[0]
}

// TestMultiNodeHarness: one server and three clients on loopback, each a
// ready node with its rack meta; a node can be drained and undrained, and a
// client killed hard (its executors too) and started again on its data.
func TestMultiNodeHarness(t *testing.T) {
	m := NewMultiCluster(t, 3)
	nodes, _, err := m.Server.Client.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	racks := map[string]bool{}
	for _, n := range nodes {
		info, _, err := m.Server.Client.Nodes().Info(n.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != "ready" {
			t.Fatalf("node %s is %s", info.Name, info.Status)
		}
		racks[info.Meta["rack"]] = true
	}
	if len(nodes) != 3 || len(racks) != 3 {
		t.Fatalf("%d nodes on racks %v, want 3 on r0..r2", len(nodes), racks)
	}
	c := m.Clients[1]
	if err := c.Drain(time.Minute); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "the drained node to be ineligible", func() error {
		n, _, err := m.Server.Client.Nodes().Info(c.NodeID, nil)
		if err != nil || n.SchedulingEligibility != "ineligible" {
			return fmt.Errorf("%v %v", n.SchedulingEligibility, err)
		}
		return nil
	})
	if err := c.Undrain(); err != nil {
		t.Fatal(err)
	}
	c.KillHard()
	c.Start()
}

// TestDrainTwoNodesWithinTheBudget is issue 14's drain: a 3-replica
// Parallel set without claims, spread by hand over three nodes; two nodes
// are drained at once with a budget of 1. Nomad leaves the children to the
// daemon (migrate max_parallel = 0), which takes them off the draining nodes
// one at a time; a watchdog fed by the event stream checks that at most one
// ordinal is ever down, and all three come back, on the third node.
func TestDrainTwoNodesWithinTheBudget(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	spec := setSpec{name: "dr", noVolume: true, meta: map[string]string{
		"statefulset_replicas": "3", "statefulset_pod_management_policy": "Parallel"}}
	RegisterHCL(t, m.Server.Client, spec.hcl())
	waitConverged(t, m.Cluster, d, "dr", 3, nil)

	// Drain two nodes at once, those holding pods first.
	byNode := map[string][]string{}
	for o := 0; o < 3; o++ {
		allocs := Allocations(t, m.Server.Client, "default", fmt.Sprintf("dr-%d", o))
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				byNode[a.NodeID] = append(byNode[a.NodeID], a.JobID)
			}
		}
	}
	var drained []*testagent.NomadAgent
	for _, withPods := range []bool{true, false} {
		for _, c := range m.Clients {
			if (len(byNode[c.NodeID]) > 0) == withPods && len(drained) < 2 {
				drained = append(drained, c)
			}
		}
	}
	m.Watchdog.TrackDown("dr", 3)
	for _, c := range drained {
		if err := c.Drain(10 * time.Minute); err != nil {
			t.Fatalf("draining %s: %v", c.Name, err)
		}
	}
	Eventually(t, 4*time.Minute, "every pod to leave the drained nodes", func() error {
		for _, c := range drained {
			for o := 0; o < 3; o++ {
				for _, a := range Allocations(t, m.Server.Client, "default", fmt.Sprintf("dr-%d", o)) {
					if a.NodeID == c.NodeID && a.ClientStatus == "running" {
						return fmt.Errorf("dr-%d still runs on %s", o, c.Name)
					}
				}
			}
		}
		return nil
	})
	waitConverged(t, m.Cluster, d, "dr", 3, nil)
	if n, at := m.Watchdog.MaxDown("dr"); n > 1 {
		t.Fatalf("%d ordinals were down at once during the drain (%s); the budget is 1", n, at)
	}
	st, err := setStatus(d, "dr")
	if err != nil {
		t.Fatal(err)
	}
	drains := 0
	for _, e := range st.Events {
		if e.Type == "DeletePod" && strings.Contains(e.Message, "drained") {
			drains++
		}
	}
	if drains == 0 {
		t.Fatalf("the daemon moved no pod off the draining nodes; events: %+v", st.Events)
	}
	t.Logf("pods on drained nodes %v; %d moved by the daemon", byNode, drains)
	for _, c := range drained {
		if err := c.Undrain(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrainedPodComesBackOnItsVolume: a set with a claim; its pods' volumes
// live on the node being drained. The daemon takes one pod down (budget 1);
// it cannot be placed elsewhere, so it waits (WaitingForNode) and holds the
// budget: no second pod goes down. When the drain is lifted, the blocked
// child is evaluated again (Nomad does not unblock it by itself), comes back
// on its volume with its data, and the set converges.
func TestDrainedPodComesBackOnItsVolume(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	RegisterHCL(t, m.Server.Client, setSpec{name: "dv", meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	waitConverged(t, m.Cluster, d, "dv", 2, nil)
	vols := HostVolumes(t, m.Server.Client, "default", "data-dv-")
	if len(vols) != 2 {
		t.Fatalf("%d volumes", len(vols))
	}
	target := m.clientOf(vols[1].NodeID)
	if target == nil {
		t.Fatalf("no client holds %s", vols[1].Name)
	}
	onTarget := 0
	for _, v := range vols {
		if v.NodeID == target.NodeID {
			onTarget++
		}
	}
	m.Watchdog.TrackDown("dv", 2)
	if err := target.Drain(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "a pod on the drained node to wait for it", func() error {
		st, err := setStatus(d, "dv")
		if err != nil {
			return err
		}
		for _, p := range st.Pods {
			if p.State == "WaitingForNode" {
				return nil
			}
		}
		return fmt.Errorf("pods %+v", st.Pods)
	})
	if n, at := m.Watchdog.MaxDown("dv"); n > 1 {
		t.Fatalf("%d ordinals down at once (%s), budget 1", n, at)
	}
	if err := target.Undrain(); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, m.Cluster, d, "dv", 2, nil)
	after := HostVolumes(t, m.Server.Client, "default", "data-dv-")
	for i := range vols {
		if after[i].ID != vols[i].ID {
			t.Fatalf("%s was replaced: the pod did not come back on its volume", vols[i].Name)
		}
	}
	if n, at := m.Watchdog.MaxDown("dv"); n > 1 {
		t.Fatalf("%d ordinals down at once (%s), budget 1", n, at)
	}
	t.Logf("%d of 2 volumes on the drained node; max down %d", onTarget, func() int { n, _ := m.Watchdog.MaxDown("dv"); return n }())
}

// nodesOf returns the nodes of a set's running allocations, by ordinal.
func nodesOf(t *testing.T, m *MultiCluster, set string, replicas int) map[int]string {
	t.Helper()
	out := map[int]string{}
	for o := 0; o < replicas; o++ {
		for _, a := range Allocations(t, m.Server.Client, "default", fmt.Sprintf("%s-%d", set, o)) {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				out[o] = a.NodeID
			}
		}
	}
	return out
}

// TestSpreadByDefault: without any annotation a set's ordinals go to
// distinct nodes while there are enough, with and without volume claims
// (Nomad alone packed all three on one node); statefulset_spread names
// another attribute (the rack meta).
func TestSpreadByDefault(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	RegisterHCL(t, m.Server.Client, setSpec{name: "sv", meta: map[string]string{"statefulset_replicas": "3"}}.hcl())
	RegisterHCL(t, m.Server.Client, setSpec{name: "sn", noVolume: true, meta: map[string]string{
		"statefulset_replicas": "3", "statefulset_spread": "${meta.rack}"}}.hcl())
	waitConverged(t, m.Cluster, d, "sv", 3, nil)
	waitConverged(t, m.Cluster, d, "sn", 3, nil)
	for _, set := range []string{"sv", "sn"} {
		nodes := nodesOf(t, m, set, 3)
		distinct := map[string]bool{}
		for _, n := range nodes {
			distinct[n] = true
		}
		if len(distinct) != 3 {
			t.Fatalf("%s: ordinals on nodes %v, want three distinct nodes", set, nodes)
		}
	}
}

// TestHardSpreadThatCannotBeMet: with statefulset_spread_required and four
// replicas on three nodes, the fourth ordinal waits, and the set says why
// (the Held condition, SpreadUnsatisfiable); the first three are spread.
// When a fourth node joins, the Node event (not a timer: the periodic
// re-list is an hour away) places the fourth ordinal there.
func TestHardSpreadThatCannotBeMet(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul, `resync_interval = "1h"`)
	RegisterHCL(t, m.Server.Client, setSpec{name: "hs", meta: map[string]string{
		"statefulset_replicas": "4", "statefulset_pod_management_policy": "Parallel", "statefulset_spread_required": "true"}}.hcl())
	Eventually(t, convergeTimeout, "three ordinals up and the fourth held by the spread", func() error {
		st, err := setStatus(d, "hs")
		if err != nil {
			return err
		}
		held := false
		for _, c := range st.Status.Conditions {
			held = held || (c.Type == "Held" && c.Reason == "SpreadUnsatisfiable" && strings.Contains(c.Message, "ordinal 3"))
		}
		if !held || st.Status.ReadyReplicas != 3 {
			return fmt.Errorf("ready %d, conditions %+v", st.Status.ReadyReplicas, st.Status.Conditions)
		}
		return nil
	})
	nodes := nodesOf(t, m, "hs", 4)
	if len(nodes) != 3 || nodes[0] == nodes[1] || nodes[1] == nodes[2] || nodes[0] == nodes[2] {
		t.Fatalf("ordinals on nodes %v, want 0..2 on three distinct nodes and 3 nowhere", nodes)
	}

	m.Clients = append(m.Clients, testagent.NomadClient(t, m.Server, map[string]string{"rack": "r3"}))
	waitConverged(t, m.Cluster, d, "hs", 4, nil)
	nodes = nodesOf(t, m, "hs", 4)
	distinct := map[string]bool{}
	for _, n := range nodes {
		distinct[n] = true
	}
	if len(nodes) != 4 || len(distinct) != 4 {
		t.Fatalf("ordinals on nodes %v, want four distinct nodes once the fourth joined", nodes)
	}
}

// TestLostNodeComesBack: the client holding an ordinal and its volume is
// killed (SIGKILL, its executors too: a machine that died). The ordinal is
// never run twice (watchdog), not while the node is down, nor after it
// returns: it comes back on its own volume when the node does.
func TestLostNodeComesBack(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	RegisterHCL(t, m.Server.Client, setSpec{name: "ln", meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	waitConverged(t, m.Cluster, d, "ln", 2, nil)
	victim, vol := m.killNodeOf(t, "data-ln-1")
	victim.Start()
	waitConverged(t, m.Cluster, d, "ln", 2, nil)
	if after := HostVolumes(t, m.Server.Client, "default", "data-ln-1"); len(after) != 1 || after[0].ID != vol.ID {
		t.Fatalf("ln-1 did not come back on its volume: %+v", after)
	}
}

// TestPurgedNodeReplacedOnNewVolume: the client holding an ordinal and its
// volume dies for good and its node is purged from Nomad. `pod replace
// -new-volume` rebuilds the ordinal on a fresh volume on another node; the
// watchdog sees no two tasks of one ordinal. It used to stall twice: the
// lost allocation's wait ran out with no event to look again on (the set
// sat Terminating until the periodic re-list), and Nomad refuses to delete
// a volume of a node it no longer knows without force.
func TestPurgedNodeReplacedOnNewVolume(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	RegisterHCL(t, m.Server.Client, setSpec{name: "pn", meta: map[string]string{
		"statefulset_replicas": "2", "statefulset_pod_management_policy": "Parallel"}}.hcl())
	waitConverged(t, m.Cluster, d, "pn", 2, nil)
	victim, vol := m.killNodeOf(t, "data-pn-1")
	if _, _, err := m.Server.Client.Nodes().Purge(victim.NodeID, nil); err != nil {
		t.Fatalf("purging the dead node: %v", err)
	}
	if out, err := d.CLI("pod", "replace", "-yes", "-new-volume", "pn", "1"); err != nil {
		t.Fatalf("pod replace -new-volume: %v\n%s", err, out)
	}
	waitConverged(t, m.Cluster, d, "pn", 2, nil)
	after := HostVolumes(t, m.Server.Client, "default", "data-pn-1")
	if len(after) != 1 || after[0].ID == vol.ID || after[0].NodeID == victim.NodeID {
		t.Fatalf("pn-1 is not on a fresh volume elsewhere: before %+v, after %+v", vol, after)
	}
}

// TestBlockedPodSaysWhy is issue 14's honest state for a pod Nomad cannot
// place: status and the HTTP API show it Blocked, with Nomad's placement
// failure (from the Evaluation topic), not a bare Pending. Once the
// template can be placed and the pod replaced, it runs and the reason is
// gone.
func TestBlockedPodSaysWhy(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	spec := setSpec{name: "bk", noVolume: true, meta: map[string]string{"statefulset_replicas": "1"},
		group: `
    constraint {
      attribute = "${meta.rack}"
      value     = "nowhere"
    }`}
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	Eventually(t, time.Minute, "bk-0 to be Blocked with Nomad's reason", func() error {
		st, err := setStatus(d, "bk")
		if err != nil {
			return err
		}
		if len(st.Pods) != 1 || st.Pods[0].State != "Blocked" || !strings.Contains(st.Pods[0].NotReady, "nodes filtered") ||
			!strings.Contains(st.Pods[0].NotReady, "meta.rack") {
			return fmt.Errorf("pods %+v", st.Pods)
		}
		return nil
	})
	out, err := d.CLI("status", "bk")
	if err != nil || !strings.Contains(out, "Blocked") || !strings.Contains(out, "Nomad could not place it") {
		t.Fatalf("status does not show bk-0 Blocked with the reason: %v\n%s", err, out)
	}
	// As in Kubernetes (after reverting a bad template "you must also
	// delete any Pods that StatefulSet had already attempted to run with
	// the bad configuration"), the fixed template does not replace a
	// pod at the current revision before the progress deadline: the
	// operator deletes it, here with pod replace.
	spec.group = ""
	RegisterHCL(t, c.Nomad.Client, spec.hcl())
	if out, err := d.CLI("pod", "replace", "-yes", "bk", "0"); err != nil {
		t.Fatalf("pod replace: %v\n%s", err, out)
	}
	waitConverged(t, c, d, "bk", 1, nil)
	st, err := setStatus(d, "bk")
	if err != nil || st.Pods[0].NotReady != "" {
		t.Fatalf("bk-0 placed but still says %q (%v)", st.Pods[0].NotReady, err)
	}
}

// TestNewVolumeIsAWaitNotABlock: Nomad creates a host volume "pending" and
// marks it "ready" at its client's next node update, 5 to 10 s later. The
// daemon registers a new pod right after its volume, so Nomad fails to
// place it meanwhile ("missing compatible host volumes") and places it by
// itself once the volume is ready. Status shows that wait as Pending,
// naming the volume, not as Blocked. The volume's client is frozen
// (SIGSTOP) as soon as the volume exists, so that it stays pending for as
// long as the test looks, whatever the machine's speed.
func TestNewVolumeIsAWaitNotABlock(t *testing.T) {
	m := NewMultiCluster(t, 3)
	d := StartDaemon(t, m.Server, m.Consul)
	RegisterHCL(t, m.Server.Client, setSpec{name: "nv", meta: map[string]string{"statefulset_replicas": "1"}}.hcl())

	// Eventually looks every 250 ms, well within the 5 to 10 s before the
	// volume's client marks it ready.
	var vol *nomadapi.HostVolumeStub
	Eventually(t, time.Minute, "the daemon to create data-nv-0", func() error {
		vols := HostVolumes(t, m.Server.Client, "default", "data-nv-0")
		if len(vols) != 1 {
			return fmt.Errorf("%d volumes data-nv-0", len(vols))
		}
		vol = vols[0]
		return nil
	})
	frozen := m.clientOf(vol.NodeID)
	if frozen == nil {
		t.Fatalf("no client holds data-nv-0 (node %s)", vol.NodeID)
	}
	frozen.Signal(syscall.SIGSTOP)
	thaw := sync.OnceFunc(func() { frozen.Signal(syscall.SIGCONT) })
	t.Cleanup(thaw)
	if vol.State != nomadapi.HostVolumeStatePending {
		t.Fatalf("data-nv-0 was %q when first seen, not pending: its client's node update came within one poll of the create", vol.State)
	}

	// Nomad fails the placement: the premise.
	Eventually(t, 30*time.Second, "Nomad to fail nv-0's placement for want of its volume", func() error {
		evals, _, err := m.Server.Client.Jobs().Evaluations("nv-0", nil)
		if err != nil {
			return err
		}
		for _, e := range evals {
			for _, metric := range e.FailedTGAllocs {
				if metric != nil && metric.ConstraintFiltered["missing compatible host volumes"] > 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("%d evaluations, none failed for want of a host volume", len(evals))
	})
	// The daemon shows a wait for the volume, not a placement failure.
	Eventually(t, 30*time.Second, "nv-0 to be Pending, waiting for data-nv-0", func() error {
		st, err := setStatus(d, "nv")
		if err != nil {
			return err
		}
		if len(st.Pods) == 1 && st.Pods[0].State == "NodeDown" {
			// Frozen past its heartbeats: the wait is no longer for the volume.
			return fmt.Errorf("%w: the frozen client's node was marked down first: pods %+v", testagent.ErrGiveUp, st.Pods)
		}
		if len(st.Pods) != 1 || st.Pods[0].State != "Pending" || !strings.Contains(st.Pods[0].NotReady, "data-nv-0") {
			return fmt.Errorf("pods %+v", st.Pods)
		}
		return nil
	})
	out, err := d.CLI("status", "nv")
	if err != nil || strings.Contains(out, "Blocked") || !strings.Contains(out, "waiting for Nomad to mark its new volume data-nv-0 ready") {
		t.Fatalf("status does not show nv-0 waiting for its volume: %v\n%s", err, out)
	}

	thaw()
	waitConverged(t, m.Cluster, d, "nv", 1, nil)
	if v := HostVolumes(t, m.Server.Client, "default", "data-nv-0"); len(v) != 1 || v[0].State != nomadapi.HostVolumeStateReady {
		t.Fatalf("data-nv-0 after the thaw: %+v", v)
	}
}

//go:build realagents

package testagent

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestConsulRestartKeepsKV starts Consul, writes a key, restarts and kills it,
// and reads the key back each time.
func TestConsulRestartKeepsKV(t *testing.T) {
	c := Consul(t)
	kv := c.Client.KV()
	if _, err := kv.Put(&consulapi.KVPair{Key: "testagent/probe", Value: []byte("v1")}, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	read := func() string {
		t.Helper()
		p, _, err := kv.Get("testagent/probe", &consulapi.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			t.Fatalf("get: %v %v", p, err)
		}
		return string(p.Value)
	}
	c.Restart()
	if got := read(); got != "v1" {
		t.Fatalf("after Restart: %q", got)
	}
	c.Kill()
	if c.Running() {
		t.Fatal("still running after Kill")
	}
	c.Start()
	if got := read(); got != "v1" {
		t.Fatalf("after Kill and Start: %q", got)
	}
}

const probeJob = `
job "probe" {
  datacenters = ["*"]
  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "1m"
    progress_deadline = "2m"
  }
  group "g" {
    volume "data" {
      type            = "host"
      source          = "probe-data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }
    service {
      name     = "probe"
      provider = "consul"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello > /data/hello && exec sleep 3600"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

job "mock" {
  datacenters = ["*"]
  update {
    min_healthy_time = "1s"
  }
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
`

// TestNomadExecHostVolumeACLConsul starts Consul and Nomad with ACLs, creates
// a dynamic host volume with the mkdir plugin, runs an exec job that writes
// into it and registers a Consul service, runs a mock_driver job, restarts
// Nomad, and finally checks that teardown leaves no process behind.
func TestNomadExecHostVolumeACLConsul(t *testing.T) {
	var dirs, allocIDs []string
	t.Run("agents", func(t *testing.T) {
		c := Consul(t)
		n := Nomad(t, WithACL(), WithConsul(c))
		dirs = append(dirs, c.Dir, n.Dir)
		if n.Token == "" {
			t.Fatal("no management token")
		}
		anon, _ := nomadapi.NewClient(&nomadapi.Config{Address: n.Addr})
		if _, _, err := anon.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("ACLs are not enforced: %v", err)
		}

		vol, _, err := n.Client.HostVolumes().Create(&nomadapi.HostVolumeCreateRequest{Volume: &nomadapi.HostVolume{
			Name:     "probe-data",
			PluginID: "mkdir",
			RequestedCapabilities: []*nomadapi.HostVolumeCapability{{
				AttachmentMode: nomadapi.HostVolumeAttachmentModeFilesystem,
				AccessMode:     nomadapi.HostVolumeAccessModeSingleNodeSingleWriter,
			}},
		}}, nil)
		if err != nil {
			t.Fatalf("create host volume: %v", err)
		}
		t.Logf("host volume %s at %s on %s", vol.Volume.ID, vol.Volume.HostPath, vol.Volume.NodeID)

		for _, src := range strings.SplitAfter(probeJob, "\n}\n") {
			if strings.TrimSpace(src) == "" {
				continue
			}
			job, err := n.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: src, Canonicalize: true})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if _, _, err := n.Client.Jobs().Register(job, nil); err != nil {
				t.Fatalf("register %s: %v", *job.ID, err)
			}
		}
		for _, id := range []string{"probe", "mock"} {
			waitHealthy(t, n, id)
		}
		// The exec task's executor and logmon are go-plugin servers. Their
		// sockets must be inside the agent's directory, which teardown
		// removes even when it has to kill them.
		if n.PluginSocketDir == "" {
			t.Fatalf("the agent's directory %s is too long for a plugin socket's path", n.Dir)
		}
		if socks := socketsIn(t, n.PluginSocketDir); len(socks) == 0 {
			t.Errorf("no plugin socket in %s while an exec task runs: the plugins put theirs elsewhere (PLUGIN_UNIX_SOCKET_DIR not passed on?)", n.PluginSocketDir)
		} else {
			t.Logf("plugin sockets in %s: %v", n.PluginSocketDir, socks)
		}
		hello := filepath.Join(vol.Volume.HostPath, "hello")
		Eventually(t, 10*time.Second, "the exec task's file in the host volume", func() error {
			b, err := os.ReadFile(hello)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "hello" {
				return fmt.Errorf("%s holds %q", hello, b)
			}
			return nil
		})
		Eventually(t, 30*time.Second, "the probe service in Consul", func() error {
			svcs, _, err := c.Client.Catalog().Service("probe", "", nil)
			if err != nil {
				return err
			}
			if len(svcs) != 1 {
				return fmt.Errorf("%d instances", len(svcs))
			}
			return nil
		})

		allocs, _, err := n.Client.Allocations().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			allocIDs = append(allocIDs, a.ID)
		}
		n.Restart()
		if len(referrers(n.Dir)) == 0 {
			t.Fatal("the exec task should survive an agent restart")
		}
		waitHealthy(t, n, "probe")
	})
	if len(allocIDs) == 0 {
		t.Fatal("no allocations seen")
	}
	for _, id := range allocIDs {
		if out, err := exec.Command("sh", "-c", "grep -l '"+id+"' /proc/[0-9]*/cgroup 2>/dev/null").Output(); len(out) > 0 {
			t.Errorf("processes of allocation %s left behind: %s %v", id, out, err)
		}
	}
	for _, d := range dirs {
		if pids := referrers(d); len(pids) > 0 {
			t.Errorf("processes left behind in %s: %v", d, pids)
		}
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s was not removed", d)
		}
	}
}

// socketsIn lists the unix sockets directly in dir.
func socketsIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var socks []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			socks = append(socks, e.Name())
		}
	}
	return socks
}

func waitHealthy(t *testing.T, n *NomadAgent, jobID string) {
	t.Helper()
	Eventually(t, 90*time.Second, jobID+" healthy", func() error {
		allocs, _, err := n.Client.Jobs().Allocations(jobID, false, nil)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" && a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy {
				return nil
			}
		}
		var s []string
		for _, a := range allocs {
			s = append(s, a.ClientStatus+"/"+a.DesiredStatus)
			for name, ts := range a.TaskStates {
				for _, e := range ts.Events {
					s = append(s, name+": "+e.Type+" "+e.DisplayMessage)
				}
			}
		}
		return fmt.Errorf("allocations: %v", s)
	})
}

// TestFreePortsDistinct: no port is handed out twice, and none is in
// Linux's ephemeral range (where an outgoing connection can take it before
// the agent binds it) or Nomad's dynamic port range.
func TestFreePortsDistinct(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 5; i++ {
		for _, p := range FreePorts(t, 4) {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if p >= 20000 {
				t.Fatalf("port %d is in Nomad's dynamic ports (20000-32000) or the ephemeral range (32768-60999)", p)
			}
		}
	}
}

// TestFreePortsClaimedAcrossProcesses: a port handed out stays claimed while
// nothing listens on it, against another process, and a port another
// process claimed is not handed out. The other process is util-linux's
// flock(1), which takes the same flock(2) lock. Without the claim, a test
// binary beside TestConsulRestart took Consul's port while Consul was down,
// and Consul could not start again.
func TestFreePortsClaimedAcrossProcesses(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Fatalf("this test runs util-linux's flock(1) as the other process: %v (apt-get install util-linux)", err)
	}
	port := FreePorts(t, 1)[0]
	// Nothing listens on it now, as when its agent is stopped.
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("port %d should be free to bind: %v", port, err)
	}
	_ = l.Close()
	claim := filepath.Join(portClaimDir, strconv.Itoa(port))
	err = exec.Command(flock, "--nonblock", "--conflict-exit-code", "75", claim, "true").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 75 {
		t.Fatalf("another process locking the claim of port %d, which this one handed out: %v; want it refused (exit 75)", port, err)
	}

	// A port another process claimed is not handed out here.
	other := -1
	for p := portRangeLow; p < portRangeHigh && other < 0; p++ {
		f, err := lockPortClaim(p)
		if err != nil {
			t.Fatal(err)
		}
		if f != nil {
			_ = f.Close() // free to claim: let flock(1) have it
			other = p
		}
	}
	if other < 0 {
		t.Fatalf("every port in [%d, %d) is claimed", portRangeLow, portRangeHigh)
	}
	holder := exec.Command(flock, "--nonblock", filepath.Join(portClaimDir, strconv.Itoa(other)), "sh", "-c", "echo held; exec sleep 60")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("starting flock(1) on port %d's claim: %v", other, err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("flock(1) did not take port %d's claim: %q, %v", other, line, err)
	}
	if ok, err := claimPort(other); err != nil || ok {
		t.Fatalf("claimPort(%d) of a port another process claimed = %v, %v; want false, nil", other, ok, err)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/tmp/a\040b\011c`); got != "/tmp/a b\tc" {
		t.Fatalf("%q", got)
	}
}

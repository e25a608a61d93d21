package testagent

import (
	"fmt"
	"sort"
	"strings"
)

// NomadConfigParams describe one local Nomad agent: the test harness's and
// `make demo`'s (scripts/demo.sh renders it with cmd/nomadconfig), so that
// both run Nomad configured the same way, from this one place.
type NomadConfigParams struct {
	// Name is the agent's and its client node's name.
	Name string
	// DataDir, HostVolumesDir and HostVolumePluginDir are the agent's dirs.
	DataDir, HostVolumesDir, HostVolumePluginDir string
	// LogLevel is Nomad's log level (INFO when empty).
	LogLevel string
	// HTTPPort, RPCPort and SerfPort are its ports on 127.0.0.1.
	HTTPPort, RPCPort, SerfPort int
	// Server runs a server (bootstrap_expect 1); Client runs a client.
	Server, Client bool
	// Servers are the server RPC addresses a client-only agent joins.
	Servers []string
	// Meta is the client node's meta (for example rack = "r0").
	Meta map[string]string
	// ConsulAddr and ConsulGRPC are Consul's HTTP and gRPC addresses.
	ConsulAddr, ConsulGRPC string
	// ACL enables Nomad ACLs.
	ACL bool
	// ChrootExtra maps more host paths into the exec driver's chroot
	// (host path -> path inside), beside the minimal one.
	ChrootExtra map[string]string
}

// NomadConfigHCL renders the agent configuration: loopback only, free
// ports, the cloud fingerprinters off, raw_exec on, and a minimal exec
// chroot (Nomad's default copies gigabytes into every allocation).
func NomadConfigHCL(p NomadConfigParams) (string, error) {
	if p.LogLevel == "" {
		p.LogLevel = "INFO"
	}
	chroot, err := MinimalChrootEnv(p.ChrootExtra)
	if err != nil {
		return "", err
	}
	server := "server {\n  enabled = false\n}"
	if p.Server {
		server = "server {\n  enabled          = true\n  bootstrap_expect = 1\n}"
	}
	servers := ""
	if len(p.Servers) > 0 {
		quoted := make([]string, len(p.Servers))
		for i, s := range p.Servers {
			quoted[i] = fmt.Sprintf("%q", s)
		}
		servers = "  servers = [" + strings.Join(quoted, ", ") + "]\n"
	}
	meta := ""
	if len(p.Meta) > 0 {
		keys := make([]string, 0, len(p.Meta))
		for k := range p.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		meta = "  meta {\n"
		for _, k := range keys {
			meta += fmt.Sprintf("    %s = %q\n", k, p.Meta[k])
		}
		meta += "  }\n"
	}
	grpc := ""
	if p.ConsulGRPC != "" {
		grpc = fmt.Sprintf("\n  grpc_address     = %q", p.ConsulGRPC)
	}
	return fmt.Sprintf(`
name                 = %q
region               = "global"
datacenter           = "dc1"
data_dir             = %q
bind_addr            = "127.0.0.1"
log_level            = %q
disable_update_check = true
leave_on_interrupt   = false
leave_on_terminate   = false
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
%s
client {
  enabled                = %t
  network_interface      = "lo"
  host_volumes_dir       = %q
  host_volume_plugin_dir = %q
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
%s%s%s}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
consul {
  address          = %q%s
  server_auto_join = false
  client_auto_join = false
}
acl {
  enabled = %t
}
`, p.Name, p.DataDir, p.LogLevel, p.HTTPPort, p.RPCPort, p.SerfPort, server, p.Client,
		p.HostVolumesDir, p.HostVolumePluginDir, servers, meta, chroot, p.ConsulAddr, grpc, p.ACL), nil
}

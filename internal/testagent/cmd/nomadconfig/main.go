// Command nomadconfig prints the configuration of a local Nomad agent
// (server and client, or either alone), as the e2e harness runs it:
// scripts/demo.sh uses it so that `make demo` and the tests configure Nomad
// from one place (testagent.NomadConfigHCL).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

func main() {
	var p testagent.NomadConfigParams
	flag.StringVar(&p.Name, "name", "demo", "agent and node name")
	flag.StringVar(&p.DataDir, "data-dir", "", "data_dir")
	flag.StringVar(&p.HostVolumesDir, "host-volumes-dir", "", "client host_volumes_dir")
	flag.StringVar(&p.HostVolumePluginDir, "host-volume-plugin-dir", "", "client host_volume_plugin_dir")
	flag.IntVar(&p.HTTPPort, "http", 4646, "HTTP port")
	flag.IntVar(&p.RPCPort, "rpc", 4647, "RPC port")
	flag.IntVar(&p.SerfPort, "serf", 4648, "Serf port")
	flag.StringVar(&p.ConsulAddr, "consul", "127.0.0.1:8500", "Consul's HTTP address")
	flag.Func("chroot", "`host=inside`: one more path in the exec driver's chroot, beside the minimal one (repeatable)", func(v string) error {
		host, inside, ok := strings.Cut(v, "=")
		if !ok || host == "" || inside == "" {
			return fmt.Errorf("want host=inside, got %q", v)
		}
		if p.ChrootExtra == nil {
			p.ChrootExtra = map[string]string{}
		}
		p.ChrootExtra[host] = inside
		return nil
	})
	flag.BoolVar(&p.Server, "server", true, "run a server")
	flag.BoolVar(&p.Client, "client", true, "run a client")
	servers := flag.String("servers", "", "comma-separated server RPC addresses a client-only agent joins")
	flag.Parse()
	if p.DataDir == "" || p.HostVolumesDir == "" || p.HostVolumePluginDir == "" {
		fmt.Fprintln(os.Stderr, "nomadconfig: -data-dir, -host-volumes-dir and -host-volume-plugin-dir are required")
		os.Exit(2)
	}
	if *servers != "" {
		p.Servers = strings.Split(*servers, ",")
	}
	if !p.Server && len(p.Servers) == 0 {
		fmt.Fprintln(os.Stderr, "nomadconfig: a client-only agent (-server=false) needs -servers")
		os.Exit(2)
	}
	conf, err := testagent.NomadConfigHCL(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nomadconfig:", err)
		os.Exit(1)
	}
	fmt.Print(conf)
}

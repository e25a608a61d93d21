// Command nomad-host-volume serves the built-in nomad-host-volume
// provisioner as an external plugin binary. The agent compiles the same code
// in; a binary of this name in plugin_dir overrides the built-in, which is
// how a patched provisioner is tried without rebuilding the agent.
//
// The binary talks to Nomad on its own, configured by the standard NOMAD_*
// environment variables (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_CACERT, …), which it
// inherits from the agent's environment; the agent's nomad {} block is not
// passed to plugins.
package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
)

func main() {
	plugin.Serve(func(log hclog.Logger) plugin.Base {
		client, err := api.NewClient(api.DefaultConfig())
		if err != nil {
			// A bad NOMAD_* variable: the plugin cannot work, and the
			// agent's launch check reports the exit with this message.
			log.Error("building the Nomad client from the NOMAD_* environment", "error", err)
			panic(err)
		}
		return hostvolume.New(nomad.NewAPI(client), log.Named(hostvolume.Name))
	})
}

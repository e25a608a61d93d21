package testagent

import (
	"os"
	"path/filepath"
)

// SizedHostVolumePlugin is a dynamic host volume plugin that gives every
// volume exactly capacity_min, as a quota or LVM plugin would: Nomad's own
// mkdir reports no size at all, so a real expansion needs one like this.
// Nomad expands a volume by calling create again with the new size, so
// create is idempotent: the directory and what is in it stay. It refuses
// nothing (Nomad's checks are what tests are about) and appends each
// create and delete to <plugin path>.log as "create <volume ID> <bytes>"
// or "delete <volume ID>", so a test can count the expansions the plugin
// itself saw. A client that restarts calls create again for each volume it
// restores. The directory is writable by anyone because exec tasks run as
// nobody.
const SizedHostVolumePlugin = `#!/bin/sh
case "$1" in
fingerprint) echo '{"version": "0.0.1"}' ;;
create)
  mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" && chmod 0777 "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" || exit 1
  echo "create $DHV_VOLUME_ID $DHV_CAPACITY_MIN_BYTES" >> "$0.log"
  echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": $DHV_CAPACITY_MIN_BYTES}" ;;
delete)
  rm -rf "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID"
  echo "delete $DHV_VOLUME_ID" >> "$0.log" ;;
*) echo "unknown operation $1" >&2; exit 1 ;;
esac
`

// WithHostVolumePlugin installs script as the executable host volume plugin
// id in the client's host_volume_plugin_dir before the agent starts. A
// client fingerprints its plugins when it starts, and placement asks for
// ${attr.plugins.host_volume.<id>.version}: installed this way the plugin
// is usable at once, where one added later needs a restart of the client.
func WithHostVolumePlugin(id, script string) NomadOption {
	return func(c *nomadConfig) {
		if c.hostVolumePlugins == nil {
			c.hostVolumePlugins = map[string]string{}
		}
		c.hostVolumePlugins[id] = script
	}
}

// HostVolumePluginLog is where SizedHostVolumePlugin, installed as id,
// logs its calls.
func (a *NomadAgent) HostVolumePluginLog(id string) string {
	return filepath.Join(a.HostVolumePluginDir, id+".log")
}

// installHostVolumePlugins writes the plugins of WithHostVolumePlugin.
func (a *NomadAgent) installHostVolumePlugins() error {
	for id, script := range a.cfg.hostVolumePlugins {
		if err := os.WriteFile(filepath.Join(a.HostVolumePluginDir, id), []byte(script), 0o755); err != nil {
			return err
		}
	}
	return nil
}

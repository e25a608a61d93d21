package command

import (
	"runtime"
	"strings"
)

// Version and GitCommit identify the build. Release builds set them with
// -ldflags "-X github.com/nomad-statefulset/nomad-statefulset/command.Version=v1.2.3
// -X github.com/nomad-statefulset/nomad-statefulset/command.GitCommit=abc123".
var (
	Version   = "0.1.0-dev"
	GitCommit = ""
)

// VersionString is the one-line version, as printed by `version` and by
// `nomad-statefulset -version`: the version, then the commit and the Go
// version it was built from.
func VersionString() string {
	s := "nomad-statefulset v" + strings.TrimPrefix(Version, "v") + " ("
	if GitCommit != "" {
		s += "commit " + GitCommit + ", "
	}
	return s + runtime.Version() + ")"
}

// VersionCommand is `nomad-statefulset version`.
type VersionCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *VersionCommand) Synopsis() string {
	return "Print the version"
}

// Help implements cli.Command.
func (c *VersionCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset version [options]

  Prints the version of this nomad-statefulset binary.

Examples:

  $ nomad-statefulset version
  $ nomad-statefulset version -json | jq -r .version

` + commonOptionsHelp + exitCodesHelp)
}

// versionOutput is the -json output of version.
type versionOutput struct {
	Version   string `json:"version"`
	GitCommit string `json:"git_commit,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Run implements cli.Command.
func (c *VersionCommand) Run(args []string) int {
	f := c.FlagSet("version", FlagSetCommon)
	if _, code, ok := c.parse("version", f, args, 0, 0, "nomad-statefulset version [options]"); !ok {
		return code
	}
	if c.JSON() {
		return c.outputJSON(versionOutput{
			Version: strings.TrimPrefix(Version, "v"), GitCommit: GitCommit,
			GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		})
	}
	c.UI.Output(VersionString())
	return ExitOK
}

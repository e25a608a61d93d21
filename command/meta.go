// Package command holds the nomad-statefulset CLI commands, in the style of
// the nomad CLI: each command is a hashicorp/cli Command with its own flag
// set, help text with examples, and documented exit codes.
//
// Reads come from the agent's HTTP API (package client). Writes go to the
// parent job in Nomad, always as a check-and-set on its JobModifyIndex, so
// that Nomad stays the single source of truth.
package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// Exit codes. They are part of the CLI contract: scripts and e2e tests
// branch on them, so a code never changes meaning.
const (
	// ExitOK means the command did what was asked.
	ExitOK = 0
	// ExitError is any failure without a more specific code, and an invalid
	// job for validate.
	ExitError = 1
	// ExitUsage means bad flags or arguments; nothing was read or written.
	ExitUsage = 2
	// ExitConflict means a check-and-set write lost a race: the parent job
	// changed between read and write. Running the command again is safe.
	ExitConflict = 3
	// ExitStuck means rollout status saw RolloutStuck, or its -timeout passed.
	ExitStuck = 4
	// ExitUnreachable means the agent (for reads) or Nomad (for writes and
	// validate) could not be reached at all.
	ExitUnreachable = 5
	// ExitNotFound means the set or its parent job does not exist.
	ExitNotFound = 6
)

// exitCodesHelp is appended to every command's help so each one documents
// the codes it can return in the same words.
const exitCodesHelp = `
Exit Codes:

  0  success
  1  error (for validate: the job is invalid)
  2  usage error: bad flags or arguments
  3  conflict: the parent job changed between read and write; run again
  4  rollout stuck (RolloutStuck condition) or -timeout reached
  5  the agent or Nomad could not be reached
  6  the set or its parent job was not found`

// FlagSetFlags selects which shared flag groups Meta.FlagSet adds.
type FlagSetFlags uint

const (
	// FlagSetNone adds no shared flags; AgentCommand uses it and adds its own.
	FlagSetNone FlagSetFlags = 0
	// FlagSetCommon adds -namespace and -json, which every CLI verb takes.
	FlagSetCommon FlagSetFlags = 1 << iota
	// FlagSetAgent adds -address, for commands that read from the agent.
	FlagSetAgent
	// FlagSetNomad adds -nomad-address, -token, -region and the TLS flags,
	// for commands that talk to Nomad.
	FlagSetNomad
	// FlagSetAll is every shared flag group.
	FlagSetAll = FlagSetCommon | FlagSetAgent | FlagSetNomad
)

// Meta is embedded by every command, AgentCommand included. It holds the UI
// and the flags shared between commands, and builds the API clients from them.
type Meta struct {
	// UI receives all output, one whole line at a time: results go to
	// Output, problems to Error. Nothing assumes a terminal, so output can
	// be piped and read line by line by scripts.
	UI cli.Ui

	// Now returns the current time. Tests set it so that relative times
	// ("2m ago") in golden files are stable; nil means time.Now.
	Now func() time.Time

	// Shared flag values, filled by the flag set from FlagSet.
	address   string
	namespace string
	json      bool
	nomad     nomadFlags
}

// nomadFlags mirror the nomad CLI's connection flags. Empty values fall
// back to the NOMAD_* environment, which api.DefaultConfig reads.
type nomadFlags struct {
	address       string
	token         string
	region        string
	caCert        string
	caPath        string
	clientCert    string
	clientKey     string
	tlsServerName string
	tlsSkipVerify bool
}

// FlagSet returns a flag set for the command called name with the shared
// flag groups selected by fs. Parse errors are returned, never printed by
// the flag package, so commands report them in their own words.
func (m *Meta) FlagSet(name string, fs FlagSetFlags) *flag.FlagSet {
	f := flag.NewFlagSet(name, flag.ContinueOnError)
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	if fs&FlagSetCommon != 0 {
		f.StringVar(&m.namespace, "namespace", "", "")
		f.BoolVar(&m.json, "json", false, "")
	}
	if fs&FlagSetAgent != 0 {
		f.StringVar(&m.address, "address", "", "")
		if fs&FlagSetNomad == 0 {
			// The token the agent is read with; FlagSetNomad's -token
			// is the same value.
			f.StringVar(&m.nomad.token, "token", "", "")
		}
	}
	if fs&FlagSetNomad != 0 {
		f.StringVar(&m.nomad.address, "nomad-address", "", "")
		f.StringVar(&m.nomad.token, "token", "", "")
		f.StringVar(&m.nomad.region, "region", "", "")
		f.StringVar(&m.nomad.caCert, "ca-cert", "", "")
		f.StringVar(&m.nomad.caPath, "ca-path", "", "")
		f.StringVar(&m.nomad.clientCert, "client-cert", "", "")
		f.StringVar(&m.nomad.clientKey, "client-key", "", "")
		f.StringVar(&m.nomad.tlsServerName, "tls-server-name", "", "")
		f.BoolVar(&m.nomad.tlsSkipVerify, "tls-skip-verify", false, "")
	}
	return f
}

// Namespace is the set's Nomad namespace: -namespace, else NOMAD_NAMESPACE,
// else "default" — the same order the nomad CLI uses, so a set is found in
// the namespace its parent job was run in.
func (m *Meta) Namespace() string {
	if m.namespace != "" {
		return m.namespace
	}
	if ns := os.Getenv("NOMAD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// JSON reports whether -json was given.
func (m *Meta) JSON() bool { return m.json }

// now returns the current time through the injectable clock.
func (m *Meta) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// AgentAddress is the agent's address: -address, else
// NOMAD_STATEFULSET_ADDR, else client.DefaultAddress.
func (m *Meta) AgentAddress() string {
	if m.address != "" {
		return m.address
	}
	if a := os.Getenv(client.AddressEnv); a != "" {
		return a
	}
	return client.DefaultAddress
}

// AgentClient returns a client for the agent's HTTP API: at AgentAddress,
// sending -token or else NOMAD_TOKEN, with the NOMAD_STATEFULSET_CACERT,
// _CLIENT_CERT, _CLIENT_KEY and _SKIP_VERIFY TLS settings.
func (m *Meta) AgentClient() (*client.Client, error) {
	cfg, err := client.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("configuring the agent client: %w", err)
	}
	cfg.Address = m.AgentAddress()
	if m.nomad.token != "" {
		cfg.Token = m.nomad.token
	}
	c, err := client.NewWithConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("configuring the agent client: %w", err)
	}
	return c, nil
}

// NomadConfig is the Nomad API configuration: the NOMAD_* environment,
// overridden by the flags that were given.
func (m *Meta) NomadConfig() *api.Config {
	cfg := api.DefaultConfig()
	if m.nomad.address != "" {
		cfg.Address = m.nomad.address
	}
	if m.nomad.token != "" {
		cfg.SecretID = m.nomad.token
	}
	if m.nomad.region != "" {
		cfg.Region = m.nomad.region
	}
	cfg.Namespace = m.Namespace()
	t := cfg.TLSConfig
	if m.nomad.caCert != "" {
		t.CACert = m.nomad.caCert
	}
	if m.nomad.caPath != "" {
		t.CAPath = m.nomad.caPath
	}
	if m.nomad.clientCert != "" {
		t.ClientCert = m.nomad.clientCert
	}
	if m.nomad.clientKey != "" {
		t.ClientKey = m.nomad.clientKey
	}
	if m.nomad.tlsServerName != "" {
		t.TLSServerName = m.nomad.tlsServerName
	}
	if m.nomad.tlsSkipVerify {
		t.Insecure = true
	}
	return cfg
}

// NomadClient returns a Nomad API client from NomadConfig.
func (m *Meta) NomadClient() (*api.Client, error) {
	c, err := api.NewClient(m.NomadConfig())
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return c, nil
}

// parseArgs parses flags and positional arguments in any order, so that
// `status web -json` works as well as `status -json web`: operators type
// flags at the end, as they do with kubectl. "--" ends flag parsing.
// It returns the positional arguments.
func parseArgs(f *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag.Parse consumed a "--" if it stopped on one; everything after
		// it is positional.
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError prints a usage problem and where to find help, and returns
// ExitUsage.
func (m *Meta) usageError(name, format string, a ...any) int {
	m.UI.Error("Error: " + fmt.Sprintf(format, a...))
	m.UI.Error(fmt.Sprintf("Run 'nomad-statefulset %s -help' for usage.", name))
	return ExitUsage
}

// parse parses args with f and checks the positional count is within
// [min, max]. It reports problems itself; ok false means return code.
func (m *Meta) parse(name string, f *flag.FlagSet, args []string, minArgs, maxArgs int, usage string) (pos []string, code int, ok bool) {
	pos, err := parseArgs(f, args)
	if errors.Is(err, flag.ErrHelp) {
		// hashicorp/cli answers -h/-help itself before Run is called; this
		// is only reached after "--", where help cannot be meant literally.
		return nil, m.usageError(name, "unexpected help flag; usage: %s", usage), false
	}
	if err != nil {
		return nil, m.usageError(name, "%v", err), false
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		switch {
		case minArgs == maxArgs && minArgs == 0:
			return nil, m.usageError(name, "this command takes no arguments; usage: %s", usage), false
		case len(pos) < minArgs:
			return nil, m.usageError(name, "missing arguments; usage: %s", usage), false
		default:
			return nil, m.usageError(name, "too many arguments (%s); usage: %s", strings.Join(pos, " "), usage), false
		}
	}
	// "*" means every namespace, which only a listing can show; a set
	// lives in exactly one, and Nomad would refuse a write to "*".
	if strings.Contains(m.namespace, "*") && minArgs > 0 {
		return nil, m.usageError(name, "-namespace %q names no single namespace; give the set's namespace", m.namespace), false
	}
	return pos, ExitOK, true
}

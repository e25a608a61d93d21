package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/agent"
	"github.com/nomad-statefulset/nomad-statefulset/agent/config"
	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/backend/bolt"
	"github.com/nomad-statefulset/nomad-statefulset/backend/consul"
	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/plugin"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/builtin/hostvolume"
	"github.com/nomad-statefulset/nomad-statefulset/plugin/manager"
)

// AgentCommand runs the daemon.
type AgentCommand struct {
	Meta
}

// Synopsis implements cli.Command.
func (c *AgentCommand) Synopsis() string { return "Run the nomad-statefulset daemon" }

// Help implements cli.Command.
func (c *AgentCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset agent [options]

  Runs the daemon. It watches Nomad for jobs annotated with
  meta { statefulset = "true" } and runs each as a StatefulSet: one child job
  per ordinal, per-ordinal host volumes, ordered or parallel pod management,
  rolling updates, and revision history kept in Consul KV (or, with -dev, in
  a local embedded store).

  The configuration is HCL. -config may be given several times, and may name
  a directory, whose *.hcl files are read in name order; later values win.
  The NOMAD_* and CONSUL_* environment variables are honoured.

  SIGINT and SIGTERM stop the agent after the effect in flight has finished.
  SIGHUP reads the configuration again. What takes effect at once: the log
  level, plugin_dir, and the plugin, hook and volume_provisioner blocks (a
  changed or new plugin is launched, the others get their new config, and
  the storage classes and hooks are replaced); every other setting only at
  the next start. A new configuration that is invalid, or whose plugins do
  not launch, is logged and the running one kept.

  The agent takes no -json: set log_json = true in the configuration for
  JSON logs.

Options:

  -config=<path>
    A config file or directory. Repeatable.

  -dev
    Development mode: no Consul, state in an embedded store under the data
    directory, no leader election.

Examples:

  $ nomad-statefulset agent -dev
  $ nomad-statefulset agent -config /etc/nomad-statefulset.d/
` + exitCodesHelp)
}

// Run implements cli.Command.
func (c *AgentCommand) Run(args []string) int {
	var paths stringList
	var dev bool
	f := c.FlagSet("agent", FlagSetNone)
	f.Var(&paths, "config", "")
	f.BoolVar(&dev, "dev", false, "")
	if err := f.Parse(args); err != nil {
		c.UI.Error(fmt.Sprintf("Error parsing flags: %v\n\n%s", err, c.Help()))
		return ExitUsage
	}
	if f.NArg() > 0 {
		c.UI.Error(fmt.Sprintf("The agent takes no arguments, got %q.\n\n%s", f.Args(), c.Help()))
		return ExitUsage
	}
	load := func() (*config.Config, error) {
		cfg, err := config.Load(paths...)
		if err != nil {
			return nil, err
		}
		if dev {
			cfg.ApplyDev()
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			// Source snippets under each problem, tokens masked.
			c.UI.Error("Invalid configuration:")
			_ = ce.WriteDiagnostics(os.Stderr, 78, false)
			return ExitError
		}
		c.UI.Error(fmt.Sprintf("Invalid configuration:\n%v", err))
		return ExitError
	}
	level := hclog.LevelFromString(cfg.LogLevel)
	logger := hclog.New(&hclog.LoggerOptions{
		Name: "nomad-statefulset", Level: level, JSONFormat: cfg.LogJSON, Output: os.Stderr,
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runAgent(ctx, cfg, logger, load); err != nil {
		logger.Error("agent stopped with an error", "error", err)
		return ExitError
	}
	logger.Info("agent stopped")
	return ExitOK
}

// runAgent builds the backends from cfg and runs the agent until ctx is done.
func runAgent(ctx context.Context, cfg *config.Config, logger hclog.Logger, reload func() (*config.Config, error)) error {
	nc, err := newNomadClient(cfg)
	if err != nil {
		return fmt.Errorf("configuring the Nomad client: %w", err)
	}
	store, elector, err := buildState(cfg, logger)
	if err != nil {
		return err
	}
	defer store.Close()

	health, err := consulHealth(cfg)
	if err != nil {
		return err
	}
	// The agent sees Nomad only through the Cluster; the built-in host
	// volume provisioner calls the same client, its writes paced with the
	// agent's (the autoscaler's setupPlugins wires its built-ins the same
	// way).
	cluster := nomad.NewCluster(nomad.NewAPI(nc), nomad.WithEventBufferSize(cfg.Nomad.EventBufferSize), nomad.WithLogger(logger.Named("watcher")))
	a, err := agent.New(agent.Options{
		Logger:         logger,
		Nomad:          cluster,
		PluginBuiltins: map[string]plugin.Factory{hostvolume.Name: hostvolume.Factory(cluster.API())},
		Store:          store,
		Elector:        elector,
		Workers:        cfg.Workers,
		ResyncInterval: cfg.ResyncInterval,
		HTTPAddr:       cfg.HTTP.Address,
		HTTPTLS:        cfg.HTTP.TLS,
		// The HTTP API asks Nomad, over the daemon's own client but with
		// each caller's token, what that token may read.
		Authorizer:       nomad.NewAuthorizer(nc),
		AnonymousMetrics: cfg.Telemetry.PrometheusAnonymous,
		EnableDebug:      cfg.HTTP.EnableDebug,
		DisableMetrics:   !cfg.Telemetry.PrometheusMetrics,
		Plugins:          manager.ConfigOf(cfg),
		ConsulHealth:     health,
	})
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				next, err := reload()
				if err != nil {
					logger.Error("not reloading: the new configuration is invalid; keeping the old one", "error", err)
					continue
				}
				logger.SetLevel(hclog.LevelFromString(next.LogLevel))
				if err := a.ReloadPlugins(ctx, manager.ConfigOf(next)); err != nil {
					logger.Error("reloading plugins; keeping the running ones", "error", err)
				}
				logger.Info("configuration reloaded", "log_level", next.LogLevel)
			}
		}
	}()

	logger.Info("agent started", "http", a.HTTPAddr(), "http_tls", cfg.HTTP.TLS.Enabled(), "nomad", nomadAPIConfig(cfg).Address,
		"state", string(cfg.State.Backend), "high_availability", cfg.HighAvailability.Enabled)
	return a.Run(ctx)
}

// The HTTP API's authorizer is backend/nomad's.
var _ agent.Authorizer = (*nomad.Authorizer)(nil)

// buildState opens the state store and the elector the config asks for.
func buildState(cfg *config.Config, logger hclog.Logger) (backend.Store, backend.Elector, error) {
	if cfg.State.Backend == config.StateEmbedded {
		if err := os.MkdirAll(filepath.Dir(cfg.State.Path), 0o700); err != nil {
			return nil, nil, fmt.Errorf("creating the state directory: %w", err)
		}
		s, err := bolt.Open(cfg.State.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("opening the embedded state store %s: %w", cfg.State.Path, err)
		}
		return s, backend.AlwaysLeader{}, nil
	}
	cc, err := consulClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.HighAvailability.Enabled {
		return consul.NewStore(cc, cfg.Consul.KVPrefix, nil, logger), backend.AlwaysLeader{}, nil
	}
	ha := cfg.HighAvailability
	ecfg := consul.ElectorConfig{
		LockKey: ha.LockKey, SessionTTL: ha.SessionTTL, LockDelay: ha.LockDelay,
		MonitorRetries: ha.MonitorRetries, MonitorRetryTime: ha.MonitorRetryTime,
		StopTimeout: agent.StopTimeout,
	}.WithDefaults()
	if err := ecfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("configuring leader election: %w", err)
	}
	el := consul.NewElector(cc, ecfg, logger)
	return consul.NewStore(cc, cfg.Consul.KVPrefix, el.Fence(), logger), el, nil
}

// consulHealth returns where pod readiness reads Consul checks from: the
// configured Consul, unless the agent runs without one (-dev, or an
// embedded store with no Consul address given), when task states alone
// decide.
func consulHealth(cfg *config.Config) (consul.HealthAPI, error) {
	if cfg.Dev || (cfg.State.Backend == config.StateEmbedded && !cfg.ConsulAddressSet()) {
		return nil, nil
	}
	cc, err := consulClient(cfg)
	if err != nil {
		return nil, err
	}
	return consul.NewHealthAPI(cc), nil
}

func consulClient(cfg *config.Config) (*consulapi.Client, error) {
	cc, err := consulapi.NewClient(consulAPIConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("configuring the Consul client: %w", err)
	}
	return cc, nil
}

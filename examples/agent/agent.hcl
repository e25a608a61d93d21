# nomad-statefulset agent configuration: every setting, with its default.
#
#   nomad-statefulset agent -config /etc/nomad-statefulset.d/
#
# -config takes a file or a directory (all *.hcl files in it, sorted by name)
# and may be given several times. Later files override earlier ones attribute
# by attribute, so a base file plus small override files works, and a bool
# that one file sets to true a later file can set back to false.
#
# Precedence, lowest first: built-in default < environment variable < file.
# Settings marked "env:" below default to that variable when no file sets
# them; they are commented out here so that the environment still applies to
# a copy of this file. env("NAME") reads any variable explicitly; it fails
# when NAME is unset, and env("NAME", "fallback") does not.
#
# Durations are strings with a unit: "500ms", "30s", "5m", "1h30m".

# Log level: trace, debug, info, warn, error or off.
log_level = "info"

# Log JSON lines instead of text.
log_json = false

# Local directory for the embedded store and external plugins.
data_dir = "/var/lib/nomad-statefulset"

# Reconcile workers: how many sets are reconciled at the same time. One set
# is never reconciled by two workers at once. A worker mostly waits on
# Nomad's and Consul's writes; with hundreds of sets changing at once, more
# workers get their pods to Nomad sooner.
workers = 16

# Full re-list of Nomad, as a safety net under the event stream (at least 1s).
resync_interval = "5m"

# External plugin binaries. Default: <data_dir>/plugins.
plugin_dir = "/var/lib/nomad-statefulset/plugins"

nomad {
  # env: NOMAD_ADDR. A URL: http://, https:// or unix://.
  # address = "http://127.0.0.1:4646"

  # env: NOMAD_TOKEN. Never logged. The minimal ACL policy is in
  # docs/operations.md ("The daemon's tokens").
  # token = "00000000-0000-0000-0000-000000000000"

  # env: NOMAD_REGION. Empty: the region of the agent we talk to.
  # region = "global"

  # env: NOMAD_NAMESPACE. The client's default namespace.
  # namespace = "default"

  # TLS. env: NOMAD_CACERT, NOMAD_CAPATH, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY,
  # NOMAD_TLS_SERVER_NAME, NOMAD_SKIP_VERIFY. client_cert and client_key go
  # together.
  # ca_cert         = "/etc/nomad.d/tls/nomad-agent-ca.pem"
  # ca_path         = "/etc/nomad.d/tls/ca.d"
  # client_cert     = "/etc/nomad.d/tls/global-cli-nomad.pem"
  # client_key      = "/etc/nomad.d/tls/global-cli-nomad-key.pem"
  # tls_server_name = "server.global.nomad"
  # skip_verify     = false

  # The servers' event_buffer_size (Nomad's default: 100). The daemon's
  # writes wait while its event stream trails them, the writes still in
  # flight counted, by a quarter of it, so that a burst of writes does not
  # make Nomad drop the stream.
  # event_buffer_size = 100
}

consul {
  # env: CONSUL_HTTP_ADDR. host:port, or a URL (https:// turns TLS on).
  # address = "127.0.0.1:8500"

  # env: CONSUL_HTTP_TOKEN / CONSUL_HTTP_TOKEN_FILE. Set one or the other.
  # The token needs key write on kv_prefix and session write.
  # token      = "00000000-0000-0000-0000-000000000000"
  # token_file = "/etc/nomad-statefulset.d/consul.token"

  # Empty: the datacenter of the agent we talk to.
  datacenter = ""

  # TLS. env: CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CAPATH,
  # CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME,
  # CONSUL_HTTP_SSL_VERIFY (false sets insecure_skip_verify).
  # ssl                  = true
  # ca_file              = "/etc/consul.d/tls/consul-agent-ca.pem"
  # ca_path              = "/etc/consul.d/tls/ca.d"
  # cert_file            = "/etc/consul.d/tls/dc1-client-consul-0.pem"
  # key_file             = "/etc/consul.d/tls/dc1-client-consul-0-key.pem"
  # tls_server_name      = "server.dc1.consul"
  # insecure_skip_verify = false

  # Revisions, status and the leader key live under this prefix.
  kv_prefix = "nomad-statefulset"
}

# Leader election through a Consul lock. Any number of agents may run; one
# acts. Default: enabled with the consul state backend, off with embedded.
#
# Safety: a leader cut off from Consul gives up after
# monitor_retries x monitor_retry_time (3 x 2s = 6s), before its session can
# expire (session_ttl 15s), and nobody else can take the lock until
# lock_delay (15s) after that. The product must stay below the lease,
# min(session_ttl, lock_delay - 6s) = 9s with these values.
high_availability {
  enabled = true

  # Default: <kv_prefix>/leader.
  lock_key = "nomad-statefulset/leader"

  # Consul allows 10s to 24h.
  session_ttl = "15s"

  # Consul allows 0s to 60s.
  lock_delay = "15s"

  monitor_retries    = 3
  monitor_retry_time = "2s"
}

# The agent's HTTP API: /v1/health, /v1/metrics, /v1/statefulsets, …
http {
  address = "127.0.0.1:4650"

  # Serve /debug/pprof/.
  enable_debug = false

  # TLS, with the names of Nomad's tls block: on when cert_file is set.
  # See docs/security.md.
  tls {
    # cert_file           = "/etc/nomad-statefulset.d/tls/api.pem"
    # key_file            = "/etc/nomad-statefulset.d/tls/api-key.pem"
    # ca_file             = "/etc/nomad-statefulset.d/tls/ca.pem"
    # verify_https_client = false
  }
}

telemetry {
  # Serve /v1/metrics in Prometheus format.
  prometheus_metrics = true
  # With Nomad's ACLs on, serve /v1/metrics without a token too.
  # prometheus_anonymous = false
}

state {
  # "consul" (shared, needed for high availability) or "embedded" (a local
  # file, for -dev and a single agent without Consul; -dev forces it).
  backend = "consul"

  # The embedded store's file. Default: <data_dir>/state.db.
  path = "/var/lib/nomad-statefulset/state.db"
}

# The default storage class: which plugin makes the per-ordinal volumes,
# and the settings passed with every create. Setting config replaces the
# whole map.
volume_provisioner {
  plugin = "nomad-host-volume"

  # Which keys mean what is up to the plugin. For nomad-host-volume:
  # plugin_id (the Nomad dynamic host volume plugin), and capacity_min and
  # capacity_max ("10GiB") for a plugin that honours a size. Nomad's own
  # mkdir plugin honours none (its volumes are plain directories on the
  # node's disk), so ask it for none. Node pool and constraints come from
  # the job.
  config = {
    plugin_id = "mkdir"
  }
}

# Everything below is commented out: it needs something that a stock Nomad
# cluster and this binary do not have. Uncomment what you have installed.

# A storage class: a named volume_provisioner block. A claim picks it with
# statefulset_claim_<claim>_class = "fast" in its job; a claim that names
# none gets the unnamed block above, the default class. A class has its
# own plugin and settings and takes nothing from the unnamed block. On
# nomad-host-volume a class names a host volume plugin other than mkdir,
# because its volumes record their class in their parameters and mkdir
# refuses parameters it does not know: install that plugin in every
# client's host_volume_plugin_dir first ("lvm-thin" stands for yours; Nomad
# ships none by that name). A claim's own size
# (statefulset_claim_<claim>_capacity) wins over capacity_min and
# capacity_max here.
#
# volume_provisioner "fast" {
#   plugin = "nomad-host-volume"
#   config = {
#     plugin_id    = "lvm-thin"
#     capacity_min = "10GiB"
#   }
# }

# A plugin instance. The label is the name hooks and volume_provisioner use;
# driver is a built-in (nomad-host-volume, always declared, is the only one)
# or an executable in plugin_dir (default: the label). Several instances
# may share a driver with different configs. A block for the same label in
# a later file overrides attributes one by one. A driver that is neither
# built in nor in plugin_dir stops the agent at start ("unknown driver").
# This one is the example hook plugin of this repository, built into
# plugin_dir with
#
#   go build -o /var/lib/nomad-statefulset/plugins/predelete-command \
#     ./examples/plugins/predelete-command
#
# plugin "drain" {
#   driver = "predelete-command"
#
#   # Command-line arguments of the plugin binary.
#   args = []
#
#   # Handed to the plugin at launch and on SIGHUP. Strings; numbers and
#   # bools are converted. Values whose key looks secret are redacted in
#   # logs. For predelete-command: a command (exit 0 = done) or a url to
#   # POST the pod to (2xx = done), and retry_after.
#   config = {
#     command     = "/usr/local/bin/drain-replica \"$NSS_POD\""
#     retry_after = "15s"
#   }
# }

# A lifecycle hook: call plugin "drain" before a pod is deleted. A hook that
# is pending holds only that pod's step, never other sets. Mind what
# "block" means for pre_delete: every scale-down, and every deletion of a
# set, waits until the hook succeeds, so a hook whose command or URL is
# not there holds them for ever.
#
# hook "drain-before-delete" {
#   plugin = "drain"
#
#   # pre_delete, post_ready, pre_update.
#   events = ["pre_delete"]
#
#   # One call's time limit.
#   timeout = "30s"
#
#   # "block": hold the step until the hook succeeds (default).
#   # "ignore": log the failure and go on.
#   failure_policy = "block"
# }

# Production shape: several agents behind one Consul, TLS and ACLs on both
# Nomad and Consul. Tokens come from the environment (NOMAD_TOKEN,
# CONSUL_HTTP_TOKEN_FILE), never from this file. Everything not set here
# has its default; see agent.hcl for all settings.

log_json = true

nomad {
  address         = "https://nomad.service.consul:4646"
  ca_cert         = "/etc/nomad-statefulset.d/tls/nomad-ca.pem"
  client_cert     = "/etc/nomad-statefulset.d/tls/nomad-cli.pem"
  client_key      = "/etc/nomad-statefulset.d/tls/nomad-cli-key.pem"
  tls_server_name = "server.global.nomad"
}

consul {
  address         = "https://127.0.0.1:8501"
  ca_file         = "/etc/nomad-statefulset.d/tls/consul-ca.pem"
  cert_file       = "/etc/nomad-statefulset.d/tls/consul-cli.pem"
  key_file        = "/etc/nomad-statefulset.d/tls/consul-cli-key.pem"
  tls_server_name = "server.dc1.consul"
  kv_prefix       = "nomad-statefulset/prod"
}

high_availability {
  # lock_key follows kv_prefix: nomad-statefulset/prod/leader.
  #
  # Rides out a longer Consul hiccup than the defaults: the leader steps
  # down after 4 x 2s = 8s of failed reads of its lock (default 3 x 2s).
  # That must stay below the lease, min(session_ttl, lock_delay - 6s) =
  # min(15s, 9s) = 9s, which the agent checks at start. Raise lock_delay to
  # go further. A longer session_ttl buys nothing here and makes failover
  # slower: after a leader dies, the others wait for its session to expire
  # (session_ttl; Consul may take up to twice that) and then lock_delay.
  session_ttl     = "15s"
  lock_delay      = "15s"
  monitor_retries = 4
}

http {
  # Loopback only, the default. The API serves every set's status and
  # revision history: bind another address (for a load balancer's probe of
  # /v1/health, say) only with the listener's TLS and Nomad's ACLs on, as
  # docs/security.md describes.
  address = "127.0.0.1:4650"
}

# Nomad's mkdir plugin makes plain directories and honours no capacity, so
# none is asked of it; a claim's size (statefulset_claim_<claim>_capacity)
# needs a host volume plugin that enforces one, set as plugin_id here.
volume_provisioner {
  plugin = "nomad-host-volume"
  config = {
    plugin_id = "mkdir"
  }
}

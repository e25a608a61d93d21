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
  # Faster failover than the defaults; 4 x 2s = 8s stays below 20s.
  session_ttl     = "20s"
  lock_delay      = "15s"
  monitor_retries = 4
}

http {
  # Listen on all interfaces so a load balancer can probe /v1/health.
  address = "0.0.0.0:4650"
}

volume_provisioner {
  plugin = "nomad-host-volume"
  config = {
    plugin_id    = "mkdir"
    capacity_min = "10GiB"
    capacity_max = "20GiB"
  }
}

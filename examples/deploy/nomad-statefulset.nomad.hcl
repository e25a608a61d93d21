# nomad-statefulset, run as a Nomad job (see docs/operations.md, "Deploying").
#
# Two agents elect one leader through a Consul lock. Each authenticates to
# Nomad with its workload identity through the Task API socket: no Nomad
# token is written anywhere. Bind the ACL policy beside this file to the job:
#
#   nomad acl policy apply -namespace default -job nomad-statefulset \
#     nomad-statefulset nomad-statefulset.policy.hcl
#
# The Consul token (KV under kv_prefix, sessions, and the service health the
# readiness checks read) comes from a Nomad Variable the job's identity may
# read, rendered into the task's environment by a template:
#
#   nomad var put nomad/jobs/nomad-statefulset consul_token=<secret id>
#
# Then: nomad job run -var version=<release> nomad-statefulset.nomad.hcl

variable "version" {
  description = "The release to run (the <version> of the release archive)."
  type        = string
  default     = "0.1.0"
}

variable "release_url" {
  description = "Where the release archives are."
  type        = string
  default     = "https://github.com/nomad-statefulset/nomad-statefulset/releases/download"
}

variable "consul_addr" {
  description = "Consul's HTTP address, as seen from the agents' nodes."
  type        = string
  default     = "127.0.0.1:8500"
}

job "nomad-statefulset" {
  type = "service"

  group "agent" {
    count = 2

    # One agent per node: losing a node never takes both down.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # A rolling update replaces one agent at a time; the follower goes
    # first whenever it is the higher index, and a leader that stops
    # cleanly releases the lock at once.
    update {
      max_parallel     = 1
      min_healthy_time = "10s"
    }

    network {
      port "http" {}
    }

    service {
      name     = "nomad-statefulset"
      port     = "http"
      provider = "consul"
      tags     = ["metrics"] # /v1/metrics on this port, Prometheus format

      check {
        name     = "health"
        type     = "http"
        path     = "/v1/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "agent" {
      driver = "exec"

      artifact {
        source = "${var.release_url}/v${var.version}/nomad-statefulset_${var.version}_linux_amd64.tar.gz"
      }

      # The workload identity as NOMAD_TOKEN; NOMAD_ADDR points at the Task
      # API socket, which accepts it. Nomad renews it; the agent reads the
      # token from its environment at start and never needs to renew it.
      identity {
        env = true
      }

      env {
        NOMAD_ADDR       = "unix://${NOMAD_SECRETS_DIR}/api.sock"
        CONSUL_HTTP_ADDR = var.consul_addr
      }

      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/nomad-statefulset" }}CONSUL_HTTP_TOKEN={{ .consul_token }}{{ end }}
        EOT
        destination = "${NOMAD_SECRETS_DIR}/consul.env"
        env         = true
      }

      template {
        data        = <<-EOT
          data_dir = "{{ env "NOMAD_TASK_DIR" }}/data"

          http {
            address = "{{ env "NOMAD_ADDR_http" }}"
          }

          high_availability {
            enabled = true
          }
        EOT
        destination = "local/agent.hcl"
      }

      config {
        command = "nomad-statefulset"
        args    = ["agent", "-config", "local/agent.hcl"]
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}

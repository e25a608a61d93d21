# A three-replica web set, the StatefulSet "hello world": each pod web-0,
# web-1, web-2 gets its own host volume data-web-<n> mounted at /data, the
# env STATEFULSET_POD_NAME, and the service tag web-<n>.
#
# Runs on `nomad agent -dev` with the exec driver and needs no Consul: the
# service uses Nomad's native service discovery (provider = "nomad"). With
# provider = "consul", web-1.web.service.consul resolves to pod 1.
job "web" {
  datacenters = ["*"]

  meta {
    statefulset                       = "true"
    statefulset_replicas              = "3"
    statefulset_pod_management_policy = "OrderedReady"
    statefulset_update_strategy       = "RollingUpdate"
    statefulset_volume_claims         = "data"
  }

  group "web" {
    # The template: nomad-statefulset creates one child job per ordinal.
    count = 0

    # The claim template: each pod gets its own dynamic host volume
    # "data-web-<n>", which also pins the pod to that volume's node.
    volume "data" {
      type            = "host"
      source          = "data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    network {
      port "http" {}
    }

    service {
      name     = "web"
      port     = "http"
      provider = "nomad"
    }

    # Pods count as Ready once healthy for this long; keep it short.
    update {
      min_healthy_time = "3s"
    }

    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        # The identity survives restarts and rescheduling: the pod appends
        # its name to the same volume every time it starts.
        args = ["-c", "echo \"$(date -u) $STATEFULSET_POD_NAME\" >> /data/identity; while true; do date -u > /data/heartbeat; sleep 5; done"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

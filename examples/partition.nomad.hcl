# A staged ("canary") rollout with a partition: only ordinals >= 2 move to a
# new revision; db-0 and db-1 stay at the current one until the partition is
# lowered. Each pod has two claims (data and wal) that are deleted with the
# pod on scale-down and when the set is deleted.
job "db" {
  datacenters = ["*"]

  meta {
    statefulset                               = "true"
    statefulset_replicas                      = "4"
    statefulset_update_strategy               = "RollingUpdate"
    statefulset_partition                     = "2"
    statefulset_min_ready_seconds             = "5"
    statefulset_revision_history_limit        = "5"
    statefulset_volume_claims                 = "data, wal"
    statefulset_volume_retention_when_deleted = "Delete"
    statefulset_volume_retention_when_scaled  = "Delete"
    version                                   = "1"
  }

  group "db" {
    count = 0

    volume "data" {
      type            = "host"
      source          = "data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    volume "wal" {
      type            = "host"
      source          = "wal"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    network {
      port "db" {
        to = 5432
      }
    }

    service {
      name     = "db"
      port     = "db"
      provider = "nomad"
      tags     = ["primary-candidate"]
    }

    update {
      min_healthy_time = "3s"
    }

    task "db" {
      driver       = "exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "10s"

      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo reloaded config' HUP; trap 'exit 0' TERM; echo \"$STATEFULSET_POD_NAME\" > /data/pod; while true; do date -u >> /wal/log; sleep 5 & wait $!; done"]
      }

      # A change re-renders the file and sends SIGHUP; Nomad then adds an
      # implicit constraint on the signals the node supports.
      template {
        data          = <<-EOT
          role = {{ if eq (env "STATEFULSET_ORDINAL") "0" }}primary{{ else }}replica{{ end }}
        EOT
        destination   = "local/db.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      volume_mount {
        volume      = "wal"
        destination = "/wal"
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

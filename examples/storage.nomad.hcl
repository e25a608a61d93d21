# Claim templates with their own size and storage class: each pod of "db"
# gets two volumes, data-db-<n> from the "fast" class (the agent's
# volume_provisioner "fast" block, e.g. an LVM host volume plugin) sized
# 10GiB..20GiB, and wal-db-<n> from the default class (the unnamed
# volume_provisioner block; with plugin_id "mkdir" a plain directory, which
# has no size, so the wal claim asks none: a size asked of it would be
# refused with the condition VolumeClaimRefused).
#
# Raising statefulset_claim_data_capacity (say to "40GiB") grows every
# ordinal's data volume in place, one pod at a time within the budget:
# Nomad refuses to change a volume a running allocation claims, so each pod
# is stopped, its volume expanded, and the pod started again on it, data
# and all. Shrinking, or changing the class of volumes that exist, touches
# nothing and the set says so (condition VolumeClaimRefused).
#
# Needs an agent with a volume_provisioner "fast" block whose plugin can
# expand volumes (see examples/agent/agent.hcl); mkdir cannot.
job "db" {
  datacenters = ["*"]

  meta {
    statefulset                     = "true"
    statefulset_replicas            = "3"
    statefulset_volume_claims       = "data,wal"
    statefulset_claim_data_capacity = "10GiB..20GiB"
    statefulset_claim_data_class    = "fast"
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

    update {
      min_healthy_time = "3s"
    }

    task "db" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "df -h /data /wal; while true; do sleep 5; done"]
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

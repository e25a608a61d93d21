# A Parallel set of four stateless workers: all pods are created and
# deleted at once, and up to half of them may be replaced at a time during
# a rolling update. No volume claims: a pod keeps its name, not its data.
job "workers" {
  datacenters = ["*"]
  priority    = 60

  # Placement fields are part of the revision: changing them rolls the set.
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  affinity {
    attribute = "${node.datacenter}"
    value     = "dc1"
    weight    = 50
  }

  spread {
    attribute = "${node.unique.id}"
  }

  meta {
    statefulset                       = "true"
    statefulset_replicas              = "4"
    statefulset_pod_management_policy = "Parallel"
    statefulset_max_unavailable       = "50%"
    statefulset_progress_deadline     = "5m"
    # Not a statefulset_* key: it is part of the template, and every pod's
    # job carries it.
    owner = "platform-team"
  }

  group "worker" {
    count = 0

    # No restarts in place: a crashing worker fails at once and the
    # controller replaces it. An explicit zero must survive into the child.
    restart {
      attempts = 0
      mode     = "fail"
    }

    update {
      min_healthy_time = "2s"
      healthy_deadline = "1m"
    }

    # Scratch space only: it must hold the task logs (10 x 10 MB by default).
    ephemeral_disk {
      size = 150
    }

    task "worker" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo \"$STATEFULSET_POD_NAME (ordinal $STATEFULSET_ORDINAL of $STATEFULSET_NAME) working\"; sleep 10; done"]
      }

      env {
        WORK_QUEUE = "jobs"
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}

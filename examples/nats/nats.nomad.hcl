# A three-member NATS JetStream cluster as a StatefulSet: nats-0, nats-1 and
# nats-2, each with a stable server name, its own JetStream store on its own
# host volume (data-nats-<n>), and a per-ordinal name in Consul.
#
#   apt-get install nats-server        # Debian's nats-server (2.9) on every client
#   nomad var put nomad/jobs/nats \
#     user=app password="$(openssl rand -hex 24)" \
#     route_user=route route_password="$(openssl rand -hex 24)"
#   nomad job run examples/nats/nats.nomad.hcl
#   nomad-statefulset status nats
#
# Credentials. Every client and every route between members authenticates
# with a user and a password from the Nomad Variable nomad/jobs/<set>
# (here nomad/jobs/nats), with four items: user and password for clients,
# route_user and route_password for the members' routes. Make it before
# the job runs: until it exists, no member starts. Use passwords of
# letters and digits only (openssl rand -hex gives such): the route
# password goes into the route URLs as it is. A variable that lacks an item
# stops the member from starting (a NATS server given an empty user would
# let everyone in). The credentials are rendered under secrets/, which
# `nomad alloc fs` does not show; local/nats.conf holds none. Under Nomad
# ACLs, a task's workload identity may read only the variables of its own
# job, nomad/jobs/nats-<n> for a member: give the members the set's
# variable with a policy (docs/tutorial-nats.md, "Running a replicated database",
# says how). Clients read the same variable: examples/nats/natsctl does,
# with your NOMAD_TOKEN. The monitoring port (/healthz, /varz, /jsz) has
# no authentication in NATS 2.9: it shows state, never messages or
# passwords; keep it off networks you do not trust.
#
# What it needs on the Nomad clients: the exec driver, Debian's
# /usr/sbin/nats-server inside the task's chroot (Nomad's default chroot_env
# copies /usr, so it is there; a custom chroot_env must list it), and a
# Consul agent that Nomad registers services with (the routes below come
# from Consul). `make demo EXAMPLE=nats` runs it on three local client
# nodes; docs/tutorial-nats.md walks through it.
#
# Why Parallel: the members are Raft peers (the JetStream meta group and
# every replicated stream). A Raft member cannot become ready alone: its
# /healthz answers 503 until a meta leader is elected, and that takes a
# majority of the peers. Under OrderedReady the daemon would start nats-0,
# wait for it to be ready, and wait forever. Parallel starts all three at
# once, as Kubernetes' NATS chart does (podManagementPolicy: Parallel). It
# changes only how pods are created and deleted: a rolling update still
# goes one member at a time, highest ordinal first, each waiting until the
# one before is ready again, so the cluster never loses its majority. (A
# member that is not ready is replaced first, being down anyway, but never
# while the one above it is still coming back: its /healthz may fail only
# because that peer is away, and it is still one of the majority.)

# The set's size and first ordinal, as Kubernetes' NATS chart takes its
# replicas from its values: `nomad job run -var replicas=5 ...`. They give
# the annotations and the route seeds below, so that the two cannot
# disagree.
variable "replicas" {
  description = "statefulset_replicas: how many members"
  type        = number
  default     = 3
}

variable "ordinals_start" {
  description = "statefulset_ordinals_start: the first member's ordinal"
  type        = number
  default     = 0
}

locals {
  # The route seeds: the set's first three ordinals, or all of them when
  # there are fewer. A child carries no statefulset_* key (those are the
  # daemon's, and a child's meta is the template's), so the seeds reach
  # the members as a meta key of their own, nats_route_seeds. Three are
  # enough: a member finds the cluster through any one of them, and NATS
  # gossips the rest. Because the seeds are part of the template, a change
  # to them is a new revision (a rolling update); capped at three, they do
  # not change when the set grows beyond three, so scaling up restarts
  # nothing.
  route_seeds = range(var.ordinals_start, var.ordinals_start + min(var.replicas, 3))
}

job "nats" {
  datacenters = ["*"]

  meta {
    statefulset                       = "true"
    statefulset_replicas              = var.replicas
    statefulset_ordinals_start        = var.ordinals_start
    statefulset_pod_management_policy = "Parallel"
    statefulset_update_strategy       = "RollingUpdate"
    # One member down at a time, on every path (rollout, drain, repair):
    # three Raft peers keep their majority with one missing, not with two.
    statefulset_max_unavailable = "1"
    statefulset_volume_claims   = "data"

    # The ordinals whose members the routes name, "0,1,2": see
    # local.route_seeds. Every member gets it as NOMAD_META_nats_route_seeds.
    nats_route_seeds = join(",", local.route_seeds)
  }

  group "nats" {
    # The template: nomad-statefulset creates one child job per ordinal.
    count = 0

    # The claim template: each member gets the dynamic host volume
    # data-nats-<n>, its JetStream store. The volume pins the member to its
    # node, so a member that restarts or moves back after a drain finds its
    # streams where it left them and only catches up on what it missed.
    volume "data" {
      type            = "host"
      source          = "data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    # Dynamic ports: several members may share a node (the one-node demo).
    # With one member per node you may pin NATS's usual ports instead
    # (static = 4222, 6222 and 8222); nothing else changes.
    network {
      port "client" {}
      port "cluster" {}
      port "monitor" {}
    }

    # Clients connect here: nats.service.consul (SRV for the port), or
    # nats-<n>.nats.service.consul for one member. The member is ready
    # when the server's own /healthz says so: it has a meta leader, is
    # current with it, and every stream replica it holds has caught up.
    # The daemon counts a critical check as not ready, so a rollout never
    # takes the next member down before this one has caught up.
    service {
      name = "nats"
      port = "client"

      # Where tools find the member's monitoring endpoint (/healthz,
      # /varz, /jsz): examples/nats/natsctl reads it.
      meta {
        monitor = "${NOMAD_ADDR_monitor}"
      }

      check {
        name     = "healthz"
        type     = "http"
        port     = "monitor"
        path     = "/healthz"
        interval = "3s"
        timeout  = "2s"
      }
    }

    # The members' route port, with no check, so that a member's name
    # exists as soon as it is placed, before it is ready (Kubernetes:
    # a headless Service with publishNotReadyAddresses). The peers need
    # each other's names to become ready at all: a name that appeared only
    # once ready would never appear.
    service {
      name = "nats-cluster"
      port = "cluster"
    }

    update {
      min_healthy_time = "5s"
      healthy_deadline = "3m"
    }

    task "nats" {
      driver = "exec"

      config {
        command = "/usr/sbin/nats-server"
        args    = ["--config", "local/nats.conf"]
      }

      # Lame duck mode on stop: the server stops taking clients, hands
      # the leadership of every Raft group it leads to another member,
      # tells its clients to go elsewhere, closes them after
      # lame_duck_grace_period (spread over the rest of
      # lame_duck_duration, a second apart at most) and exits. A plain
      # SIGINT would leave its groups leaderless until an election times
      # out. 30s is the Nomad client's default max_kill_timeout.
      kill_signal  = "SIGUSR2"
      kill_timeout = "30s"

      # The daemon mounts the claim here: data-nats-<n>, this member's own.
      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      # The server's configuration, without secrets: what `nomad alloc fs`
      # shows. It includes the two files below, which hold the
      # credentials. (NATS resolves an include from this file's directory.)
      template {
        destination   = "local/nats.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOF
          server_name: {{ env "STATEFULSET_POD_NAME" }}
          listen: {{ env "NOMAD_ADDR_client" }}
          http: {{ env "NOMAD_ADDR_monitor" }}

          lame_duck_duration: "30s"
          lame_duck_grace_period: "2s"

          jetstream {
            store_dir: "/data"
            max_memory_store: 64M
            max_file_store: 1G
          }

          # Clients: user and password of nomad/jobs/<set>.
          include "../secrets/clients.conf"

          cluster {
            name: "nats"
            listen: {{ env "NOMAD_ADDR_cluster" }}
            # Routes: their authorization and the seeds.
            include "../secrets/routes.conf"
          }
        EOF
      }

      # Every client authenticates. A variable without the items renders an
      # include of a file that does not exist, whose name says why: the
      # server refuses to start (or, on a reload, keeps its configuration)
      # rather than run without authentication.
      template {
        destination   = "secrets/clients.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOF
          {{- $path := printf "nomad/jobs/%s" (env "STATEFULSET_NAME") }}
          {{- with nomadVar $path }}
          {{- if and .user.Value .password.Value }}
          authorization {
            user: "{{ .user.Value }}"
            password: "{{ .password.Value }}"
          }
          {{- else }}
          include "ERROR: the Nomad Variable {{ $path }} has no user or password"
          {{- end }}
          {{- else }}
          include "ERROR: the Nomad Variable {{ $path }} is empty"
          {{- end }}
        EOF
      }

      # The routes: every member accepts a route only with route_user and
      # route_password, and names them in its own routes (NATS 2.9 sends a
      # route's credentials from its URL alone).
      #
      # The seeds are the members of the ordinals in nats_route_seeds, by
      # name: the service lookup "nats-<n>.nats-cluster" is the query that
      # Consul DNS answers for nats-<n>.nats-cluster.service.consul (the tag
      # nats-<n> is the daemon's). A template gives the address and the
      # port Nomad chose, which DNS (an A record) cannot. With static ports
      # and Consul DNS forwarded to by the nodes' resolver, you can write
      # the names instead:
      #   nats-route://<user>:<password>@nats-0.nats-cluster.service.consul:6222, ...
      # A member added by scaling up finds the seeds, and NATS gossips the
      # rest of the cluster to everyone.
      #
      # When a member moves, the file changes and NATS reloads it on
      # SIGHUP; a member that is down simply has no route until it is back.
      #
      # Without Consul: give both services provider = "nomad" and write
      # nomadService where this says service; Nomad's own catalog has the
      # same per-ordinal tags. The daemon then judges readiness by Nomad's
      # deployment health and the task's state, not by /healthz going
      # critical later.
      template {
        destination   = "secrets/routes.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOF
          {{- $set := env "STATEFULSET_NAME" }}
          {{- $path := printf "nomad/jobs/%s" $set }}
          {{- with nomadVar $path }}
          {{- if and .route_user.Value .route_password.Value }}
          {{- $user := .route_user.Value }}
          {{- $password := .route_password.Value }}
          authorization {
            user: "{{ $user }}"
            password: "{{ $password }}"
          }
          routes: [
          {{- range $o := env "NOMAD_META_nats_route_seeds" | split "," }}
            {{- range service (printf "%s-%s.nats-cluster" $set $o) }}
            "nats-route://{{ $user }}:{{ $password }}@{{ .Address }}:{{ .Port }}"
            {{- end }}
          {{- end }}
          ]
          {{- else }}
          include "ERROR: the Nomad Variable {{ $path }} has no route_user or route_password"
          {{- end }}
          {{- else }}
          include "ERROR: the Nomad Variable {{ $path }} is empty"
          {{- end }}
        EOF
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}

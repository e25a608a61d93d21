# PostgreSQL with streaming replication: one primary and two hot standbys,
# as a nomad-statefulset set (docs/tutorial-postgresql.md).
#
#   postgres-0, postgres-1, postgres-2   one child job each, on distinct nodes
#   data-postgres-<n>                    each member's own host volume (/data)
#   pg.service.consul                    every member (readiness: accepts connections)
#   pg-primary.service.consul            the primary alone (the check "primary")
#
# What the daemon is told (DESIGN §3b):
#   - the leader is the member whose check "primary" passes;
#   - a rollout (or drain, repair) takes the primary down last, after a
#     switchover to the best of the standbys the daemon offers
#     (NSS_CANDIDATE_PODS, those already at the new revision first): one
#     whose replay is paused or that lags is skipped, and if none will do
#     the daemon tries again, then holds the step (SwitchoverFailed);
#   - before it takes any Ready member down, it asks the cluster
#     (/local/can-lose-one.sh) whether it can lose one now.
#
# Everything the members run is in this file (template blocks), so the job
# is self-contained; nothing but Debian's postgresql-<postgres_version>
# package is needed on the clients (/usr/lib/postgresql/<version>/bin, 15
# by default), the exec driver, and a Consul the Nomad clients register
# services with and render templates from.
#
# ---- Passwords: a Nomad Variable, which must exist before the job runs ----
#
#   nomad var put nomad/jobs/postgres \
#     postgres_password="$(openssl rand -base64 24)" \
#     replication_password="$(openssl rand -base64 24)"
#
# (the path is the variable "credentials" below). postgres_password is the
# superuser's (role postgres), replication_password the role replicator's,
# which the standbys replicate as. Every connection over the network
# authenticates with scram-sha-256; over the member's own unix socket only
# the OS users postgres (the task's) and root get in as the role postgres
# (peer), which is how the task, the daemon's commands (alloc exec into the
# task) and the script checks run. Nothing is trusted: nobody who reaches
# a member's port is a superuser without the password. Set postgres_uid
# (below) if the clients' postgres user has one uid: Nomad then writes the
# password files readable by that user alone.
#
# Without the variable no member starts: Nomad does not render the
# templates that read it, and the allocation stays pending with the task
# event "Missing: nomad.var.block(nomad/jobs/postgres@default.global)"
# until the variable is written; then it starts by itself.
#
# With Nomad's ACLs on, a task reads by default only the variables of its
# own job (nomad/jobs/<job>), and each member is a job of its own
# (postgres-<n>), so none of them may read nomad/jobs/postgres: bind the
# policy in credentials.policy.hcl (next to this file) to each member's job
# before it starts, a scale-up's new ordinals included:
#
#   for n in 0 1 2; do
#     nomad acl policy apply -namespace default -job postgres-$n \
#       postgres-$n-credentials examples/postgres/credentials.policy.hcl
#   done
#
# The passwords are rendered into the task's secrets/ directory, never into
# the job. To change them: write the variable, then nomad alloc exec -task
# postgres <the primary's allocation> /local/set-passwords.sh, which sets
# the roles' passwords to what the variable holds; the members use them
# from their next connections (between the two, a member's connections to
# another fail, and the switchover and disruption check hold).
#
# ---- Replication slots ----------------------------------------------------
#
# Each standby streams through a physical replication slot of its own on the
# primary, named after the member (postgres_1 for postgres-1), so the
# primary keeps the WAL a standby has not yet received, however long it is
# away (up to max_slot_wal_keep_size). A standby creates its slot on the
# primary before it clones it, and makes sure again every 10s that the
# primary it follows has it (start.sh). A switchover takes the slots with
# it: the new primary gets the slots of the members that are streaming or
# that Consul lists, and the old one, now a standby, drops those it had
# (a standby keeps none). A member scaled away leaves its slot on the
# primary until the next switchover, or until you drop it:
#   SELECT pg_drop_replication_slot('postgres_2');
#
# The member's volume must be writable by the task's user: give the
# daemon's volume provisioner the postgres uid and gid of the clients
# (volume_provisioner { config = { "parameters.uid" = "...",
# "parameters.gid" = "..." } } with the mkdir plugin), or a plugin that
# creates volumes owned by postgres.
#
# Run it: write the variable (above), nomad job run
# examples/postgres/postgres.nomad.hcl, then nomad-statefulset status
# postgres. Another major version: -var postgres_version=16.
#
# Without Consul: the daemon learns the leader from a Consul check, so a
# leader check needs Consul. With provider = "nomad" services instead, drop
# statefulset_leader_check/leader_update (the primary is then updated like
# any member), render /local/members and /local/primary with nomadService
# instead of service, and let the scripts ask every member in
# /local/members for pg_is_in_recovery() to find the primary (a Nomad
# service has no health, so /local/primary would list every member).

variable "postgres_version" {
  description = "The PostgreSQL major version on the clients: its programs are in /usr/lib/postgresql/<version>/bin (Debian's postgresql-<version>)."
  type        = string
  default     = "15"

  validation {
    condition     = var.postgres_version != "" && regex_replace(var.postgres_version, "^[0-9]+$", "") == ""
    error_message = "The postgres_version is a major version, such as 15 or 16."
  }
}

variable "credentials" {
  description = "The Nomad Variable holding postgres_password and replication_password."
  type        = string
  default     = "nomad/jobs/postgres"
}

variable "postgres_uid" {
  description = "The uid of the user postgres on the clients (getent passwd postgres), if it is the same on all of them: Nomad then writes the files with the passwords as that user, readable by it alone. -1: as Nomad's own user, readable by all until the task takes them, a moment after it starts."
  type        = number
  default     = -1
}

variable "max_slot_wal_keep_size" {
  description = "The most WAL the primary keeps for a standby's replication slot (PostgreSQL's max_slot_wal_keep_size); a standby that falls further behind must be cloned again (pod replace -new-volume). -1 keeps all of it, however much."
  type        = string
  default     = "4GB"
}

variable "min_healthy_time" {
  description = "How long a member must be healthy before it counts as Ready."
  type        = string
  default     = "10s"
}

variable "check_interval" {
  description = "Interval of the readiness and primary checks: how soon a new primary is seen."
  type        = string
  default     = "5s"
}

job "postgres" {
  datacenters = ["*"]

  meta {
    statefulset                       = "true"
    statefulset_replicas              = "3"
    statefulset_pod_management_policy = "OrderedReady"
    statefulset_update_strategy       = "RollingUpdate"
    statefulset_volume_claims         = "data"

    # The member where the script check "primary" (service pg-primary)
    # passes leads. It never counts against readiness.
    statefulset_leader_check = "primary"
    # last | switchover | supervised
    statefulset_leader_update = "switchover"
    # Run in the primary, with NSS_CANDIDATE_PODS the standbys it may
    # promote, in the daemon's order (NSS_TARGET_POD is the first).
    statefulset_switchover_command = "/local/switchover.sh"
    # Run in another Ready member, with NSS_TARGET_POD the one to lose.
    statefulset_disruption_check = "/local/can-lose-one.sh"
    statefulset_exec_task        = "postgres"
  }

  group "db" {
    # The template: nomad-statefulset creates one child job per ordinal.
    count = 0

    # Each member's own data: data-postgres-<n>, which also pins the member
    # to that volume's node.
    volume "data" {
      type            = "host"
      source          = "data"
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    network {
      port "pg" {}
    }

    # Every member; Ready while it accepts connections. A standby that has
    # fallen behind is still Ready (it serves reads): whether the cluster
    # can lose a member is the disruption check's question.
    service {
      name = "pg"
      port = "pg"

      # timeout: the scripts give up on their own after 3s
      # (PGCONNECT_TIMEOUT); the rest is room for a slow exec into the
      # task on a loaded machine. Never let Nomad time a script check out:
      # in Nomad 1.10.5 the exec driver's executor then crashes ("send on
      # closed channel" in handleExecWait), and takes the task with it.
      check {
        name     = "ready"
        type     = "script"
        task     = "postgres"
        command  = "/local/ready.sh"
        interval = var.check_interval
        timeout  = "30s"
      }
    }

    # The primary alone: its check passes only where pg_is_in_recovery()
    # is false, so pg-primary.service.consul names the primary, and the
    # daemon reads its leader from it. on_update = "ignore": the standbys'
    # critical "primary" must not make Nomad judge them unhealthy.
    service {
      name = "pg-primary"
      port = "pg"

      check {
        name      = "primary"
        type      = "script"
        task      = "postgres"
        command   = "/local/is-primary.sh"
        interval  = var.check_interval
        timeout   = "30s" # see the check "ready"
        on_update = "ignore"
      }
    }

    update {
      min_healthy_time = var.min_healthy_time
      healthy_deadline = "5m"
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "5s"
    }

    task "postgres" {
      driver = "exec"
      user   = "postgres"

      config {
        command = "/local/start.sh"
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }

      # start.sh forwards SIGINT to postgres: a fast shutdown (sessions
      # end, a shutdown checkpoint is written and streamed to the standbys).
      # If postgres has not stopped 20s later (a standby that does not
      # confirm the last WAL holds its sender up to wal_sender_timeout),
      # start.sh makes it an immediate shutdown (crash recovery at the next
      # start, nothing acknowledged lost), before Nomad would kill it.
      # 30s is Nomad's default max_kill_timeout: a longer kill_timeout is
      # cut to it on such clients anyway.
      kill_signal  = "SIGINT"
      kill_timeout = "30s"

      env {
        TZ = "UTC"
      }

      resources {
        cpu    = 200
        memory = 256
      }

      # ---- Discovery, from Consul -------------------------------------

      # Every member Consul knows, healthy or not: "<address> <port> <tags>"
      # (the daemon tags each service with the pod's name, postgres-<n>).
      # (wait: Nomad's default waits 5s for Consul to settle before it
      # renders a change; a new primary should be seen at once.)
      template {
        destination = "local/members"
        change_mode = "noop"
        wait {
          min = "250ms"
          max = "2s"
        }
        data        = <<-EOT
        {{- range service "pg|any" }}
        {{ .Address }} {{ .Port }} {{ join " " .Tags }}
        {{- end }}
        EOT
      }

      # The primary, if it is another member: "<address> <port> <tags>".
      template {
        destination = "local/primary"
        change_mode = "noop"
        wait {
          min = "250ms"
          max = "2s"
        }
        data        = <<-EOT
        {{- range service "pg-primary" }}{{ if not (.Tags | contains (env "STATEFULSET_POD_NAME")) }}
        {{ .Address }} {{ .Port }} {{ join " " .Tags }}
        {{- end }}{{ end }}
        EOT
      }

      # Where a standby streams from, included by postgresql.conf. When the
      # primary moves, the file changes and postgres reloads it (SIGHUP,
      # forwarded by start.sh): since PostgreSQL 13 the WAL receiver then
      # reconnects to the new primary and follows its new timeline
      # (recovery_target_timeline = latest). No primary_conninfo while no
      # other member is primary. The standby connects as the role
      # replicator, with the password from the Nomad Variable (passfile),
      # through its slot (the member's name as a slot name: postgres_1).
      template {
        destination   = "local/primary.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "0s"
        wait {
          min = "250ms"
          max = "2s"
        }
        data          = <<-EOT
        {{- range service "pg-primary" }}{{ if not (.Tags | contains (env "STATEFULSET_POD_NAME")) }}
        primary_conninfo = 'host={{ .Address }} port={{ .Port }} user=replicator passfile=/secrets/pgpass application_name={{ env "STATEFULSET_POD_NAME" }}'
        {{- end }}{{ end }}
        primary_slot_name = '{{ env "STATEFULSET_POD_NAME" | regexReplaceAll "[^a-z0-9_]" "_" }}'
        EOT
      }

      # ---- PostgreSQL configuration -----------------------------------

      template {
        destination = "local/postgresql.conf"
        change_mode = "noop"
        data        = <<-EOT
        data_directory = '/data/pgdata'
        # Each member answers with its pod name: the scripts check whom
        # they reached at an address Consul gave them.
        cluster_name = '{{ env "STATEFULSET_POD_NAME" }}'
        hba_file = '/local/pg_hba.conf'
        ident_file = '/local/pg_ident.conf'
        listen_addresses = '{{ env "NOMAD_IP_pg" }}'
        port = {{ env "NOMAD_PORT_pg" }}
        unix_socket_directories = '/local/run'
        max_connections = 50
        shared_buffers = 32MB
        wal_level = replica
        max_wal_senders = 10
        # One physical slot per standby (primary_slot_name); WAL a slot
        # holds is capped (the variable max_slot_wal_keep_size).
        max_replication_slots = 10
        max_slot_wal_keep_size = ${var.max_slot_wal_keep_size}
        # Also kept without slots: a member whose slot is not there yet (a
        # switchover's new primary, the moment after it is promoted) finds
        # the WAL it needs.
        wal_keep_size = 512MB
        password_encryption = scram-sha-256
        # pg_rewind needs it to bring a former primary back as a standby.
        wal_log_hints = on
        hot_standby = on
        hot_standby_feedback = on
        wal_receiver_status_interval = 1s
        recovery_target_timeline = 'latest'
        timezone = 'UTC'
        log_timezone = 'UTC'
        log_line_prefix = '%m [%p] '
        include_if_exists = '/local/primary.conf'
        EOT
      }

      # No trust anywhere. The member's own unix socket (/local/run, in
      # the task's directory) lets in as the role postgres only the OS
      # users of pg_ident.conf below (peer: the kernel names the connecting
      # process's user): the task's user postgres (the task itself, and
      # the daemon's commands, which alloc exec runs as the task's user)
      # and root (Nomad 1.10's exec driver runs script checks as root; root
      # on the client may read the data directory anyway). Any other local
      # user, and every connection over the network, proves a password
      # with scram-sha-256: the members replicate as replicator, and the
      # scripts ask the other members as postgres, with the passwords from
      # the Nomad Variable. samenet: only from the members' own subnets;
      # widen it for clients elsewhere (host all all <cidr> scram-sha-256),
      # and add TLS (ssl = on, hostssl) where the network is not yours
      # alone.
      template {
        destination = "local/pg_hba.conf"
        change_mode = "noop"
        data        = <<-EOT
        # TYPE  DATABASE     USER        ADDRESS  METHOD
        local   all          postgres             peer map=task
        local   replication  postgres             peer map=task
        local   all          all                  scram-sha-256
        host    replication  replicator  samenet  scram-sha-256
        host    all          all         samenet  scram-sha-256
        EOT
      }

      template {
        destination = "local/pg_ident.conf"
        change_mode = "noop"
        data        = <<-EOT
        # MAPNAME  SYSTEM-USERNAME  PG-USERNAME
        task       postgres         postgres
        task       root             postgres
        EOT
      }

      # ---- Passwords, from the Nomad Variable -------------------------

      # The password file of libpq (host:port:database:user:password, ':'
      # and '\' escaped), for the scripts, pg_basebackup, pg_rewind and the
      # WAL receiver. Until the variable exists, this template blocks the
      # task from starting. Nomad writes it as its own user (unless
      # postgres_uid is set), so that the task's user can read it only if
      # anyone may: lib.sh takes it at once (a copy of the task's own,
      # /secrets/pgpass, 0600, as libpq wants a password file, and the
      # file Nomad wrote removed); Nomad writes it again when the variable
      # changes.
      template {
        destination = "secrets/pgpass.in"
        change_mode = "noop"
        uid         = var.postgres_uid
        perms       = var.postgres_uid >= 0 ? "0600" : "0644"
        data        = <<-EOT
        {{- with nomadVar "${var.credentials}" }}
        {{- $pw := (index . "postgres_password").Value }}
        {{- $rpw := (index . "replication_password").Value }}
        {{- if and $pw $rpw }}
        *:*:*:postgres:{{ $pw | replaceAll "\\" "\\\\" | replaceAll ":" "\\:" }}
        *:*:*:replicator:{{ $rpw | replaceAll "\\" "\\\\" | replaceAll ":" "\\:" }}
        {{- else }}
        # the Nomad Variable ${var.credentials} has no postgres_password or no replication_password
        {{- end }}
        {{- end }}
        EOT
      }

      # The roles and their passwords, as SQL: applied when ordinal 0
      # creates the cluster, and by /local/set-passwords.sh. Taken by
      # lib.sh as pgpass.in is (/secrets/roles.sql).
      template {
        destination = "secrets/roles.sql.in"
        change_mode = "noop"
        uid         = var.postgres_uid
        perms       = var.postgres_uid >= 0 ? "0600" : "0644"
        data        = <<-EOT
        {{- with nomadVar "${var.credentials}" }}
        \set ON_ERROR_STOP on
        SET password_encryption = 'scram-sha-256';
        SELECT 'CREATE ROLE replicator' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'replicator') \gexec
        ALTER ROLE replicator WITH LOGIN REPLICATION PASSWORD '{{ (index . "replication_password").Value | replaceAll "'" "''" }}';
        ALTER ROLE postgres WITH PASSWORD '{{ (index . "postgres_password").Value | replaceAll "'" "''" }}';
        {{- end }}
        EOT
      }

      # ---- Scripts ----------------------------------------------------

      # Sourced by every script: where things are, and helpers.
      template {
        destination = "local/lib.sh"
        change_mode = "noop"
        data        = <<-EOT
        export PATH=/usr/lib/postgresql/${var.postgres_version}/bin:/usr/local/bin:/usr/bin:/bin
        export PGDATA=/data/pgdata PGHOST=/local/run PGPORT={{ env "NOMAD_PORT_pg" }}
        export PGUSER=postgres PGDATABASE=postgres PGCONNECT_TIMEOUT=3
        SET={{ env "STATEFULSET_NAME" }}
        POD={{ env "STATEFULSET_POD_NAME" }}
        ORDINAL={{ env "STATEFULSET_ORDINAL" }}
        # This member's replication slot on the primary (primary.conf).
        SLOT={{ env "STATEFULSET_POD_NAME" | regexReplaceAll "[^a-z0-9_]" "_" }}

        # The passwords (a libpq password file: libpq reads one only if
        # no one but its owner may).
        export PGPASSFILE=/secrets/pgpass

        # take_secrets: the files Nomad rendered from the variable
        # (secrets/*.in, written as Nomad's user, so readable by all unless
        # postgres_uid is set) become the task's own (0600), and are
        # removed. Run as the task's user only: by start.sh, at once and
        # every 10s (Nomad writes them again when the variable changes).
        take_secrets() {
          for f in pgpass roles.sql; do
            [ -f "/secrets/$f.in" ] || continue
            if (umask 077 && cat "/secrets/$f.in" > "/secrets/$f.$$" 2>/dev/null && [ -s "/secrets/$f.$$" ] && mv -f "/secrets/$f.$$" "/secrets/$f"); then
              rm -f "/secrets/$f.in"
            else
              rm -f "/secrets/$f.$$"
            fi
          done
        }
        # The disruption check's rule: after losing one member, at least
        # this many standbys stream within this many bytes of the primary.
        MIN_STREAMING_STANDBYS=1
        MAX_LAG_BYTES=16777216

        # sql [psql options] QUERY: one value, unaligned, no headers.
        sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$@"; }

        # podof TAGS...: the pod name among a service's tags.
        podof() {
          for t in "$@"; do
            case "$t" in "$SET"-[0-9]*) echo "$t"; return 0 ;; esac
          done
          return 1
        }

        # member POD: "<address> <port>" of that member. Consul may list a
        # member that was just replaced at its old address for a moment:
        # each address is asked whom it serves (cluster_name).
        member() {
          while read -r a p tags; do
            [ -n "$a" ] || continue
            # shellcheck disable=SC2086
            [ "$(podof $tags)" = "$1" ] || continue
            [ "$(sql -h "$a" -p "$p" -c 'show cluster_name' </dev/null 2>/dev/null)" = "$1" ] && { echo "$a $p"; return 0; }
          done < /local/members
          return 1
        }

        # others: whether Consul knows any member but this one.
        others() {
          while read -r a p tags; do
            [ -n "$a" ] || continue
            # shellcheck disable=SC2086
            [ "$(podof $tags)" != "$POD" ] && return 0
          done < /local/members
          return 1
        }

        # primary: "<address> <port> <pod>" of the primary if it is another
        # member: one whose check passes in Consul and that says, asked
        # now, that it is that member and not in recovery.
        primary() {
          while read -r a p tags; do
            [ -n "$a" ] || continue
            # shellcheck disable=SC2086
            pod=$(podof $tags)
            [ "$(sql -h "$a" -p "$p" -F ' ' -c "select current_setting('cluster_name'), pg_is_in_recovery()" </dev/null 2>/dev/null)" = "$pod f" ] || continue
            echo "$a $p $pod"
            return 0
          done < /local/primary
          return 1
        }

        # local_role: primary, standby, or down.
        local_role() {
          case "$(sql -c 'select pg_is_in_recovery()' 2>/dev/null)" in
            f) echo primary ;;
            t) echo standby ;;
            *) echo down ;;
          esac
        }

        # slotof POD: the replication slot of that member (as SLOT is this
        # member's).
        slotof() { echo "$1" | sed 's/[^a-z0-9_]/_/g'; }

        # ensure_slot ADDRESS PORT [fresh]: makes sure that the primary at
        # that address keeps this member's replication slot, as replicator
        # (a role with REPLICATION may manage slots). fresh: a slot left
        # from before (one the primary invalidated, say) is dropped first,
        # for a clone, which needs none of the WAL it held. Never on a
        # member in recovery: a standby keeps no slots.
        ensure_slot() {
          if [ "$3" = fresh ]; then
            sql -h "$1" -p "$2" -U replicator -c "select count(pg_drop_replication_slot(slot_name)) from pg_replication_slots where slot_name = '$SLOT' and not active and not pg_is_in_recovery()" </dev/null >/dev/null || return 1
          fi
          sql -h "$1" -p "$2" -U replicator -c "select count(pg_create_physical_replication_slot('$SLOT', true)) from (select 1) x where not pg_is_in_recovery() and not exists (select from pg_replication_slots where slot_name = '$SLOT')" </dev/null >/dev/null
        }

        # drop_own_slots: a standby keeps no slots (no member streams from
        # a standby). Those a former primary kept for its standbys would
        # hold WAL here for ever: dropped, in the same statement that sees
        # it is still in recovery (never on a member just promoted).
        drop_own_slots() {
          sql -c "select count(pg_drop_replication_slot(slot_name)) from pg_replication_slots where slot_type = 'physical' and not active and pg_is_in_recovery()" </dev/null >/dev/null 2>&1
        }
        EOT
      }

      # The task: prepares the data directory for the role this member
      # must take, runs postgres, and stays PID 1 of the task so that a
      # postgres stopped by the switchover command comes back as a standby
      # inside the same allocation (Nomad would kill the command's own
      # alloc exec session with the task otherwise).
      template {
        destination = "local/start.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        log() { echo "start.sh: $*" >&2; }
        mkdir -p /local/run
        take_secrets
        case "$(cat "$PGPASSFILE" 2>/dev/null)" in
          "#"*|"") log "$(cat "$PGPASSFILE" 2>/dev/null)"; log "cannot start without the passwords"; exit 1 ;;
        esac

        # wait_primary: waits until Consul names another member as the
        # primary, and sets P_ADDR, P_PORT and P_POD. (Not in a $(...):
        # the traps must run while it waits.)
        wait_primary() {
          n=0
          while [ -z "$stopping" ]; do
            if p=$(primary); then
              set -- $p
              P_ADDR=$1 P_PORT=$2 P_POD=$3
              return 0
            fi
            [ $((n % 15)) -eq 0 ] && log "waiting for a primary to show in Consul (pg-primary)"
            n=$((n + 1))
            sleep 1
          done
          return 1
        }

        clone() {
          wait_primary || return 1
          log "cloning from the primary $P_POD ($P_ADDR:$P_PORT)"
          rm -rf "$PGDATA" "$PGDATA.new"
          # Not -R: it would write primary_conninfo into
          # postgresql.auto.conf, which overrides /local/primary.conf and
          # would pin this member to the primary of today. Into a
          # directory of its own, moved into place once whole: a clone cut
          # short (the task killed) must never leave a PG_VERSION without a
          # standby.signal, which the next start would take for a primary.
          # Through this member's own slot, created first: the primary
          # keeps the WAL from the backup's start on until this member
          # streams it.
          ensure_slot "$P_ADDR" "$P_PORT" fresh || { log "could not create the replication slot $SLOT on $P_POD"; return 1; }
          pg_basebackup -h "$P_ADDR" -p "$P_PORT" -U replicator -D "$PGDATA.new" -X stream -S "$SLOT" -c fast || return 1
          touch "$PGDATA.new/standby.signal"
          mv "$PGDATA.new" "$PGDATA"
        }

        # prepare: makes $PGDATA right for the role this member must start in.
        prepare() {
          if [ ! -s "$PGDATA/PG_VERSION" ]; then
            # An empty volume. Ordinal 0 bootstraps the cluster, but only
            # if Consul knows no other member: a lost volume of ordinal 0
            # in a living cluster is cloned like any other.
            if [ "$ORDINAL" = 0 ] && ! others; then
              log "empty volume and no other member: initdb, this member is the primary"
              # In a directory of its own, moved into place once whole: an
              # initdb cut short (the task killed under load) left a
              # PG_VERSION beside a half-made cluster that every later
              # start took for a database and crashed on.
              rm -rf "$PGDATA" "$PGDATA.new"
              # (The data directory's own pg_hba.conf is not used:
              # hba_file is /local/pg_hba.conf.)
              initdb -D "$PGDATA.new" -U postgres --auth-local=peer --auth-host=reject --locale=C --encoding=UTF8 >&2 || return 1
              pg_ctl start -D "$PGDATA.new" -w -s -o "-c config_file=/local/postgresql.conf -c data_directory=$PGDATA.new -c listen_addresses=''" >&2 || return 1
              # The roles and passwords of the Nomad Variable.
              sql -f /secrets/roles.sql || return 1
              # A table the operator can hold the daemon off with (see
              # can-lose-one.sh): INSERT INTO nss_disruption_hold VALUES ('backup running').
              sql -c "create table if not exists nss_disruption_hold (reason text not null, since timestamptz not null default now())" || return 1
              pg_ctl stop -D "$PGDATA.new" -w -s -m fast >&2 || return 1
              mv "$PGDATA.new" "$PGDATA"
            else
              clone || return 1
            fi
          elif [ ! -f "$PGDATA/standby.signal" ]; then
            # Data of a primary. If another member leads now (a failover
            # or a switchover happened while this one was down), this one
            # must follow it: pg_rewind takes back whatever it wrote that
            # the new primary never got, or, if that fails, it is cloned
            # again (the old data is kept aside, once).
            if p=$(primary); then
              set -- $p
              log "this member was a primary, and $3 leads now: pg_rewind, then follow it"
              if ! pg_rewind -D "$PGDATA" --source-server="host=$1 port=$2 user=postgres dbname=postgres" >&2; then
                log "pg_rewind failed: cloning again, the old data kept in $PGDATA.old"
                rm -rf "$PGDATA.old" && mv "$PGDATA" "$PGDATA.old"
                clone || return 1
              fi
              touch "$PGDATA/standby.signal"
            fi
          fi
          chmod 700 "$PGDATA"
          # A standby's slot on the primary it will follow (a primary that
          # took over while this member was away may not have it yet).
          if [ -f "$PGDATA/standby.signal" ] && p=$(primary); then
            set -- $p
            ensure_slot "$1" "$2" || log "could not create the replication slot $SLOT on $3 (trying again once running)"
          fi
          # Nothing else runs postgres in this allocation, and the volume has
          # one writer: a pid file left by a killed allocation is stale. So
          # is a socket lock file in /local/run: when a client comes back
          # after its machine died, Nomad restarts the task in the same
          # allocation directory, and postgres would refuse to start if the
          # PID in the old lock file happens to be alive in the new task.
          rm -f "$PGDATA/postmaster.pid" /local/run/.s.PGSQL.*
        }

        # keep_slots: while this task runs, every 10s: takes what Nomad
        # rendered anew from the variable, and, if this member is a
        # standby: it keeps no slots itself, and the primary it follows
        # keeps this member's (a primary that took over in a switchover
        # has it already; one that took over otherwise gets it here).
        keep_slots() {
          trap - HUP INT TERM
          while sleep 10; do
            take_secrets
            [ "$(local_role)" = standby ] || continue
            drop_own_slots
            if p=$(primary); then
              set -- $p
              ensure_slot "$1" "$2" 2>/dev/null || true
            fi
          done
        }
        keep_slots &
        keeper=$!
        trap 'kill "$keeper" 2>/dev/null' EXIT

        # stop: a fast shutdown; an immediate one if postgres has not
        # stopped within 20s (kill_timeout is 30s).
        stop() {
          stopping=1
          kill -INT "$pg" 2>/dev/null
          ( sleep 20; kill -QUIT "$pg" 2>/dev/null ) &
        }
        trap 'kill -HUP "$pg" 2>/dev/null' HUP
        trap stop INT TERM

        while :; do
          [ -z "$stopping" ] || exit 0
          prepare || { [ -n "$stopping" ] && exit 0; log "could not prepare the data directory"; exit 1; }
          [ -z "$stopping" ] || exit 0
          if [ -f "$PGDATA/standby.signal" ]; then log "starting as a standby"; else log "starting as the primary"; fi
          postgres -c config_file=/local/postgresql.conf &
          pg=$!
          status=0
          while kill -0 "$pg" 2>/dev/null; do
            wait "$pg"
            status=$?
          done
          [ -z "$stopping" ] || exit 0
          if [ -f /data/switchover ]; then
            # The switchover command stopped postgres. It leaves
            # standby.signal when the standby was promoted, and takes it
            # away if the switchover was undone: wait for it to finish,
            # then start as whatever it left.
            log "postgres stopped for a switchover; waiting for it to finish"
            n=0
            while [ -f /data/switchover ] && [ "$n" -lt 300 ]; do sleep 1; n=$((n + 1)); done
            rm -f /data/switchover
            continue
          fi
          log "postgres exited ($status)"
          exit 1
        done
        EOT
      }

      # The check "ready" (service pg): accepting connections. Any failure
      # is critical (exit 2), never a warning.
      template {
        destination = "local/ready.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        pg_isready -q || exit 2
        EOT
      }

      # Sets the roles' passwords to those the Nomad Variable holds now
      # (after nomad var put): nomad alloc exec -task postgres <the
      # primary's allocation> /local/set-passwords.sh. The standbys get
      # them by replication.
      template {
        destination = "local/set-passwords.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        [ "$(local_role)" = primary ] || { echo "$POD is not the primary: run this in the primary"; exit 1; }
        # What Nomad rendered last (start.sh takes it within 10s).
        f=/secrets/roles.sql
        [ ! -f "$f.in" ] || f="$f.in"
        sql -f "$f" && echo "$POD: the passwords of ${var.credentials} are set"
        EOT
      }

      # The check "primary" (service pg-primary): passes only on the
      # member that is not in recovery.
      template {
        destination = "local/is-primary.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        r=$(local_role)
        echo "$POD is $r"
        [ "$r" = primary ] || exit 2
        EOT
      }

      # statefulset_switchover_command: run in the primary; promotes the
      # first of $NSS_CANDIDATE_PODS (the daemon's order: those at the
      # update revision first) that will do: one that answers, whose WAL
      # replay is not paused (pg_wal_replay_pause(): an operator holding it
      # back, a delayed copy), and that streams from this primary having
      # replayed within MAX_LAG_BYTES of it. The others are skipped, and
      # their reasons printed. If none will do within 30s (at once if every
      # one is paused), it fails, saying why for each: the daemon then tries
      # again with its next candidate first, and holds the step once every
      # candidate failed. Exit 0 once the target is the primary.
      #
      # Why no acknowledged write is lost. A commit is acknowledged only
      # once its WAL is flushed on the primary. The primary is stopped with
      # a fast shutdown: open transactions are rolled back (never
      # acknowledged), no new ones start, a shutdown checkpoint is written
      # as the last WAL record, and the WAL senders send everything up to
      # and including it to the connected standbys and wait for them to
      # confirm it before they exit. So every acknowledged commit lies
      # before that checkpoint, at an LSN the script reads from
      # pg_controldata. The target is promoted only once it has replayed
      # past that LSN; if it does not get there, the switchover is undone
      # and this member starts again as the primary, with its data. After
      # the promotion the target's new timeline branches off after the
      # checkpoint, so its history holds every acknowledged commit, and
      # this member, with nothing the target lacks, follows it as a
      # standby without a rewind.
      #
      # And this member never writes again as a primary: standby.signal is
      # in its data directory before it stops, so however postgres starts
      # there next (start.sh, a new allocation), it starts in recovery.
      template {
        destination = "local/switchover.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        say() { echo "switchover: $*"; }
        fail() { echo "switchover failed: $*"; exit 1; }
        # The candidates, in the daemon's order; a daemon older than
        # NSS_CANDIDATE_PODS names one, NSS_TARGET_POD.
        candidates="$${NSS_CANDIDATE_PODS:-$NSS_TARGET_POD}"
        [ -n "$candidates" ] || fail "no candidate (NSS_CANDIDATE_PODS and NSS_TARGET_POD are empty)"
        # resolve: finds the target's address, for up to 20s.
        resolve() {
          n=0
          until addr=$(member "$target"); do
            n=$((n + 1))
            [ "$n" -lt 40 ] || return 1
            sleep 0.5
          done
          set -- $addr
          thost=$1 tport=$2
        }
        tsql() { sql -h "$thost" -p "$tport" "$@" </dev/null; }

        role=$(local_role)
        if [ "$role" != primary ]; then
          # Run again after it went through (or by mistake elsewhere).
          for target in $candidates; do
            addr=$(member "$target") || continue
            set -- $addr
            [ "$(sql -h "$1" -p "$2" -c 'select pg_is_in_recovery()' </dev/null 2>/dev/null)" = f ] && { say "$target is the primary already"; exit 0; }
          done
          fail "$POD is not the primary (it is $role)"
        fi

        # The target: the first candidate that streams from this primary,
        # nearly caught up (the write pause below is then a moment, and the
        # shutdown's WAL reaches it), and whose replay is not paused (it
        # would never replay the shutdown checkpoint). A candidate that
        # does not answer or does not stream yet may still: it is asked
        # again for up to 30s; a paused one is not waited for.
        n=0 target=""
        while :; do
          why="" waiting=""
          for c in $candidates; do
            [ "$c" != "$POD" ] || continue
            if ! addr=$(member "$c"); then
              why="$why, $c does not answer at any address Consul lists for it" waiting=1
              continue
            fi
            set -- $addr
            case "$(sql -h "$1" -p "$2" -c 'select pg_is_wal_replay_paused()' </dev/null 2>/dev/null)" in
              f) ;;
              t)
                why="$why, $c's WAL replay is paused (pg_wal_replay_resume() lets it go on)"
                continue
                ;;
              *)
                why="$why, $c does not say whether its replay is paused" waiting=1
                continue
                ;;
            esac
            lag=$(sql -c "select pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) from pg_stat_replication where application_name = '$c' and state = 'streaming'")
            if [ -z "$lag" ] || [ "$lag" -gt "$MAX_LAG_BYTES" ]; then
              why="$why, $c does not stream from $POD having replayed within $MAX_LAG_BYTES bytes (lag: $${lag:-not streaming})" waiting=1
              continue
            fi
            target=$c thost=$1 tport=$2
            break
          done
          [ -z "$target" ] || break
          n=$((n + 1))
          [ -n "$waiting" ] && [ "$n" -lt 60 ] || fail "no candidate will do:$${why#,}"
          sleep 0.5
        done
        [ -z "$why" ] || say "skipped:$${why#,}"
        say "promoting $target (candidates: $candidates)"

        # The slots the new primary must keep: those of the members that
        # stream from this one now or that Consul lists (one that is away
        # for a moment keeps its WAL), and this member's own, for when it
        # follows the target. Those of members that are neither (scaled
        # away, renamed) are left behind, and dropped here once this
        # member is a standby (start.sh).
        listed=" $SLOT "
        while read -r a p tags; do
          # shellcheck disable=SC2086
          [ -n "$a" ] && pod=$(podof $tags) && listed="$listed$(slotof "$pod") "
        done < /local/members
        slots="$SLOT"
        for s in $(sql -c "select slot_name || '=' || active from pg_replication_slots where slot_type = 'physical'"); do
          case "$s" in
            *=true) slots="$slots $${s%=*}" ;;
            *) case "$listed" in *" $${s%=*} "*) slots="$slots $${s%=*}" ;; esac ;;
          esac
        done
        tslot=$(slotof "$target")

        # From here on this member must not come back as a primary on its
        # own: standby.signal first, and /data/switchover tells start.sh to
        # wait for this script instead of exiting when postgres stops.
        touch /data/switchover "$PGDATA/standby.signal" || fail "cannot write $PGDATA"
        undo() {
          rm -f "$PGDATA/standby.signal" /data/switchover
          fail "$*; undone: $POD starts again as the primary"
        }
        pg_ctl stop -w -s -m fast -t 60 || undo "pg_ctl stop -m fast failed"
        state=$(pg_controldata "$PGDATA" | sed -n 's/^Database cluster state: *//p')
        end=$(pg_controldata "$PGDATA" | sed -n 's/^Latest checkpoint location: *//p')
        [ "$state" = "shut down" ] && [ -n "$end" ] || undo "the primary did not shut down cleanly ($state)"

        # The target must have replayed the shutdown checkpoint: all of
        # this primary's WAL.
        n=0
        until [ "$(tsql -c "select pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '$end') > 0" 2>/dev/null)" = t ]; do
          n=$((n + 1))
          [ "$n" -lt 60 ] || undo "$target did not replay the WAL up to $end in 30s"
          sleep 0.5
          resolve || true
        done
        ok=$(tsql -c "select pg_promote(true, 60)" 2>&1)
        if [ "$ok" != t ]; then
          # The promotion may still complete: not undone (two primaries
          # would be worse); this member stays a standby.
          rm -f /data/switchover
          fail "pg_promote on $target: $ok"
        fi
        # The new primary keeps the slots (created once it is promoted: a
        # standby drops the slots it has).
        made=""
        for s in $slots; do
          [ "$s" != "$tslot" ] || continue
          case " $made " in *" $s "*) continue ;; esac
          tsql -c "select count(pg_create_physical_replication_slot('$s', true)) from (select 1) x where not exists (select from pg_replication_slots where slot_name = '$s')" >/dev/null 2>&1 ||
            echo "switchover: could not create the slot $s on $target (its member creates it when it follows)"
          made="$made $s"
        done
        rm -f /data/switchover
        say "$POD stopped at $end; $target promoted, keeping the slots$made; $POD restarts as its standby"
        EOT
      }

      # statefulset_disruption_check: run in a Ready member other than
      # $NSS_TARGET_POD; exit 0 if the cluster can lose that member now.
      # No: when the operator holds disruptions (a row in
      # nss_disruption_hold), when no primary is known, or when fewer than
      # MIN_STREAMING_STANDBYS standbys other than the target stream from
      # the primary within MAX_LAG_BYTES of it (losing the target would
      # leave the primary without a caught-up copy).
      template {
        destination = "local/can-lose-one.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = <<-EOT
        #!/bin/sh
        . /local/lib.sh
        target="$NSS_TARGET_POD"
        no() { echo "no: $*"; exit 1; }
        if [ "$(local_role)" = primary ]; then
          psrv="" pname="$POD"
        else
          p=$(primary) || no "no primary is known"
          set -- $p
          psrv="-h $1 -p $2" pname=$3
        fi
        # shellcheck disable=SC2086
        held=$(sql $psrv -c "select string_agg(reason, '; ') from nss_disruption_hold") || no "cannot ask the primary $pname"
        [ -z "$held" ] || no "disruptions are held: $held"
        # shellcheck disable=SC2086
        ok=$(sql $psrv -c "select count(*) from pg_stat_replication where state = 'streaming' and application_name <> '$target' and pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) <= $MAX_LAG_BYTES") || no "cannot ask the primary $pname"
        [ "$ok" -ge "$MIN_STREAMING_STANDBYS" ] || no "without $target, $ok standby(s) stream from the primary $pname within $MAX_LAG_BYTES bytes; $MIN_STREAMING_STANDBYS needed"
        echo "yes: without $target, $ok standby(s) stream from the primary $pname"
        EOT
      }
    }
  }
}

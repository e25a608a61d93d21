#!/usr/bin/env bash
# make demo / make demo-down.
#
#   scripts/demo.sh up     start Consul, Nomad and nomad-statefulset on loopback,
#                          run the example (examples/web.nomad.hcl unless
#                          EXAMPLE says otherwise) and watch it converge
#   scripts/demo.sh down   stop everything `up` started
#   scripts/demo.sh status show what is running
#   scripts/demo.sh check  check that what the example needs is installed
#   scripts/demo.sh kill-node NODE|POD   kill a client node as a machine dies
#                          (SIGKILL to its Nomad and Consul agents and to every
#                          task it runs); POD names the node that runs it
#   scripts/demo.sh start-node [NODE]    start a killed node again, on its data
#                          (without NODE, every node that is not running)
#
# EXAMPLE=web (the default), nats (examples/nats: Debian's nats-server) or
# postgres (examples/postgres: Debian's postgresql-15). An example that
# runs a real program needs its Debian package on this machine: `check`
# (and `up`) say which, with the apt-get line, when it is missing.
#
# Everything lives under .cache/demo/: each program's config, data, log and
# pid file, and env.sh with the addresses. Ports are free ones picked at
# start, on 127.0.0.1 only. `make demo` builds the binaries first
# (`make tools build`); run directly, this script expects them built.
#
# Nodes: web runs on one agent that is Nomad server and client (and one
# Consul). nats and postgres run on DEMO_NODES client nodes (default 3,
# named demo-0, demo-1, …), each a Nomad client with a Consul agent of its
# own as in production (Nomad clients sharing one Consul agent remove each
# other's services), beside one Nomad server and one Consul server; so
# that a node can be drained or killed while the others keep the set's
# majority.
#
# Environment: DEMO_TIMEOUT (seconds to wait for the set to be ready,
# default 300), DEMO_NO_DAEMON=1 (start only Consul and Nomad: for testing
# this script without the daemon), DEMO_NODES, DEMO_DIR (where it all
# lives, default .cache/demo), NOMAD_BIN, CONSUL_BIN and NSS_BIN (the
# binaries, default .cache/bin/nomad, .cache/bin/consul and
# bin/nomad-statefulset).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
demo="${DEMO_DIR:-${root}/.cache/demo}"
bin="${root}/.cache/bin"
nomad_bin="${NOMAD_BIN:-${bin}/nomad}"
consul_bin="${CONSUL_BIN:-${bin}/consul}"
nss="${NSS_BIN:-${root}/bin/nomad-statefulset}"
timeout="${DEMO_TIMEOUT:-300}"
example="${EXAMPLE:-web}"

# Nomad's AWS fingerprinter aborts the client when this is set.
unset AWS_CA_BUNDLE
# Never talk to some other Nomad or Consul by accident.
unset NOMAD_ADDR NOMAD_TOKEN NOMAD_NAMESPACE NOMAD_REGION CONSUL_HTTP_ADDR CONSUL_HTTP_TOKEN

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() {
	printf 'demo: %s\n' "$*" >&2
	exit 1
}

alive() { # pidfile
	[[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Ports are picked in [10000, 20000), as internal/testagent picks its own:
# below Nomad's dynamic ports (20000-32000), which the examples' allocations
# bind, and below Linux's ephemeral range (32768-60999), where every
# outgoing connection takes its local port. A port picked there can be
# taken by a connection between the pick and the agent's bind: a demo
# Nomad failed with "bind: address already in use" on 127.0.0.1:42202 in a
# CI run on a fresh machine.
declare -A picked=()
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((10000 + RANDOM % 10000))
		if [[ -z "${picked[$p]:-}" ]] && ! port_in_use "$p"; then
			picked[$p]=1
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# start NAME DIR CMD... : runs CMD in its own session (so that demo-down can
# kill its whole process group), output to DIR/NAME.log, pid to DIR/NAME.pid.
start() {
	local name="$1" dir="$2"
	shift 2
	mkdir -p "${dir}"
	(cd "${dir}" && exec setsid "$@" >>"${dir}/${name}.log" 2>&1 </dev/null) &
	echo $! >"${dir}/${name}.pid"
}

# up_or_exited URL SECONDS PIDFILE: waits until URL answers (true) or the
# process of PIDFILE has exited (false); false too after SECONDS.
up_or_exited() {
	local url="$1" secs="$2" pidfile="$3"
	for _ in $(seq 1 $((secs * 2))); do
		alive "${pidfile}" || return 1
		http_get "${url}" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

wait_http() { # what url seconds [pidfile]
	local what="$1" url="$2" secs="$3" pidfile="${4:-}"
	for _ in $(seq 1 $((secs * 2))); do
		if [[ -n "${pidfile}" ]] && ! alive "${pidfile}"; then
			echo "--- last lines of $(dirname "${pidfile}")/*.log:" >&2
			tail -n 30 "$(dirname "${pidfile}")"/*.log >&2 || true
			die "${what} exited"
		fi
		if http_get "${url}" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	die "timed out after ${secs}s waiting for ${what} at ${url}"
}

# http_get URL: prints the body of a 200 answer from 127.0.0.1, with bash
# alone (curl may not be installed on a fresh machine).
http_get() {
	local url="$1" hostport path host port line status
	hostport="${url#http://}"
	path="/${hostport#*/}"
	hostport="${hostport%%/*}"
	host="${hostport%:*}"
	port="${hostport##*:}"
	exec 5<>"/dev/tcp/${host}/${port}" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\n' "${path}" "${hostport}" >&5
	if [[ -n "${HTTP_TOKEN_HEADER:-}" ]]; then printf '%s\r\n' "${HTTP_TOKEN_HEADER}" >&5; fi
	printf '\r\n' >&5
	IFS= read -r status <&5 || return 1
	while IFS= read -r line <&5; do
		[[ "${line}" == $'\r' || -z "${line}" ]] && break
	done
	cat <&5
	exec 5>&-
	[[ "${status}" == *" 200 "* ]]
}

# The example: its job file and set, the program it needs on the node and
# the Debian package that has it, what the demo's exec chroot must hold
# beyond the minimal one (host=inside; Nomad's default chroot would copy
# all of /usr into every allocation), and more daemon configuration.
ex_file="" ex_set="" ex_need="" ex_pkg="" ex_agent_hcl="" nodes=1
ex_chroot=()

select_example() {
	case "${example}" in
	web)
		ex_file="examples/web.nomad.hcl" ex_set="web"
		;;
	nats)
		ex_file="examples/nats/nats.nomad.hcl" ex_set="nats"
		ex_need="/usr/sbin/nats-server" ex_pkg="nats-server"
		;;
	postgres)
		ex_file="examples/postgres/postgres.nomad.hcl" ex_set="postgres"
		ex_need="/usr/lib/postgresql/15/bin/postgres" ex_pkg="postgresql-15"
		;;
	*)
		die "EXAMPLE=${example}: no such example; there are web, nats and postgres"
		;;
	esac
	[[ -f "${root}/${ex_file}" ]] || die "EXAMPLE=${example}: ${ex_file} is not in this checkout"
	if [[ -n "${ex_need}" && ! -x "${ex_need}" ]]; then
		printf 'demo: EXAMPLE=%s runs %s, from the Debian package %s, which is not installed. Install it with:\n\n    sudo apt-get install -y %s\n\n' \
			"${example}" "${ex_need}" "${ex_pkg}" "${ex_pkg}" >&2
		exit 1
	fi
	nodes="${DEMO_NODES:-3}"
	[[ "${example}" == web ]] && nodes="${DEMO_NODES:-1}"
	[[ "${nodes}" =~ ^[1-9][0-9]?$ ]] || die "DEMO_NODES=${nodes}: want a number of nodes from 1 to 99"
	case "${example}" in
	nats)
		ex_chroot=("/usr/sbin/nats-server=/usr/sbin/nats-server")
		;;
	postgres)
		postgres_needs
		;;
	esac
}

# postgres_needs: what e2e/postgres_test.go gives the example, the same way:
# PostgreSQL's programs, libraries and share files, the time zone data, the
# utilities its scripts call and every library they link against (ldd);
# and volumes owned by the postgres user, which the task runs as.
postgres_needs() {
	local u real lib
	local -a elfs=()
	ex_chroot=("/usr/lib/postgresql/15=/usr/lib/postgresql/15" "/usr/share/postgresql/15=/usr/share/postgresql/15"
		"/usr/share/zoneinfo=/usr/share/zoneinfo")
	for u in sed rm mkdir chmod mv sleep; do
		real="$(readlink -f "/usr/bin/${u}")"
		ex_chroot+=("${real}=/bin/${u}")
		elfs+=("${real}")
	done
	elfs+=(/usr/lib/postgresql/15/bin/* /usr/lib/postgresql/15/lib/*.so)
	while read -r lib; do
		ex_chroot+=("$(readlink -f "${lib}")=/lib/x86_64-linux-gnu/$(basename "${lib}")")
	done < <(for f in "${elfs[@]}"; do ldd "${f}" 2>/dev/null || true; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
	ex_agent_hcl="volume_provisioner {
  config = { plugin_id = \"mkdir\", \"parameters.uid\" = \"$(id -u postgres)\", \"parameters.gid\" = \"$(id -g postgres)\", \"parameters.mode\" = \"0700\" }
}"
}

# postgres_credentials: the Nomad Variable examples/postgres reads its
# passwords from, which must exist before it runs: new random passwords,
# kept in DEMO_DIR/postgres-credentials too. (A fresh Nomad refuses
# variables until its keyring is initialized: a few tries.)
postgres_credentials() {
	local su repl i
	su="$(head -c 18 /dev/urandom | base64)" repl="$(head -c 18 /dev/urandom | base64)"
	(umask 077 && printf 'postgres_password=%s\nreplication_password=%s\n' "${su}" "${repl}" >"${demo}/postgres-credentials")
	say "nomad var put nomad/jobs/postgres (the example's passwords; also in ${demo}/postgres-credentials)"
	for i in 1 2 3 4 5 6 7 8 9 10; do
		"${nomad_bin}" var put -force nomad/jobs/postgres postgres_password="${su}" replication_password="${repl}" >/dev/null && return 0
		sleep 2
	done
	die "could not write the Nomad Variable nomad/jobs/postgres"
}

# nomad_agent NAME NODE DIR HTTP RPC SERF CONSUL [nomadconfig flags...]:
# writes DIR/nomad.hcl and starts the agent.
nomad_agent() {
	local name="$1" node="$2" dir="$3" http="$4" rpc="$5" serf="$6" consul="$7"
	shift 7
	mkdir -p "${dir}/data" "${dir}/host_volumes" "${dir}/host_volume_plugins"
	(cd "${root}" && go run ./internal/testagent/cmd/nomadconfig -name "${node}" "$@" \
		-data-dir "${dir}/data" -host-volumes-dir "${dir}/host_volumes" \
		-host-volume-plugin-dir "${dir}/host_volume_plugins" \
		-http "${http}" -rpc "${rpc}" -serf "${serf}" -consul "${consul}") >"${dir}/nomad.hcl"
	start_nomad "${name}" "${dir}"
}

# start_nomad NAME DIR: starts the agent configured in DIR/nomad.hcl. Its
# plugins (every task's executor and logmon) put their sockets in
# DIR/plugins, which down removes: in /tmp, a plugin that is killed leaves
# its socket behind. A unix socket's path holds at most 107 bytes, and a
# plugin adds 17 to the directory's, so a longer DEMO_DIR keeps Nomad's
# default (/tmp).
start_nomad() {
	local name="$1" dir="$2" sockets="$2/plugins"
	local env=()
	if ((${#sockets} <= 90)); then
		mkdir -p "${sockets}"
		env=(PLUGIN_UNIX_SOCKET_DIR="${sockets}")
	fi
	start "${name}" "${dir}" env ${env[@]+"${env[@]}"} "${nomad_bin}" agent -config "${dir}/nomad.hcl"
}

# consul_client NODE DIR HTTP SERVER_SERF_LAN: a Consul client agent that
# joins the server.
consul_client() {
	local node="$1" dir="$2" http="$3" join="$4"
	mkdir -p "${dir}"
	cat >"${dir}/consul.hcl" <<EOF
node_name            = "${node}"
datacenter           = "dc1"
data_dir             = "${dir}/data"
server               = false
retry_join           = ["127.0.0.1:${join}"]
bind_addr            = "127.0.0.1"
client_addr          = "127.0.0.1"
advertise_addr       = "127.0.0.1"
disable_update_check = true
ports {
  http     = ${http}
  dns      = -1
  server   = $(free_port)
  serf_lan = $(free_port)
  serf_wan = -1
  grpc     = -1
  grpc_tls = -1
  https    = -1
}
EOF
	start consul "${dir}" "${consul_bin}" agent -config-file "${dir}/consul.hcl"
	wait_http "Consul on ${node}" "http://127.0.0.1:${http}/v1/status/leader" 60 "${dir}/consul.pid"
}

# ready_nodes: how many Nomad client nodes are ready with a healthy exec
# driver.
ready_nodes() {
	"${nomad_bin}" node status -t '{{range .}}{{if eq .Status "ready"}}{{with index .Drivers "exec"}}{{if .Healthy}}x{{end}}{{end}}{{end}}{{end}}' 2>/dev/null | tr -cd x | wc -c
}

up() {
	select_example
	[[ -x "${nomad_bin}" && -x "${consul_bin}" ]] || die "no ${nomad_bin} or ${consul_bin}: run \`make tools\` (or \`make demo\`)"
	if [[ -z "${DEMO_NO_DAEMON:-}" && ! -x "${nss}" ]]; then
		die "no ${nss}: run \`make build\` (or \`make demo\`)"
	fi
	if alive "${demo}/consul/consul.pid" || alive "${demo}/nomad/nomad.pid" || alive "${demo}/daemon/nomad-statefulset.pid"; then
		say "the demo is already running:"
		status
		echo
		echo "Stop it with: make demo-down"
		return 0
	fi
	rm -rf "${demo}"
	mkdir -p "${demo}"
	if [[ "${example}" == nats ]]; then
		say "building natsctl, the tutorial's NATS client (examples/nats/natsctl) into bin/"
		go build -C "${root}/examples/nats/natsctl" -o "${root}/bin/natsctl" . || die "building natsctl failed"
	fi

	local consul_http consul_dns consul_server consul_lan consul_wan consul_grpc
	local nomad_http nomad_rpc nomad_serf nss_http
	consul_http=$(free_port) consul_dns=$(free_port) consul_server=$(free_port)
	consul_lan=$(free_port) consul_wan=$(free_port) consul_grpc=$(free_port)
	nomad_http=$(free_port) nomad_rpc=$(free_port) nomad_serf=$(free_port)
	nss_http=$(free_port)

	say "starting Consul on 127.0.0.1:${consul_http}"
	mkdir -p "${demo}/consul"
	cat >"${demo}/consul/consul.hcl" <<EOF
node_name            = "demo"
datacenter           = "dc1"
data_dir             = "${demo}/consul/data"
server               = true
bootstrap_expect     = 1
bind_addr            = "127.0.0.1"
client_addr          = "127.0.0.1"
advertise_addr       = "127.0.0.1"
disable_update_check = true
ui_config { enabled = true }
connect { enabled = true }
ports {
  http     = ${consul_http}
  dns      = ${consul_dns}
  server   = ${consul_server}
  serf_lan = ${consul_lan}
  serf_wan = ${consul_wan}
  grpc     = ${consul_grpc}
  grpc_tls = -1
  https    = -1
}
EOF
	start consul "${demo}/consul" "${consul_bin}" agent -config-file "${demo}/consul/consul.hcl"
	wait_http "Consul" "http://127.0.0.1:${consul_http}/v1/status/leader" 60 "${demo}/consul/consul.pid"
	for _ in $(seq 1 120); do
		[[ "$(http_get "http://127.0.0.1:${consul_http}/v1/status/leader" 2>/dev/null || true)" == *:* ]] && break
		sleep 0.5
	done

	# The same agent configuration as the e2e harness, from one place
	# (internal/testagent.NomadConfigHCL).
	local -a chroot_flags=()
	local c
	for c in "${ex_chroot[@]}"; do chroot_flags+=(-chroot "${c}"); done
	export NOMAD_ADDR="http://127.0.0.1:${nomad_http}"
	if ((nodes == 1)); then
		say "starting Nomad on 127.0.0.1:${nomad_http}"
		nomad_agent nomad demo "${demo}/nomad" "${nomad_http}" "${nomad_rpc}" "${nomad_serf}" \
			"127.0.0.1:${consul_http}" "${chroot_flags[@]}"
		wait_http "Nomad" "${NOMAD_ADDR}/v1/status/leader" 60 "${demo}/nomad/nomad.pid"
	else
		say "starting the Nomad server on 127.0.0.1:${nomad_http}"
		nomad_agent nomad demo-server "${demo}/nomad" "${nomad_http}" "${nomad_rpc}" "${nomad_serf}" \
			"127.0.0.1:${consul_http}" -client=false
		wait_http "Nomad" "${NOMAD_ADDR}/v1/status/leader" 60 "${demo}/nomad/nomad.pid"
		local i dir chttp
		for ((i = 0; i < nodes; i++)); do
			dir="${demo}/node-demo-${i}"
			chttp=$(free_port)
			say "starting node demo-${i}: a Consul agent on 127.0.0.1:${chttp} and a Nomad client"
			consul_client "demo-${i}" "${dir}/consul" "${chttp}" "${consul_lan}"
			nomad_agent nomad "demo-${i}" "${dir}/nomad" "$(free_port)" "$(free_port)" "$(free_port)" \
				"127.0.0.1:${chttp}" -server=false -servers "127.0.0.1:${nomad_rpc}" "${chroot_flags[@]}"
		done
	fi
	say "waiting for ${nodes} Nomad client node(s) with the exec driver"
	local ok=""
	for _ in $(seq 1 240); do
		alive "${demo}/nomad/nomad.pid" || die "Nomad exited; see ${demo}/nomad/nomad.log"
		if (($(ready_nodes) >= nodes)); then
			ok=1
			break
		fi
		sleep 0.5
	done
	[[ -n "${ok}" ]] || die "the Nomad nodes or their exec driver did not become ready; see ${demo}/*/nomad.log"

	local path_dirs="" d
	for d in "$(dirname "${nss}")" "$(dirname "${nomad_bin}")" "$(dirname "${consul_bin}")" "${root}/bin"; do
		[[ ":${path_dirs}:" == *":${d}:"* ]] || path_dirs="${path_dirs:+${path_dirs}:}${d}"
	done
	cat >"${demo}/env.sh" <<EOF
# source .cache/demo/env.sh
export NOMAD_ADDR=http://127.0.0.1:${nomad_http}
export CONSUL_HTTP_ADDR=127.0.0.1:${consul_http}
export NOMAD_STATEFULSET_ADDR=http://127.0.0.1:${nss_http}
export PATH="${path_dirs}:\$PATH"
EOF

	if [[ -n "${DEMO_NO_DAEMON:-}" ]]; then
		say "DEMO_NO_DAEMON is set: Consul and Nomad are up, the daemon is not started"
		hints
		return 0
	fi

	# The daemon's port was picked before Consul and Nomad started, seconds
	# ago: another program can have taken it since (a CI run's TestDemo
	# lost it to a test beside it, whose agents pick from the same range).
	# Then the daemon says "address already in use", and it is started
	# again on another port, up to three times.
	local attempt
	for attempt in 1 2 3; do
		say "starting nomad-statefulset on 127.0.0.1:${nss_http}"
		mkdir -p "${demo}/daemon"
		cat >"${demo}/daemon/agent.hcl" <<EOF
data_dir = "${demo}/daemon/data"
nomad {
  address = "http://127.0.0.1:${nomad_http}"
}
consul {
  address = "127.0.0.1:${consul_http}"
}
http {
  address = "127.0.0.1:${nss_http}"
}
${ex_agent_hcl}
EOF
		start nomad-statefulset "${demo}/daemon" "${nss}" agent -config "${demo}/daemon/agent.hcl"
		if ((attempt < 3)) && ! up_or_exited "http://127.0.0.1:${nss_http}/v1/health" 60 "${demo}/daemon/nomad-statefulset.pid" &&
			grep -q "127.0.0.1:${nss_http}: bind: address already in use" "${demo}/daemon/nomad-statefulset.log"; then
			echo "  port ${nss_http} was taken before the daemon could listen on it; picking another" >&2
			nss_http=$(free_port)
			sed -i "s#^export NOMAD_STATEFULSET_ADDR=.*#export NOMAD_STATEFULSET_ADDR=http://127.0.0.1:${nss_http}#" "${demo}/env.sh"
			continue
		fi
		break
	done
	wait_http "nomad-statefulset" "http://127.0.0.1:${nss_http}/v1/health" 60 "${demo}/daemon/nomad-statefulset.pid"

	example_secrets
	say "nomad job run ${ex_file}"
	"${nomad_bin}" job run -detach "${root}/${ex_file}"

	say "waiting for ${ex_set} to be ready (up to ${timeout}s)"
	export NOMAD_STATEFULSET_ADDR="http://127.0.0.1:${nss_http}"
	local start_s=${SECONDS} last="" body ready replicas
	while true; do
		body="$(http_get "${NOMAD_STATEFULSET_ADDR}/v1/statefulset/default/${ex_set}" 2>/dev/null || true)"
		ready="$(sed -n 's/.*"ready_replicas": *\([0-9]*\).*/\1/p' <<<"${body}" | head -n 1)"
		replicas="$(sed -n 's/.*"replicas": *\([0-9]*\).*/\1/p' <<<"${body}" | head -n 1)"
		local line="${ex_set}: ${ready:-?}/${replicas:-?} ready"
		if [[ "${line}" != "${last}" ]]; then
			echo "  [$((SECONDS - start_s))s] ${line}"
			"${nss}" status "${ex_set}" 2>/dev/null | sed 's/^/    /' || true
			last="${line}"
		fi
		if [[ -n "${ready}" && "${ready}" == "${replicas}" && "${replicas}" != 0 ]]; then
			break
		fi
		if ((SECONDS - start_s > timeout)); then
			echo "--- last lines of the daemon log:"
			tail -n 40 "${demo}/daemon/nomad-statefulset.log" || true
			die "${ex_set} did not become ready in ${timeout}s (the demo keeps running: look around, then make demo-down)"
		fi
		alive "${demo}/daemon/nomad-statefulset.pid" || die "nomad-statefulset exited; see ${demo}/daemon/nomad-statefulset.log"
		sleep 1
	done
	say "${ex_set} is ready: $(("SECONDS" - start_s))s"
	"${nss}" status "${ex_set}" || true
	hints
}

hints() {
	# shellcheck disable=SC1091
	source "${demo}/env.sh"
	cat <<EOF

The demo is running on 127.0.0.1. To look around, in your shell:

  source .cache/demo/env.sh            # NOMAD_ADDR, CONSUL_HTTP_ADDR, NOMAD_STATEFULSET_ADDR, PATH

$(printf '  %-36s # %s' "nomad-statefulset status ${ex_set}" "the set: replicas, revisions, pods")
  nomad job status                     # the parent "${ex_set}" and its children ${ex_set}-0, ${ex_set}-1, ${ex_set}-2
  nomad volume status -type host       # the per-ordinal volumes data-${ex_set}-0 ...
$(example_hints)

  Nomad UI/API:      ${NOMAD_ADDR}
  Consul UI/API:     http://${CONSUL_HTTP_ADDR}/ui/
  nomad-statefulset: ${NOMAD_STATEFULSET_ADDR}/v1/statefulset/default/${ex_set}
                     ${NOMAD_STATEFULSET_ADDR}/v1/metrics
  Logs:              .cache/demo/{consul,nomad,daemon}/*.log

Stop everything with: make demo-down
EOF
}

# example_secrets: the Nomad Variable an example reads its credentials
# from, made before the job runs, as the example's header says. nats: the
# clients' and the routes' users and random passwords in nomad/jobs/nats
# (natsctl reads them back from there, with NOMAD_ADDR).
example_secrets() {
	case "${ex_set}" in
	postgres)
		postgres_credentials
		;;
	nats)
		say "nomad var put nomad/jobs/nats: a user and a random password for its clients, another for its routes"
		"${nomad_bin}" var put -out none nomad/jobs/nats \
			user=app password="$(random_hex)" route_user=route route_password="$(random_hex)" >/dev/null
		;;
	esac
}

# random_hex: 24 random bytes in hex, as `openssl rand -hex 24` (which a
# fresh machine may not have).
random_hex() {
	od -An -N24 -tx1 /dev/urandom | tr -d ' \n'
}

example_hints() {
	case "${ex_set}" in
	web)
		cat <<EOF
  nomad alloc exec -job web-0 cat /data/identity
  nomad-statefulset scale web 5        # then watch: nomad-statefulset status web
  nomad job run examples/web.nomad.hcl # after editing the task: a rolling update, highest ordinal first
EOF
		;;
	nats)
		cat <<EOF
  natsctl servers                      # the members as Consul and NATS see them
  scripts/demo.sh kill-node nats-1     # the node of nats-1 dies; start-node demo-<n> brings it back

  docs/tutorial-nats.md, "Running a replicated database", walks through this cluster:
  identities, data, a rolling update, a drain, a lost node, scaling.
EOF
		;;
	*)
		cat <<EOF
  nomad job run ${ex_file}             # after editing the task: a rolling update
EOF
		;;
	esac
}

# kill_tree NAME PIDFILE: TERM the process group, then KILL what is left.
kill_tree() {
	local name="$1" pidfile="$2" pid
	[[ -f "${pidfile}" ]] || return 0
	pid="$(cat "${pidfile}")"
	if kill -0 "${pid}" 2>/dev/null; then
		echo "stopping ${name} (pid ${pid})"
		kill -INT -- "-${pid}" 2>/dev/null || kill -INT "${pid}" 2>/dev/null || true
		for _ in $(seq 1 40); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL -- "-${pid}" 2>/dev/null || true
	fi
	rm -f "${pidfile}"
}

# referrers DIR: processes that still refer to DIR (Nomad tasks,
# executors, logmon): by working directory, root or command line.
referrers() {
	local dir="$1"
	# Two processes for the whole of /proc, not a few per process: on a
	# busy machine a fork per process made `down` take minutes.
	{
		find /proc -mindepth 2 -maxdepth 2 \( -name cwd -o -name root -o -name exe \) \
			-lname "${dir}/*" -printf '%h\n' 2>/dev/null || true
		grep -alF "${dir}/" /proc/[0-9]*/cmdline 2>/dev/null || true
	} | sed -n 's#^/proc/\([0-9][0-9]*\).*#\1#p' | grep -vx "$$" | sort -un || true
}

# kill_tasks DIR: SIGKILL every task process of the Nomad agent whose
# directory is DIR. exec tasks run chrooted in their own mount namespace:
# find them by their allocations' cgroups ("<alloc ID>.<task>"), kill them
# and remove the cgroups; then whatever still refers to DIR.
kill_tasks() {
	local dir="$1" id cg pids
	for id in $(ls "${dir}/data/alloc" 2>/dev/null); do
		[[ ${#id} == 36 ]] || continue
		for cg in $(find /sys/fs/cgroup -maxdepth 5 -type d -name "${id}.*" 2>/dev/null); do
			pids="$(cat "${cg}/cgroup.procs" 2>/dev/null | tr '\n' ' ')"
			if [[ -n "${pids// /}" ]]; then
				echo "stopping task processes of allocation ${id:0:8}: ${pids}"
				# shellcheck disable=SC2086
				kill -KILL ${pids} 2>/dev/null || true
				sleep 0.3
			fi
			rmdir "${cg}" 2>/dev/null || true
		done
	done
	for _ in 1 2 3 4 5; do
		pids="$(referrers "${dir}" | tr '\n' ' ')"
		[[ -z "${pids// /}" ]] && break
		echo "stopping leftover task processes: ${pids}"
		# shellcheck disable=SC2086
		kill -KILL ${pids} 2>/dev/null || true
		sleep 0.5
	done
}

down() {
	if [[ ! -d "${demo}" ]]; then
		echo "demo: nothing to stop"
		return 0
	fi
	local d
	kill_tree nomad-statefulset "${demo}/daemon/nomad-statefulset.pid"
	for d in "${demo}"/node-*; do
		[[ -d "${d}" ]] && kill_tree "nomad on ${d##*/node-}" "${d}/nomad/nomad.pid"
	done
	kill_tree nomad "${demo}/nomad/nomad.pid"
	for d in "${demo}"/node-*; do
		[[ -d "${d}" ]] && kill_tree "consul on ${d##*/node-}" "${d}/consul/consul.pid"
	done
	kill_tree consul "${demo}/consul/consul.pid"
	for d in "${demo}/nomad" "${demo}"/node-*/nomad; do
		[[ -d "${d}" ]] && kill_tasks "${d}"
	done
	kill_tasks "${demo}"
	# Nomad mounts secrets (tmpfs) and more under its data dir: detach them,
	# deepest first, before removing anything.
	awk -v d="${demo}/" 'index($5, d) == 1 {print length($5) " " $5}' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2- | while read -r mp; do umount -l "${mp}" 2>/dev/null || true; done
	rm -rf "${demo}"
	echo "demo: stopped, and ${demo} removed"
}

# node_dir NODE|POD: the directory of a client node, by its name (demo-1)
# or by a pod (a child job such as nats-1) that runs on it.
node_dir() {
	local arg="$1" node
	[[ -d "${demo}/node-${arg}" ]] && {
		echo "${demo}/node-${arg}"
		return
	}
	export NOMAD_ADDR
	NOMAD_ADDR="$(sed -n 's/^export NOMAD_ADDR=//p' "${demo}/env.sh" 2>/dev/null)"
	node="$("${nomad_bin}" job allocs -t '{{range .}}{{if eq .ClientStatus "running"}}{{.NodeName}}{{end}}{{end}}' "${arg}" 2>/dev/null || true)"
	if [[ -n "${node}" && -d "${demo}/node-${node}" ]]; then
		echo "${demo}/node-${node}"
		return
	fi
	if [[ -n "${node}" ]]; then
		die "${arg} runs on ${node}, which is also the Nomad server: this demo runs on one node (EXAMPLE=nats runs on three)"
	fi
	die "${arg}: neither a client node of the demo ($(ls -d "${demo}"/node-* 2>/dev/null | sed 's#.*/node-##' | tr '\n' ' ')) nor a job with a running allocation"
}

# kill-node: a machine that dies. Its Nomad client and its Consul agent are
# killed with SIGKILL, and so is every task they ran (a killed Nomad agent
# leaves its tasks running: a real machine would take them with it).
kill_node() {
	local dir node
	dir="$(node_dir "${1:?usage: $0 kill-node NODE|POD}")"
	node="${dir##*/node-}"
	alive "${dir}/nomad/nomad.pid" || die "node ${node} is not running"
	kill -KILL -- "-$(cat "${dir}/nomad/nomad.pid")" 2>/dev/null || true
	kill -KILL -- "-$(cat "${dir}/consul/consul.pid")" 2>/dev/null || true
	kill_tasks "${dir}/nomad" >/dev/null
	rm -f "${dir}/nomad/nomad.pid" "${dir}/consul/consul.pid"
	echo "node ${node} killed: its Nomad client, its Consul agent and its tasks"
}

# start-node [NODE]: the machine comes back, with its data; without NODE,
# every node that is not running.
start_node() {
	local dir node dirs=()
	if [[ -n "${1:-}" ]]; then
		dirs=("$(node_dir "$1")")
	else
		for dir in "${demo}"/node-*; do
			[[ -d "${dir}" ]] && ! alive "${dir}/nomad/nomad.pid" && dirs+=("${dir}")
		done
		((${#dirs[@]} > 0)) || die "every node is running"
	fi
	for dir in "${dirs[@]}"; do
		node="${dir##*/node-}"
		alive "${dir}/nomad/nomad.pid" && die "node ${node} is running"
		start consul "${dir}/consul" "${consul_bin}" agent -config-file "${dir}/consul/consul.hcl"
		start_nomad nomad "${dir}/nomad"
		echo "node ${node} started again"
	done
}

status() {
	local f
	for f in "${demo}/consul/consul.pid" "${demo}/nomad/nomad.pid" "${demo}"/node-*/*/*.pid "${demo}/daemon/nomad-statefulset.pid"; do
		[[ -e "${f}" || "${f}" != *'*'* ]] || continue
		local what
		what="$(basename "${f}" .pid)"
		[[ "${f}" == */node-* ]] && what="${what} on $(basename "$(dirname "$(dirname "${f}")")" | sed 's/^node-//')"
		if alive "${f}"; then
			echo "  ${what}: running (pid $(cat "${f}"))"
		else
			echo "  ${what}: not running"
		fi
	done
	if [[ -f "${demo}/env.sh" ]]; then
		sed -n 's/^export /  /p' "${demo}/env.sh"
	fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
check) select_example ;;
kill-node) kill_node "${2:-}" ;;
start-node) start_node "${2:-}" ;;
*)
	echo "usage: [EXAMPLE=web|nats|postgres] $0 up|down|status|check|kill-node NODE|POD|start-node [NODE]" >&2
	exit 2
	;;
esac

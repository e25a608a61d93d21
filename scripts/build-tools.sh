#!/usr/bin/env bash
# Builds the real nomad and consul binaries from the tools/nomad and
# tools/consul modules into .cache/bin/, once. A stamp file records what they
# were built from (the modules' go.mod and go.sum, the Go version and the
# build flags); when it matches and the binaries are there, nothing is
# rebuilt.
#
# Nomad and Consul are two modules because one build list cannot hold both:
# combined, MVS picks versions of OpenTelemetry and Envoy's go-control-plane
# that lack packages Consul imports.
#
# Build notes (see ../shared/DESIGN.md §6):
# - nomad is built with cgo (CGO_ENABLED=1, gcc): the exec driver's
#   libcontainer nsenter is C. No build tags: without `release`, Nomad's
#   catalog also registers the mock_driver, which the tests use. Without `ui`,
#   the web UI is a stub, which we don't need.
# - consul builds with plain `go build`.
# - GOFLAGS=-mod=readonly: go.sum is committed, nothing is resolved again.
#   GONOSUMDB covers the one module the checksum database does not know.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/.cache/bin"
mkdir -p "${bin}"

flags="-trimpath"
want="$(cat "${root}"/tools/{nomad,consul}/go.{mod,sum} | sha256sum | cut -c1-16) $(go env GOVERSION) cgo=1 ${flags}"
stamp="${bin}/tools.stamp"

if [[ -x "${bin}/nomad" && -x "${bin}/consul" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
	echo "tools: nomad and consul are up to date in ${bin} (${want})"
	exit 0
fi

export GOFLAGS=-mod=readonly
export GONOSUMDB=github.com/hashicorp/consul-awsauth
export CGO_ENABLED=1
rm -f "${stamp}"

build() { # name package
	local start=$SECONDS
	echo "tools: building $1 from $2 (tools/$1) ..."
	(cd "${root}/tools/$1" && go build ${flags} -o "${bin}/$1.tmp" "$2")
	mv "${bin}/$1.tmp" "${bin}/$1"
	echo "tools: built $1 in $((SECONDS - start))s"
}

# One after the other: each build already uses both cores, and running them
# together only doubles the peak memory.
build consul github.com/hashicorp/consul
build nomad github.com/hashicorp/nomad

"${bin}/nomad" version | sed -n 1p # sed reads all: no SIGPIPE under pipefail
"${bin}/consul" version | sed -n 1p # sed reads all: no SIGPIPE under pipefail
echo "${want}" >"${stamp}"

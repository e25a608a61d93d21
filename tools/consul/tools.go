//go:build tools

// Package tools pins the real Consul as a module dependency so that
// `make tools` can build its binary from the Go module proxy. See
// ../nomad/tools.go for why Nomad and Consul are separate modules.
package tools

import _ "github.com/hashicorp/consul"

//go:build tools

// Package tools pins the real Nomad as a module dependency so that
// `make tools` can build its binary from the Go module proxy. Nomad and
// Consul are separate modules: their dependency graphs do not combine (one
// build list cannot satisfy both), and neither may reach the main module.
package tools

import _ "github.com/hashicorp/nomad"

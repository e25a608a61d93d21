//go:build tools

// Package tools pins the real Nomad and Consul as module dependencies so that
// `make tools` can build their binaries from the Go module proxy. It is a
// separate module so that their heavy dependency trees never reach the main
// module.
package tools

import (
	_ "github.com/hashicorp/consul"
	_ "github.com/hashicorp/nomad"
)

module github.com/nomad-statefulset/nomad-statefulset/tools/consul

go 1.23.8

require github.com/hashicorp/consul v1.20.6

// Consul's own excludes (its go.mod).
exclude (
	github.com/hashicorp/go-msgpack v1.1.5
	github.com/hashicorp/go-msgpack v1.1.6
)

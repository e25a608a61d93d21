module github.com/nomad-statefulset/nomad-statefulset/tools/nomad

go 1.24.7

require (
	github.com/hashicorp/nomad v1.10.5
	github.com/hashicorp/nomad/api v0.0.0-20250909143645-a3b86c697f38
)

// Nomad's own replaces (its go.mod); replaces of a dependency do not apply
// to the modules that use it.
replace (
	github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1
)

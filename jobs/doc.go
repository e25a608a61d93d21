// Package jobs is the boundary between Nomad jobs and the StatefulSet
// algorithm. It turns an annotated parent job (DESIGN §1) into a
// reconciler.Spec, computes the canonical revisioned data of the parent's
// template, and renders the child job ("pod") for one ordinal at one
// revision (DESIGN §2).
//
// The package does no I/O: everything here is a pure function of *api.Job
// values, so the controller, the CLI's validate command and the tests all
// see exactly the same rules.
package jobs

package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// ApplyRevision returns a copy of parent whose revisioned fields are those of
// the revision data (RevisionData's output): the task group, the meta keys
// other than statefulset*, and the placement fields. The statefulset_* keys,
// the group's count (0 on a parent) and its scaling policy stay the
// parent's: they are not part of a revision, and a rollback must not change
// how the set is managed. Registering the result makes RevisionData give
// back data, so the agent sees a rollback to that revision, not a new one.
func ApplyRevision(parent *api.Job, data []byte) (*api.Job, error) {
	if parent == nil {
		return nil, errors.New("apply revision: parent job is nil")
	}
	if len(parent.TaskGroups) != 1 || parent.TaskGroups[0] == nil {
		return nil, fmt.Errorf("apply revision: parent job has %d task groups, want exactly 1", len(parent.TaskGroups))
	}
	var doc revisionDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("apply revision: decode revision data: %w", err)
	}
	if doc.Group == nil {
		return nil, errors.New("apply revision: revision data has no task group")
	}
	job, err := copyJob(parent)
	if err != nil {
		return nil, fmt.Errorf("apply revision: %w", err)
	}
	g := doc.Group
	restoreGroupZeros(g)
	// The parent stays a template: count 0, whatever the revision's group
	// would default to (a nil count canonicalizes to 1).
	g.Count = ptr(0)
	g.Scaling = job.TaskGroups[0].Scaling
	job.TaskGroups = []*api.TaskGroup{g}

	meta := map[string]string{}
	for k, v := range job.Meta {
		if isSetKey(k) {
			meta[k] = v
		}
	}
	for k, v := range doc.Meta {
		meta[k] = v
	}
	job.Meta = meta
	job.Datacenters = doc.Datacenters
	job.NodePool = nil
	if doc.NodePool != "" {
		job.NodePool = ptr(doc.NodePool)
	}
	job.Priority = nil
	if doc.Priority != 0 {
		job.Priority = ptr(doc.Priority)
	}
	job.Constraints = doc.Constraints
	job.Affinities = doc.Affinities
	job.Spreads = doc.Spreads
	return job, nil
}

// ClaimModes returns the access and attachment mode that a claim's group
// volume asks for, with Nomad's defaults for unset ones. The claim's volume
// must be created with exactly these: Nomad places a job on a dynamic host
// volume only if the volume offers a matching capability ("missing
// compatible host volumes" otherwise).
func ClaimModes(parent *api.Job, claim string) (access, attachment string) {
	access, attachment = "single-node-writer", "file-system"
	for _, g := range parent.TaskGroups {
		if v, ok := g.Volumes[claim]; ok && v != nil {
			if v.AccessMode != "" {
				access = v.AccessMode
			}
			if v.AttachmentMode != "" {
				attachment = v.AttachmentMode
			}
		}
	}
	return access, attachment
}

// Constraint is one placement constraint of the parent job, as a volume
// provisioner receives it.
type Constraint = backend.Constraint

// ClaimPlacement is what a claim's volume must honour of the parent job:
// its node pool and job-level constraints, and the claim's access and
// attachment modes (ClaimModes).
type ClaimPlacement = backend.ClaimPlacement

// PlacementOf returns the placement a claim's volume must honour; a nil
// parent (purged) asks for nothing.
func PlacementOf(parent *api.Job, claim string) ClaimPlacement {
	var p ClaimPlacement
	if parent == nil {
		return p
	}
	if parent.NodePool != nil {
		p.NodePool = *parent.NodePool
	}
	for _, c := range parent.Constraints {
		if c != nil {
			p.Constraints = append(p.Constraints, Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
		}
	}
	p.AccessMode, p.AttachmentMode = ClaimModes(parent, claim)
	return p
}

// ConsulServices returns the names of the parent's services that Consul
// holds (provider "consul", the default), group and task level, sorted and
// without duplicates. A name with an interpolation (${…}) is left out: it
// is not known until Nomad renders it per allocation, so its checks cannot
// be watched.
func ConsulServices(parent *api.Job) []string {
	if parent == nil || len(parent.TaskGroups) == 0 || parent.TaskGroups[0] == nil {
		return nil
	}
	g := parent.TaskGroups[0]
	var out []string
	add := func(ss []*api.Service) {
		for _, s := range ss {
			if s == nil || s.Name == "" || strings.Contains(s.Name, "${") {
				continue
			}
			if s.Provider != "" && s.Provider != api.ServiceProviderConsul {
				continue
			}
			out = append(out, s.Name)
		}
	}
	add(g.Services)
	for _, t := range g.Tasks {
		if t != nil {
			add(t.Services)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DefaultCheckInterval is the interval NativeLeaderCheck reports for a
// check that has none (a job not canonicalized by Nomad); Nomad requires
// one of at least a second on every check it registers.
const DefaultCheckInterval = 10 * time.Second

// NativeLeaderCheck reports whether the check named leaderCheck (a
// statefulset_leader_check) is a Nomad-native service check of the
// parent's group: a check of a service with provider = "nomad", whose
// results Nomad's client keeps (GET /v1/client/allocation/<id>/checks)
// rather than Consul. interval is how often Nomad runs it, the shortest of
// the checks of that name, at least a second: its result cannot change
// faster. A name on both a Nomad and a Consul service (Nomad refuses mixed
// providers in one group, so only a job it never saw) is Consul's, as
// before native checks were read.
func NativeLeaderCheck(parent *api.Job, leaderCheck string) (interval time.Duration, native bool) {
	if parent == nil || leaderCheck == "" || len(parent.TaskGroups) == 0 || parent.TaskGroups[0] == nil {
		return 0, false
	}
	consul := false
	eachServiceCheck(parent, parent.TaskGroups[0], func(name string, s *api.Service, c *api.ServiceCheck) {
		if name != leaderCheck {
			return
		}
		if s.Provider != serviceProviderNomad {
			consul = true
			return
		}
		every := c.Interval
		if every <= 0 {
			every = DefaultCheckInterval
		}
		every = max(every, time.Second)
		if !native || every < interval {
			interval = every
		}
		native = true
	})
	if consul {
		return 0, false
	}
	return interval, native
}

// Version is the parent job's version and JobModifyIndex, zero for a nil
// job or unset fields.
func Version(job *api.Job) (version, modifyIndex uint64) {
	if job == nil {
		return 0, 0
	}
	if job.Version != nil {
		version = *job.Version
	}
	if job.JobModifyIndex != nil {
		modifyIndex = *job.JobModifyIndex
	}
	return version, modifyIndex
}

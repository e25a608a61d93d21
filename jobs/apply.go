package jobs

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/nomad/api"
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

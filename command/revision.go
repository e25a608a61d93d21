package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// revisionTemplate is the shape of a revision's canonical data, the JSON
// that jobs.RevisionData produces: the placement fields, the job meta
// without the statefulset keys, and the template group (count and scaling
// removed, zero values pruned).
type revisionTemplate struct {
	Datacenters []string          `json:"Datacenters"`
	NodePool    string            `json:"NodePool"`
	Priority    int               `json:"Priority"`
	Constraints []*api.Constraint `json:"Constraints"`
	Affinities  []*api.Affinity   `json:"Affinities"`
	Spreads     []*api.Spread     `json:"Spreads"`
	Meta        map[string]string `json:"Meta"`
	Group       *api.TaskGroup    `json:"Group"`
}

// applyRevision returns a copy of parent whose revisioned fields are those
// of the revision data: the task group, the meta keys other than
// statefulset*, and the placement fields (datacenters, node_pool,
// constraints, affinities, spreads, priority). The statefulset_* keys, the
// group's count (0 on a parent) and its scaling policy stay the parent's:
// they are not part of a revision, and undo must not change how the set is
// managed. Registering the result makes jobs.RevisionData give back data,
// so the agent sees a rollback to that revision, not a new one.
func applyRevision(parent *api.Job, data []byte) (*api.Job, error) {
	if parent == nil {
		return nil, errors.New("apply revision: parent job is nil")
	}
	if len(parent.TaskGroups) != 1 || parent.TaskGroups[0] == nil {
		return nil, fmt.Errorf("apply revision: parent job has %d task groups, want exactly 1", len(parent.TaskGroups))
	}
	var doc revisionTemplate
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("apply revision: decode revision data: %w", err)
	}
	if doc.Group == nil {
		return nil, errors.New("apply revision: revision data has no task group")
	}
	job, err := copyAPIJob(parent)
	if err != nil {
		return nil, fmt.Errorf("apply revision: %w", err)
	}
	old := job.TaskGroups[0]

	g := doc.Group
	restoreGroupZeros(g)
	// The parent stays a template: count 0, whatever the revision's group
	// would default to (a nil count canonicalizes to 1).
	zero := 0
	g.Count = &zero
	g.Scaling = old.Scaling
	job.TaskGroups = []*api.TaskGroup{g}

	meta := map[string]string{}
	for k, v := range job.Meta {
		if k == "statefulset" || strings.HasPrefix(k, "statefulset_") {
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
		job.NodePool = &doc.NodePool
	}
	job.Priority = nil
	if doc.Priority != 0 {
		job.Priority = &doc.Priority
	}
	job.Constraints = doc.Constraints
	job.Affinities = doc.Affinities
	job.Spreads = doc.Spreads
	return job, nil
}

// copyAPIJob deep-copies a job through JSON, the form jobs travel in.
func copyAPIJob(job *api.Job) (*api.Job, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("copy job: %w", err)
	}
	var c api.Job
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("copy job: %w", err)
	}
	return &c, nil
}

// restoreGroupZeros puts back the explicit zeros that revision data prunes
// where Nomad's canonicalization would otherwise fill in a non-zero
// default: a pruned `restart { attempts = 0 }` must not come back as 2.
// It compares the group with a canonicalized copy of itself in a service
// job, the context the revision was made in, as jobs does when it renders
// a child from a revision.
func restoreGroupZeros(g *api.TaskGroup) {
	b, err := json.Marshal(g)
	if err != nil {
		return
	}
	var canon api.TaskGroup
	if err := json.Unmarshal(b, &canon); err != nil {
		return
	}
	id, typ := "restore", api.JobTypeService
	(&api.Job{ID: &id, Type: &typ, TaskGroups: []*api.TaskGroup{&canon}}).Canonicalize()
	restoreZeros(reflect.ValueOf(g).Elem(), reflect.ValueOf(&canon).Elem())
}

// restoreZeros sets an explicit zero for every pointer that is nil in have
// but points to a non-zero value in canon (have after Canonicalize).
// Struct pointers that Canonicalize would create are created with zero
// fields and filled the same way.
func restoreZeros(have, canon reflect.Value) {
	switch have.Kind() {
	case reflect.Pointer:
		if canon.Kind() != reflect.Pointer || canon.IsNil() {
			return
		}
		if have.IsNil() {
			if !have.CanSet() || isZeroDeep(canon.Elem()) {
				return
			}
			have.Set(reflect.New(have.Type().Elem()))
		}
		restoreZeros(have.Elem(), canon.Elem())
	case reflect.Struct:
		for i := range have.NumField() {
			if have.Field(i).CanSet() {
				restoreZeros(have.Field(i), canon.Field(i))
			}
		}
	case reflect.Slice:
		for i := range min(have.Len(), canon.Len()) {
			restoreZeros(have.Index(i), canon.Index(i))
		}
	case reflect.Map:
		if have.Type().Elem().Kind() != reflect.Pointer {
			return
		}
		iter := have.MapRange()
		for iter.Next() {
			c := canon.MapIndex(iter.Key())
			if c.IsValid() && !iter.Value().IsNil() {
				restoreZeros(iter.Value().Elem(), c.Elem())
			}
		}
	}
}

// isZeroDeep reports whether v holds nothing but zeros once pointers are
// followed; such a value needs nothing restored.
func isZeroDeep(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || isZeroDeep(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !isZeroDeep(v.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	default:
		return v.IsZero()
	}
}

package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// revisionDoc is the revisioned part of a parent job (DESIGN §1): the
// template group, the job meta outside statefulset_*, and the placement
// fields. Its canonical JSON is reconciler.Revision.Data, the input of the
// revision hash, and it is also all RenderChild needs to build a child, so
// a revision can be rendered long after the parent job has changed.
type revisionDoc struct {
	Datacenters []string          `json:"Datacenters"`
	NodePool    string            `json:"NodePool"`
	Priority    int               `json:"Priority"`
	Constraints []*api.Constraint `json:"Constraints"`
	Affinities  []*api.Affinity   `json:"Affinities"`
	Spreads     []*api.Spread     `json:"Spreads"`
	Meta        map[string]string `json:"Meta"`
	Group       *api.TaskGroup    `json:"Group"`
}

// Server-side defaults that the api package's Canonicalize does not apply
// but a Nomad server does (nomad/structs Job.Canonicalize and the node pool
// mutating hook). They must be applied on our side too, or a job read back
// from Nomad would hash differently from the job as the user wrote it.
const (
	serverDefaultDatacenter  = "*"
	serverDefaultNodePool    = "default"
	serverDefaultHostNetwork = "default"
)

// RevisionData returns the canonical JSON of the revisioned fields of a
// parent job: the template group, the job meta without the statefulset
// keys, and the placement fields (datacenters, node_pool, constraints,
// affinities, spreads, priority). Equal bytes mean an equal template, which
// is how reconciler detects rollbacks; the bytes are hashed into the
// revision name.
//
// The result is stable across a round trip through Nomad: the job the user
// submits (parsed from HCL, with nil for everything left unset) and the
// same job read back from a Nomad server (defaults filled in, nil turned
// into empty, implicit constraints added) give identical bytes. That is
// done by normalizing both sides to one form:
//
//  1. Deep-copy the job through JSON, the form both sides travel in, so the
//     caller's job is never changed and in-memory oddities (typed slices in
//     driver config) are gone.
//  2. Apply the api package's Canonicalize, the very function a Nomad
//     server runs first on a submitted job (ApiJobToStructJob). After it,
//     every default the API knows about is explicit on both sides, and the
//     group has absorbed the job-level update, reschedule and migrate
//     blocks, which belong to the template.
//  3. Apply the few defaults only the server fills (datacenters "*", node
//     pool "default", host_network "default" on ports; see
//     applyServerDefaults) and drop what the server adds on its own:
//     implicit constraints on the group and its tasks (see
//     implicitConstraints) and the default workload identity. Nomad adds
//     them to every child again anyway. The group's count and scaling
//     block are dropped too: they belong to the parent, not the template.
//  4. Prune zero values: a nil pointer, a pointer to a zero scalar, an empty
//     slice or map and a struct that prunes to nothing all become absent.
//     After step 2 a server cannot tell nil from zero for any field (its
//     structs have no pointers), so this loses no meaning, and it removes
//     every "nil became empty" difference. RenderChild undoes it where
//     Canonicalize would otherwise turn an absent value into a non-zero
//     default (see restoreZeros).
//  5. Marshal with encoding/json, which writes struct fields in declaration
//     order and map keys sorted, so map iteration order never leaks in.
func RevisionData(job *api.Job) ([]byte, error) {
	doc, err := newRevisionDoc(job)
	if err != nil {
		return nil, fmt.Errorf("compute revision data: %w", err)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("compute revision data: marshal: %w", err)
	}
	return data, nil
}

func newRevisionDoc(job *api.Job) (*revisionDoc, error) {
	if job == nil {
		return nil, errors.New("job is nil")
	}
	c, err := copyJob(job)
	if err != nil {
		return nil, err
	}
	return revisionDocOf(c)
}

// revisionDocOf is newRevisionDoc on a job the caller owns: it changes c.
// A job just decoded from JSON needs no copy.
func revisionDocOf(c *api.Job) (doc *revisionDoc, err error) {
	// A null inside a list or map of the job (a service, a check, a
	// template, a constraint…) is JSON no Nomad server accepts or sends,
	// so it comes only from a hand-made payload or file; the api package's
	// Canonicalize, and the defaults applied after it, dereference such
	// entries. The job is then refused, never a panic of the daemon.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("job %q holds a null where Nomad expects an object (a list or map entry written as null): %v", deref(c.ID), r)
		}
	}()
	var groups []*api.TaskGroup
	for _, g := range c.TaskGroups {
		if g != nil {
			groups = append(groups, g)
		}
	}
	if len(groups) != 1 {
		return nil, fmt.Errorf("job has %d task groups, want exactly 1", len(groups))
	}
	c.TaskGroups = groups
	// A null task (JSON that no Nomad server accepts, so it can come only
	// from a hand-made payload) would make Canonicalize panic; like a
	// null group it is nothing.
	groups[0].Tasks = slices.DeleteFunc(groups[0].Tasks, func(t *api.Task) bool { return t == nil })
	// Only the service type makes sense for a set (Parse enforces it); fix
	// it here so Canonicalize picks the service defaults on both sides.
	c.Type = ptr(api.JobTypeService)
	c.Canonicalize()

	g := c.TaskGroups[0]
	// The count is not part of the template: it is 0 on the parent and 1
	// on every child.
	g.Count = nil
	// Scaling policies apply to the parent's count, which this daemon owns.
	g.Scaling = nil
	stripImplicit(g)
	applyServerDefaults(g)

	doc = &revisionDoc{
		Datacenters: c.Datacenters,
		NodePool:    *c.NodePool,
		Priority:    *c.Priority,
		Constraints: c.Constraints,
		Affinities:  c.Affinities,
		Spreads:     c.Spreads,
		Meta:        revisionMeta(c.Meta),
		Group:       g,
	}
	if len(doc.Datacenters) == 0 {
		doc.Datacenters = []string{serverDefaultDatacenter}
	}
	if doc.NodePool == "" {
		doc.NodePool = serverDefaultNodePool
	}
	prune(reflect.ValueOf(doc).Elem())
	return doc, nil
}

// applyServerDefaults fills the group defaults that a Nomad server sets and
// the api package does not. Each one was found by comparing a submitted job
// with the same job read back from a real agent (jobs/testdata).
func applyServerDefaults(g *api.TaskGroup) {
	networks := g.Networks
	for _, t := range g.Tasks {
		if t != nil && t.Resources != nil {
			networks = append(networks[:len(networks):len(networks)], t.Resources.Networks...)
		}
	}
	for _, n := range networks {
		if n == nil {
			continue
		}
		// A port without host_network is placed on the "default" host
		// network; the server writes that name down.
		for _, ports := range [][]api.Port{n.DynamicPorts, n.ReservedPorts} {
			for i := range ports {
				if ports[i].HostNetwork == "" {
					ports[i].HostNetwork = serverDefaultHostNetwork
				}
			}
		}
	}
}

// revisionMeta drops the statefulset keys: changing how the set is managed
// must not make a new revision (DESIGN §1). "statefulset" itself goes too,
// or every child would carry statefulset = "true" and look like a parent.
func revisionMeta(meta map[string]string) map[string]string {
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if isSetKey(k) {
			continue
		}
		out[k] = v
	}
	return out
}

// copyJob deep-copies a job through JSON, the form in which jobs travel to
// and from Nomad.
func copyJob(job *api.Job) (*api.Job, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("copy job: marshal: %w", err)
	}
	var c api.Job
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("copy job: unmarshal: %w", err)
	}
	return &c, nil
}

// Implicit constraints, as a Nomad server's jobImpliedConstraints mutator
// adds them (nomad/job_endpoint_hooks.go, checked against v1.10.5).
const (
	attrNomadServiceDisco = "${attr.nomad.service_discovery}"
	attrNomadVersion      = "${attr.nomad.version}"
	attrOSSignals         = "${attr.os.signals}"
	attrKernelName        = "${attr.kernel.name}"
	attrCNIPrefix         = "${attr.plugins.cni.version."
	operandSemver         = "semver"
	operandEqual          = "="
	operandSetContains    = "set_contains"
	defaultCluster        = "default"
	numaAffinityNone      = "none"
	serviceProviderNomad  = "nomad"
	networkModeBridge     = "bridge"
)

// implicit is one constraint a server may add. RTargets lists every value
// known Nomad versions have used (the minimum Consul version went from
// 1.7.0 to 1.8.0): a server upgrade must not roll every set, and a user's
// own stricter constraint on the same attribute is never mistaken for one.
type implicit struct {
	LTarget  string
	Operand  string
	RTargets []string
}

func (i implicit) matches(c *api.Constraint) bool {
	return c != nil && c.LTarget == i.LTarget && c.Operand == i.Operand && slices.Contains(i.RTargets, c.RTarget)
}

// implicitConstraints returns the constraints a Nomad server adds to group
// g on its own, given the features g uses, and those it adds to each task
// (by task name). They are removed from the revision data on both sides:
// the server adds them to the registered parent but they are absent from
// the submitted one, and it adds them to every child again. Removing only
// known values, and only when the feature is in use, keeps a constraint the
// user wrote for another reason.
func implicitConstraints(g *api.TaskGroup) (group []implicit, tasks map[string][]implicit) {
	tasks = map[string][]implicit{}
	var signals []string
	numa, nomadSD, nomadChecks, schedule := false, false, false, false
	consul := func(s *api.Service) (implicit, bool) {
		if s == nil || s.Provider == serviceProviderNomad {
			return implicit{}, false
		}
		return implicit{LTarget: clusterAttr("consul", s.Cluster), Operand: operandSemver, RTargets: []string{">= 1.7.0", ">= 1.8.0"}}, true
	}
	noteNomad := func(s *api.Service) {
		if s != nil && s.Provider == serviceProviderNomad {
			nomadSD = true
			nomadChecks = nomadChecks || len(s.Checks) > 0
		}
	}
	for _, s := range g.Services {
		noteNomad(s)
		if c, ok := consul(s); ok {
			group = append(group, c)
		}
	}
	for _, t := range g.Tasks {
		if t == nil {
			continue
		}
		for _, s := range t.Services {
			noteNomad(s)
			// Since Nomad 1.10 the constraint for a task's Consul service
			// goes on the task, not the group.
			if c, ok := consul(s); ok {
				tasks[t.Name] = append(tasks[t.Name], c)
			}
		}
		if t.Vault != nil {
			group = append(group, implicit{LTarget: clusterAttr("vault", t.Vault.Cluster), Operand: operandSemver, RTargets: []string{">= 0.6.1", ">= 1.11.0"}})
			if deref(t.Vault.ChangeMode) == "signal" && deref(t.Vault.ChangeSignal) != "" {
				signals = append(signals, deref(t.Vault.ChangeSignal))
			}
		}
		if t.KillSignal != "" {
			signals = append(signals, t.KillSignal)
		}
		for _, tmpl := range t.Templates {
			if tmpl != nil && deref(tmpl.ChangeMode) == "signal" && deref(tmpl.ChangeSignal) != "" {
				signals = append(signals, deref(tmpl.ChangeSignal))
			}
		}
		if t.Resources != nil && t.Resources.NUMA != nil && t.Resources.NUMA.Affinity != "" && t.Resources.NUMA.Affinity != numaAffinityNone {
			numa = true
		}
		schedule = schedule || t.Schedule != nil
	}
	if nomadSD {
		group = append(group, implicit{LTarget: attrNomadServiceDisco, Operand: operandEqual, RTargets: []string{"true"}})
	}
	if nomadChecks {
		group = append(group, implicit{LTarget: attrNomadVersion, Operand: operandSemver, RTargets: []string{">= 1.4.0"}})
	}
	if len(signals) > 0 {
		group = append(group, implicit{LTarget: attrOSSignals, Operand: operandSetContains, RTargets: []string{joinUnique(signals)}})
	}
	if numa {
		group = append(group,
			implicit{LTarget: attrNomadVersion, Operand: operandSemver, RTargets: []string{">= 1.6.3-dev"}},
			implicit{LTarget: attrKernelName, Operand: operandEqual, RTargets: []string{"linux"}})
	}
	if schedule {
		group = append(group, implicit{LTarget: attrNomadVersion, Operand: operandSemver, RTargets: []string{">= 1.8.0-dev"}})
	}
	for _, n := range g.Networks {
		if n != nil && n.Mode == networkModeBridge {
			for _, plugin := range []string{"bridge", "firewall", "host-local", "loopback", "portmap"} {
				group = append(group, implicit{LTarget: attrCNIPrefix + plugin + "}", Operand: operandSemver, RTargets: []string{">= 0.4.0"}})
			}
			break
		}
	}
	return group, tasks
}

// clusterAttr is the version attribute of a Consul or Vault cluster: the
// plain one for the default cluster, a cluster-named one otherwise.
func clusterAttr(system, cluster string) string {
	if cluster == "" || cluster == defaultCluster {
		return "${attr." + system + ".version}"
	}
	return "${attr." + system + "." + cluster + ".version}"
}

func joinUnique(ss []string) string {
	sort.Strings(ss)
	out := ss[:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// stripImplicit removes implicit constraints and server-added defaults from
// the canonicalized template group g.
func stripImplicit(g *api.TaskGroup) {
	group, tasks := implicitConstraints(g)
	g.Constraints = withoutImplicit(g.Constraints, group)
	for _, t := range g.Tasks {
		if t == nil {
			continue
		}
		t.Constraints = withoutImplicit(t.Constraints, tasks[t.Name])
		if isDefaultIdentity(t.Identity) {
			// The server gives every task its default workload identity
			// when none is written; a submitted job has nil here.
			t.Identity = nil
		}
	}
}

func withoutImplicit(cs []*api.Constraint, implicits []implicit) []*api.Constraint {
	if len(implicits) == 0 {
		return cs
	}
	kept := cs[:0]
	for _, c := range cs {
		if !slices.ContainsFunc(implicits, func(i implicit) bool { return i.matches(c) }) {
			kept = append(kept, c)
		}
	}
	return kept
}

// isDefaultIdentity reports whether wi is the workload identity a Nomad
// server gives a task that asked for none: named "default", audience
// "nomadproject.io", exposed neither as env nor as a file.
func isDefaultIdentity(wi *api.WorkloadIdentity) bool {
	if wi == nil {
		return false
	}
	if wi.Name != "" && wi.Name != "default" {
		return false
	}
	if len(wi.Audience) > 1 || (len(wi.Audience) == 1 && wi.Audience[0] != "nomadproject.io") {
		return false
	}
	return !wi.Env && !wi.File && wi.ChangeMode == "" && wi.ChangeSignal == "" &&
		wi.TTL == 0 && wi.ServiceName == "" && wi.Filepath == ""
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// prune makes absent every value that carries no information beyond its
// type's zero value, and reports whether v ended up empty. Nil and empty
// slices and maps become nil; pointers to zero scalars and to structs that
// prune to nothing become nil. Slice elements are pruned inside but kept, as
// their position can matter. Map values are left alone except for struct
// pointers (such as the group's volumes): user maps (meta, env, driver
// config) are data, where an empty string is a value.
func prune(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return true
		}
		if prune(v.Elem()) {
			if v.CanSet() {
				v.SetZero()
			}
			return true
		}
		return false
	case reflect.Struct:
		empty := true
		for i := range v.NumField() {
			f := v.Field(i)
			if !f.CanSet() {
				continue
			}
			if !prune(f) {
				empty = false
			}
		}
		return empty
	case reflect.Slice:
		if v.Len() == 0 {
			if v.CanSet() {
				v.SetZero()
			}
			return true
		}
		for i := range v.Len() {
			prune(v.Index(i))
		}
		return false
	case reflect.Map:
		if v.Len() == 0 {
			if v.CanSet() {
				v.SetZero()
			}
			return true
		}
		if v.Type().Elem().Kind() == reflect.Pointer && v.Type().Elem().Elem().Kind() == reflect.Struct {
			iter := v.MapRange()
			for iter.Next() {
				if e := iter.Value(); !e.IsNil() {
					prune(e.Elem())
				}
			}
		}
		return false
	case reflect.Interface:
		return v.IsNil()
	default:
		return v.IsZero()
	}
}

// restoreZeros undoes prune where it would change meaning: for every
// pointer field that is nil in have but non-zero in canon (have after
// Canonicalize), it sets an explicit zero. Without this, a pruned
// `restart { attempts = 0 }` would come back as the default of 2 when the
// child is registered. Struct pointers that Canonicalize would create are
// created with zero fields and filled the same way.
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

// isZeroDeep reports whether v is a struct whose scalar fields are all zero
// once pointers are followed: for such a value nothing needs restoring.
func isZeroDeep(v reflect.Value) bool {
	probe := reflect.New(v.Type())
	probe.Elem().Set(v)
	return prune(probe.Elem())
}

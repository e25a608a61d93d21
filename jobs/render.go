package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Meta keys and env names that give a child job its identity (DESIGN §2).
const (
	MetaParent   = "statefulset_parent"
	MetaOrdinal  = "statefulset_ordinal"
	MetaPodName  = "statefulset_pod_name"
	MetaRevision = "statefulset_revision"
	// MetaRendered records in a child what the daemon registered for it:
	// the SpecDigest of the child as sent (RecordRendering). Drift is
	// judged against it, not against what the running release would render
	// now, so that a release that renders children differently restarts
	// nothing by itself (DESIGN §2).
	MetaRendered = "statefulset_rendered"

	EnvName    = "STATEFULSET_NAME"
	EnvOrdinal = "STATEFULSET_ORDINAL"
	EnvPodName = "STATEFULSET_POD_NAME"
)

// Child job settings. Each one exists to keep "at most one allocation per
// ordinal" (reliability-and-performance.md §1.4) or to make Nomad report the
// allocation's health; RenderChild explains each where it is set.
const (
	// DefaultStopOnClientAfter is how long a client cut off from the
	// servers keeps a child's allocation running before it stops it itself.
	// It is the fence that lets the controller re-place an ordinal whose
	// node is gone: after this, plus kill_timeout and a margin, the old
	// allocation is known to be stopped. One minute rides out short network
	// blips (heartbeat TTL plus grace is about 20s) without long split-brain.
	DefaultStopOnClientAfter = time.Minute

	healthChecks     = "checks"
	healthTaskStates = "task_states"
	restartModeFail  = "fail"
	delayConstant    = "constant"
)

// RenderChild builds the child job ("pod") for ordinal at revision rev,
// exactly as DESIGN §2 describes: ID "<set>-<ordinal>" in the set's
// namespace, the revision's placement and template group with count 1, the
// identity meta, env and service tag, each claim's volume source set to
// "<claim>-<set>-<ordinal>", and the health, disconnect, reschedule and
// restart settings that make one child behave like one pod. It reads only
// rev.Data, so any stored revision can be rendered, not just the current
// template.
func RenderChild(spec reconciler.Spec, rev reconciler.Revision, ordinal int) (*api.Job, error) {
	if ordinal < 0 {
		return nil, fmt.Errorf("render child %s/%s-%d: negative ordinal", spec.Namespace, spec.Name, ordinal)
	}
	pod := podName(spec.Name, ordinal)
	var doc revisionDoc
	if err := json.Unmarshal(rev.Data, &doc); err != nil {
		return nil, fmt.Errorf("render child %s/%s: decode revision %s: %w", spec.Namespace, pod, rev.Name, err)
	}
	if doc.Group == nil {
		return nil, fmt.Errorf("render child %s/%s: revision %s: %w", spec.Namespace, pod, rev.Name, errors.New("revision data has no task group"))
	}
	g := doc.Group
	restoreGroupZeros(g)

	namespace := spec.Namespace
	if namespace == "" {
		namespace = defaultNamespace
	}
	meta := doc.Meta
	if meta == nil {
		meta = map[string]string{}
	}
	meta[MetaParent] = spec.Name
	meta[MetaOrdinal] = strconv.Itoa(ordinal)
	meta[MetaPodName] = pod
	meta[MetaRevision] = rev.Name
	// No spread rules yet (SpreadChild adds them); recording that makes
	// the child's digest see the template's own "!=" rules.
	meta[MetaSpreadAvoid] = emptySpreadRecord

	g.Count = ptr(1)
	setHealth(g)
	setSafety(g)
	injectIdentity(g, spec.Name, pod, ordinal)

	for _, c := range spec.VolumeClaims {
		v, ok := g.Volumes[c]
		if !ok || v == nil {
			return nil, fmt.Errorf("render child %s/%s: revision %s: claim %q is not a volume of the group", namespace, pod, rev.Name, c)
		}
		v.Source = volumeName(c, spec.Name, ordinal)
	}

	return &api.Job{
		ID:          ptr(pod),
		Name:        ptr(pod),
		Namespace:   ptr(namespace),
		Type:        ptr(api.JobTypeService),
		Priority:    ptr(doc.Priority),
		Datacenters: doc.Datacenters,
		NodePool:    ptr(doc.NodePool),
		Constraints: doc.Constraints,
		Affinities:  doc.Affinities,
		Spreads:     doc.Spreads,
		Meta:        meta,
		TaskGroups:  []*api.TaskGroup{g},
	}, nil
}

// RecordRendering sets child's MetaRendered to the digest of the child as it
// is: call it last, on the job exactly as it is registered. The digest
// leaves out the statefulset meta, the record itself included, and the
// spreading rules MetaSpreadAvoid names, as the digest of the child read
// back from Nomad does. It returns the digest it recorded, which is also
// RenderedDigest of the child's revision and ordinal with its spread
// record, so that the registration's caller need not render the child
// again to know it.
func RecordRendering(child *api.Job) (SpecDigest, error) {
	d, err := DigestChild(child)
	if err != nil {
		return SpecDigest{}, fmt.Errorf("recording the rendering of %s: %w", deref(child.ID), err)
	}
	if child.Meta == nil {
		child.Meta = map[string]string{}
	}
	child.Meta[MetaRendered] = d.Encode()
	return d, nil
}

// restoreGroupZeros re-applies explicit zeros that prune removed, comparing
// the group with a canonicalized copy of itself in a service job (the
// context it was canonicalized in when the revision was made).
func restoreGroupZeros(g *api.TaskGroup) {
	// A reflective deep copy, not a JSON round trip: decoding JSON was most
	// of RenderChild's time.
	canon := deepCopy(reflect.ValueOf(g)).Interface().(*api.TaskGroup)
	(&api.Job{ID: ptr("restore"), Type: ptr(api.JobTypeService), TaskGroups: []*api.TaskGroup{canon}}).Canonicalize()
	restoreZeros(reflect.ValueOf(g).Elem(), reflect.ValueOf(canon).Elem())
}

// deepCopy copies v with everything it points to. Unexported fields are
// left zero; the api types have none that matter.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Struct, reflect.Slice, reflect.Map:
	default:
		// Scalars (and strings, which are immutable) are copied by value.
		return v
	}
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(deepCopy(v.Elem()))
			out.Set(p)
		}
	case reflect.Interface:
		if !v.IsNil() {
			out.Set(deepCopy(v.Elem()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if out.Field(i).CanSet() {
				out.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
	case reflect.Slice:
		if !v.IsNil() {
			s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			for i := range v.Len() {
				s.Index(i).Set(deepCopy(v.Index(i)))
			}
			out.Set(s)
		}
	case reflect.Map:
		if !v.IsNil() {
			m := reflect.MakeMapWithSize(v.Type(), v.Len())
			iter := v.MapRange()
			for iter.Next() {
				m.SetMapIndex(iter.Key(), deepCopy(iter.Value()))
			}
			out.Set(m)
		}
	}
	return out
}

// setHealth makes Nomad judge and report the allocation's health, which is
// how the controller tells Ready (DESIGN §2: the deployment's alloc health).
func setHealth(g *api.TaskGroup) {
	u := g.Update
	if u == nil {
		u = api.DefaultUpdateStrategy()
	}
	u.Canonicalize()
	// max_parallel > 0: Nomad creates a deployment only then, and only
	// allocations in a deployment get DeploymentStatus.Healthy.
	u.MaxParallel = ptr(1)
	// "manual" would leave health unset until someone calls the API, and
	// the pod would never become Ready; checks and task_states are kept.
	if hc := deref(u.HealthCheck); hc != healthChecks && hc != healthTaskStates {
		u.HealthCheck = ptr(healthChecks)
	}
	// min_healthy_time, healthy_deadline and progress_deadline stay as the
	// user wrote them (or Nomad's defaults): they say what healthy means.
	//
	// canary = 0: a canary is a second allocation of the same group running
	// beside the old one, that is two pods with one identity.
	u.Canary = ptr(0)
	u.AutoPromote = ptr(false)
	// auto_revert = false: Nomad would roll the child back to an older job
	// version on its own; revisions belong to the controller, which rolls
	// back by rendering another revision.
	u.AutoRevert = ptr(false)
	g.Update = u
}

// setSafety sets the disconnect, reschedule and restart settings so that
// Nomad never runs two allocations of one child at once and never replaces
// one behind the controller's back.
func setSafety(g *api.TaskGroup) {
	stopAfter := DefaultStopOnClientAfter
	if g.Disconnect != nil && g.Disconnect.StopOnClientAfter != nil && *g.Disconnect.StopOnClientAfter > 0 {
		stopAfter = *g.Disconnect.StopOnClientAfter
	}
	g.Disconnect = &api.DisconnectStrategy{
		// replace = false: by default Nomad places a replacement for an
		// allocation on a disconnected node while the original keeps
		// running there (§1.4). Two pods with one identity and, without a
		// claim, two writers. With false the allocation waits as "unknown"
		// until its node returns or the controller acts.
		Replace: ptr(false),
		// stop_on_client_after: the client stops the allocation itself once
		// cut off this long, a fence the controller can wait out before it
		// re-places the ordinal. Nomad refuses it together with lost_after,
		// so lost_after is dropped.
		StopOnClientAfter: ptr(stopAfter),
		// keep_original: if a replacement exists anyway when the node comes
		// back, keep the allocation that owns the ordinal's data.
		Reconcile: ptr(api.ReconcileOptionKeepOriginal),
	}
	// Migrate max_parallel 0: Nomad's drainer lets a count = 1 job lose its
	// one allocation at once (count - max_parallel healthy are kept, so 0).
	// With 0 the drainer leaves the allocation alone until the drain's
	// deadline, and the controller moves the set's pods off the draining
	// node itself, within the set's maxUnavailable. At the deadline Nomad
	// stops what is left, as it does for any job.
	migrate := &api.MigrateStrategy{}
	if g.Migrate != nil {
		*migrate = *g.Migrate
	}
	migrate.MaxParallel = ptr(0)
	g.Migrate = migrate
	// Reschedule off (attempts 0, not unlimited): a reschedule is a new
	// allocation Nomad places on its own. The controller must see the pod
	// fail and replace it itself, in ordinal order and only after the old
	// allocation is terminal, as the Kubernetes controller does.
	g.ReschedulePolicy = &api.ReschedulePolicy{
		Attempts:      ptr(0),
		Interval:      ptr(time.Duration(0)),
		Delay:         ptr(time.Duration(0)),
		DelayFunction: ptr(delayConstant),
		MaxDelay:      ptr(time.Duration(0)),
		Unlimited:     ptr(false),
	}
	// Restart mode "fail", at group and task level (the task level wins in
	// Nomad): restarts happen inside the one allocation, so they are safe,
	// but with mode "delay" a crash-looping task would never end its
	// allocation and the pod would never reach Failed, the phase in which
	// the controller replaces it. Attempts, interval and delay stay the
	// user's.
	g.RestartPolicy = failRestart(g.RestartPolicy)
	for _, t := range g.Tasks {
		if t != nil {
			t.RestartPolicy = failRestart(t.RestartPolicy)
		}
	}
}

func failRestart(r *api.RestartPolicy) *api.RestartPolicy {
	if r == nil {
		r = &api.RestartPolicy{}
	}
	r.Mode = ptr(restartModeFail)
	return r
}

// injectIdentity gives every task the identity env and every service the
// per-pod tag, the counterpart of a pod's hostname and of the headless
// Service's per-pod DNS name.
func injectIdentity(g *api.TaskGroup, set, pod string, ordinal int) {
	for _, t := range g.Tasks {
		if t == nil {
			continue
		}
		if t.Env == nil {
			t.Env = map[string]string{}
		}
		t.Env[EnvName] = set
		t.Env[EnvOrdinal] = strconv.Itoa(ordinal)
		t.Env[EnvPodName] = pod
		for _, s := range t.Services {
			addTag(s, pod)
		}
	}
	for _, s := range g.Services {
		addTag(s, pod)
	}
}

func addTag(s *api.Service, tag string) {
	if s != nil && !slices.Contains(s.Tags, tag) {
		s.Tags = append(s.Tags, tag)
	}
}

// ParseChild reads a child job's identity from its meta. ok is false for a
// job that is not a well-formed child: missing keys, an ordinal that is not
// a plain decimal, or an ID or pod name that does not match the parent and
// ordinal (a copied meta block must not make a job adoptable).
func ParseChild(job *api.Job) (set string, ordinal int, revision string, ok bool) {
	if job == nil || job.ID == nil {
		return "", 0, "", false
	}
	set = job.Meta[MetaParent]
	ord := job.Meta[MetaOrdinal]
	revision = job.Meta[MetaRevision]
	if set == "" || revision == "" || !digits.MatchString(ord) {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(ord)
	if err != nil || strconv.Itoa(n) != ord {
		return "", 0, "", false
	}
	pod := podName(set, n)
	if *job.ID != pod || job.Meta[MetaPodName] != pod {
		return "", 0, "", false
	}
	return set, n, revision, true
}

// ScaledChild reports the count of a child that was scaled above 1 by hand
// (`nomad job scale <child> <group> N`), or 0 when its count is 0 or 1.
func ScaledChild(child *api.Job) int {
	if child == nil || len(child.TaskGroups) != 1 || child.TaskGroups[0] == nil {
		return 0
	}
	if n := deref(child.TaskGroups[0].Count); n > 1 {
		return n
	}
	return 0
}

// ChildMatches reports whether a child job read from Nomad still carries
// what RenderChild gave it for (spec, rev, ordinal): its identity (ID,
// namespace, meta, env, service tags), its storage (each claim's volume
// source) and the safety settings. It is the port of Kubernetes'
// identityMatches and storageMatches; false means someone edited the child
// by hand and the controller should repair it. It ignores everything Nomad
// fills in on registration, so a freshly registered child matches.
func ChildMatches(spec reconciler.Spec, rev reconciler.Revision, ordinal int, child *api.Job) bool {
	return identityMatches(spec, rev, ordinal, child) &&
		storageMatches(spec, ordinal, child) &&
		safetyMatches(child)
}

func identityMatches(spec reconciler.Spec, rev reconciler.Revision, ordinal int, child *api.Job) bool {
	if child == nil || len(child.TaskGroups) != 1 || child.TaskGroups[0] == nil {
		return false
	}
	pod := podName(spec.Name, ordinal)
	ns := spec.Namespace
	if ns == "" {
		ns = defaultNamespace
	}
	if deref(child.ID) != pod || strOr(child.Namespace, defaultNamespace) != ns {
		return false
	}
	m := child.Meta
	if m[MetaParent] != spec.Name || m[MetaOrdinal] != strconv.Itoa(ordinal) ||
		m[MetaPodName] != pod || m[MetaRevision] != rev.Name {
		return false
	}
	g := child.TaskGroups[0]
	// A count above 1 (`nomad job scale`) is not drift: the agent puts it
	// back to 1 in place, so Nomad ends only the extra allocation
	// (ScaledChild). A count of 0 stopped the pod: it is replaced like a
	// stopped child, once its allocation has ended.
	if deref(g.Count) < 1 {
		return false
	}
	for _, t := range g.Tasks {
		if t == nil {
			continue
		}
		if t.Env[EnvName] != spec.Name || t.Env[EnvOrdinal] != strconv.Itoa(ordinal) || t.Env[EnvPodName] != pod {
			return false
		}
		for _, s := range t.Services {
			if s != nil && !slices.Contains(s.Tags, pod) {
				return false
			}
		}
	}
	for _, s := range g.Services {
		if s != nil && !slices.Contains(s.Tags, pod) {
			return false
		}
	}
	return true
}

func storageMatches(spec reconciler.Spec, ordinal int, child *api.Job) bool {
	g := child.TaskGroups[0]
	for _, c := range spec.VolumeClaims {
		v, ok := g.Volumes[c]
		if !ok || v == nil || v.Type != "host" || v.Source != volumeName(c, spec.Name, ordinal) {
			return false
		}
	}
	return true
}

// safetyMatches checks the settings that keep one allocation per ordinal: a
// hand edit that turns replacement, rescheduling or canaries back on must be
// repaired like any other drift.
func safetyMatches(child *api.Job) bool {
	g := child.TaskGroups[0]
	if g.Disconnect == nil || g.Disconnect.Replace == nil || *g.Disconnect.Replace {
		return false
	}
	if r := g.ReschedulePolicy; r == nil || deref(r.Attempts) != 0 || deref(r.Unlimited) {
		return false
	}
	if u := g.Update; u == nil || deref(u.Canary) != 0 || deref(u.MaxParallel) < 1 {
		return false
	}
	return true
}

// RestoreCount puts the count of a child scaled up by hand back to 1, in
// place, and reports whether it did: the child is then registered again as
// it is, so that Nomad stops only the extra allocations.
func RestoreCount(child *api.Job) bool {
	if ScaledChild(child) == 0 {
		return false
	}
	one := 1
	child.TaskGroups[0].Count = &one
	return true
}

package jobs

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// Annotation keys of the parent job's meta (DESIGN §1). They are the user
// contract: renaming one breaks every job that uses it.
const (
	KeyManaged                = "statefulset"
	KeyReplicas               = "statefulset_replicas"
	KeyOrdinalsStart          = "statefulset_ordinals_start"
	KeyPodManagementPolicy    = "statefulset_pod_management_policy"
	KeyUpdateStrategy         = "statefulset_update_strategy"
	KeyPartition              = "statefulset_partition"
	KeyMaxUnavailable         = "statefulset_max_unavailable"
	KeyMinReadySeconds        = "statefulset_min_ready_seconds"
	KeyRevisionHistoryLimit   = "statefulset_revision_history_limit"
	KeyVolumeClaims           = "statefulset_volume_claims"
	KeyVolumeRetentionDeleted = "statefulset_volume_retention_when_deleted"
	KeyVolumeRetentionScaled  = "statefulset_volume_retention_when_scaled"
	KeyPaused                 = "statefulset_paused"
	KeyProgressDeadline       = "statefulset_progress_deadline"
	KeySpread                 = "statefulset_spread"
	KeySpreadRequired         = "statefulset_spread_required"
	// The leader-aware keys of DESIGN §3b: who leads, how the leader is
	// taken down, and the commands the daemon runs inside the set's pods.
	KeyLeaderCheck       = "statefulset_leader_check"
	KeyLeaderUpdate      = "statefulset_leader_update"
	KeySwitchoverCommand = "statefulset_switchover_command"
	KeyDisruptionCheck   = "statefulset_disruption_check"
	KeyExecTask          = "statefulset_exec_task"
	KeyExecTimeout       = "statefulset_exec_timeout"
	// KeyApprove holds the token `rollout approve` writes: a new token
	// lets one held step through (DESIGN §3b, §4).
	KeyApprove = "statefulset_approve"
	// KeyMaintenanceWindow holds the windows in which voluntary
	// disruptions may start (DESIGN §3b): "Sat 02:00-05:00 UTC, ...".
	KeyMaintenanceWindow = "statefulset_maintenance_window"
	// DefaultSpread spreads a set's ordinals over distinct nodes.
	DefaultSpread = "${node.unique.id}"
	// KeyPodReplacePrefix starts the keys `pod replace` writes, one per
	// ordinal: statefulset_pod_replace_<ordinal> = "<token>" or
	// "<token>,new-volume". The daemon carries each token out once.
	KeyPodReplacePrefix = "statefulset_pod_replace_"
	// PodReplaceNewVolume is the value suffix of a -new-volume request.
	PodReplaceNewVolume = ",new-volume"
	// KeyClaimPrefix starts the per-claim keys of DESIGN §3b:
	// statefulset_claim_<claim>_capacity = "<min>" or "<min>..<max>" (sizes
	// as Nomad reads a host volume's capacity_min), and
	// statefulset_claim_<claim>_class = a volume_provisioner block's name.
	KeyClaimPrefix = "statefulset_claim_"
	// ClaimCapacitySuffix and ClaimClassSuffix end the per-claim keys.
	ClaimCapacitySuffix = "_capacity"
	// ClaimClassSuffix: see ClaimCapacitySuffix.
	ClaimClassSuffix = "_class"
)

// ClaimCapacityKey and ClaimClassKey are the per-claim keys of claim.
func ClaimCapacityKey(claim string) string { return KeyClaimPrefix + claim + ClaimCapacitySuffix }

// ClaimClassKey: see ClaimCapacityKey.
func ClaimClassKey(claim string) string { return KeyClaimPrefix + claim + ClaimClassSuffix }

// isSetKey reports whether a meta key belongs to managing the set (the
// managed flag or a statefulset_* key) rather than to the template. It is
// the one split of a parent's meta: RevisionData drops these keys,
// ApplyRevision keeps the parent's own, and a child record keeps only these.
func isSetKey(k string) bool {
	return k == KeyManaged || strings.HasPrefix(k, annotationPrefix)
}

// Defaults and limits of the parser.
const (
	annotationPrefix           = KeyManaged + "_"
	managedValue               = "true"
	defaultNamespace           = "default"
	defaultReplicas            = 1
	defaultRevisionHistory     = 10
	defaultProgressDeadline    = 10 * time.Minute
	defaultMaxUnavailableValue = 1
	// maxPodNameLength: "<set>-<n>" is a DNS label in
	// <set>-<n>.<service>.service.consul, and DNS labels stop at 63.
	maxPodNameLength = 63
	// maxVolumeNameLength is our own bound, not Nomad's (v1.10.5 only
	// requires a name): volume names also end up in paths, ACL globs and
	// CLI output, and [a-zA-Z0-9-_]{1,128} is the rule Nomad applies to
	// its other object names (node pools, identities).
	maxVolumeNameLength   = 128
	dnsLabelRule          = "lowercase letters, digits and '-', starting and ending with a letter or digit"
	volumeNameRule        = "letters, digits, '-' and '_'"
	percentSuffix         = "%"
	maxPercent            = 100
	suggestionMaxDistance = 3
	nearTypoDistance      = 2
)

// Keys of problems that concern the job's shape rather than an annotation.
const (
	structuralKeyGroups    = "group"
	structuralKeyCount     = "count"
	structuralKeyType      = "type"
	structuralKeyID        = "id"
	structuralKeyNamespace = "namespace"
)

// annotationKeys is every statefulset_* key the parser knows; anything else
// with the prefix is a typo and is reported, because a silently ignored
// "statefulset_replica" would leave the user wondering why nothing scales.
var annotationKeys = []string{
	KeyReplicas, KeyOrdinalsStart, KeyPodManagementPolicy, KeyUpdateStrategy,
	KeyPartition, KeyMaxUnavailable, KeyMinReadySeconds, KeyRevisionHistoryLimit,
	KeyVolumeClaims, KeyVolumeRetentionDeleted, KeyVolumeRetentionScaled,
	KeyPaused, KeyProgressDeadline, KeySpread, KeySpreadRequired,
	KeyLeaderCheck, KeyLeaderUpdate, KeySwitchoverCommand, KeyDisruptionCheck,
	KeyExecTask, KeyExecTimeout, KeyApprove, KeyMaintenanceWindow,
}

var (
	// dnsLabel is RFC 1123's label, the rule Kubernetes applies to pod
	// names. The set name becomes part of the pod name "<set>-<n>", which is
	// used as a Consul service tag and DNS label, so it must be one too.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// volumeNamePart is the character set we allow in claims, which become
	// part of "<claim>-<set>-<n>": safe in paths, ACL globs and shells.
	volumeNamePart = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	// digits is a plain non-negative decimal: no sign, no spaces, no "0x".
	digits = regexp.MustCompile(`^[0-9]+$`)
)

// ErrNotManaged is returned by Parse for a job without statefulset = "true".
// Such jobs are not ours; callers skip them without logging.
var ErrNotManaged = errors.New("job is not managed by nomad-statefulset (meta statefulset is not \"true\")")

// Problem is one broken rule in a parent job: the key (an annotation or a
// job field), the value it had, and the rule it breaks.
type Problem struct {
	Key   string
	Value string
	Rule  string
}

// String renders the problem as `key: "value" rule`, the form users see in
// the InvalidSpec condition, the log and `nomad-statefulset status`.
func (p Problem) String() string {
	return fmt.Sprintf("%s: %q %s", p.Key, p.Value, p.Rule)
}

// ValidationError lists every problem found in one parent job. Parse
// collects them all in one pass so a user fixes a job in one round.
type ValidationError struct {
	Namespace string
	Name      string
	Problems  []Problem
}

// Error lists every problem, one per line after a header naming the job.
func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid statefulset job %s/%s: %d problem(s)", e.Namespace, e.Name, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems accumulates Problems; a nil-safe helper keeps Parse linear.
type problems []Problem

func (ps *problems) add(key, value, rule string) {
	*ps = append(*ps, Problem{Key: key, Value: value, Rule: rule})
}

// IsManaged reports whether job asks to be managed: meta statefulset = "true".
func IsManaged(job *api.Job) bool {
	return job != nil && job.Meta[KeyManaged] == managedValue
}

// NotAnnotatedBecause says, for a job that IsManaged does not take, what its
// meta holds instead: the reason a set of its name is detached.
func NotAnnotatedBecause(job *api.Job) string {
	if job == nil {
		return "no job"
	}
	v, ok := job.Meta[KeyManaged]
	if !ok {
		return "its meta has no " + KeyManaged + " key"
	}
	return fmt.Sprintf("its meta says %s = %q, not %q", KeyManaged, v, managedValue)
}

// LooksMeantToBeManaged reports whether a job that IsManaged does not take
// was most likely meant to be a set's parent: its statefulset value is
// "true" in another spelling ("True", "yes", "1", "on"), or the key is
// missing while other statefulset_* keys are set.
func LooksMeantToBeManaged(job *api.Job) bool {
	if job == nil || IsManaged(job) {
		return false
	}
	v, ok := job.Meta[KeyManaged]
	if !ok {
		for k := range job.Meta {
			if strings.HasPrefix(k, KeyManaged+"_") {
				return true
			}
		}
		return false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "y", "1", "on", "t", "enabled", "enable":
		return true
	}
	return false
}

// Parse reads the parent job's annotations into a Spec with every DESIGN §1
// default applied, and checks the rules a parent job must follow. It never
// stops at the first problem: all of them come back in one
// *ValidationError. On error, only the returned Spec's Namespace, Name,
// Generation and Deleted are meaningful, so the caller can still attribute
// the InvalidSpec condition to the right set.
func Parse(job *api.Job) (reconciler.Spec, error) {
	if job == nil {
		return reconciler.Spec{}, fmt.Errorf("parse statefulset job: %w", errors.New("job is nil"))
	}
	spec := reconciler.Spec{
		Namespace:            strOr(job.Namespace, defaultNamespace),
		Name:                 strOr(job.ID, ""),
		Replicas:             defaultReplicas,
		PodManagementPolicy:  reconciler.OrderedReady,
		UpdateStrategy:       reconciler.RollingUpdate,
		MaxUnavailable:       reconciler.IntOrPercent{Value: defaultMaxUnavailableValue},
		RevisionHistoryLimit: defaultRevisionHistory,
		WhenDeleted:          reconciler.Retain,
		WhenScaled:           reconciler.Retain,
		ProgressDeadline:     defaultProgressDeadline,
		Spread:               DefaultSpread,
		LeaderUpdate:         reconciler.LeaderLast,
	}
	if spec.Namespace == "" {
		spec.Namespace = defaultNamespace
	}
	if job.JobModifyIndex != nil {
		spec.Generation = *job.JobModifyIndex
	}
	spec.Deleted = job.Stop != nil && *job.Stop
	if !IsManaged(job) {
		return spec, fmt.Errorf("parse statefulset job %s/%s: %w", spec.Namespace, spec.Name, ErrNotManaged)
	}

	var ps problems
	parseAnnotations(job.Meta, &spec, &ps)
	parseClaimTemplates(job.Meta, &spec, &ps)
	group := checkStructure(job, &ps)
	checkNames(spec, &ps)
	checkClaims(spec, group, &ps)
	checkLeader(job, &spec, group, &ps)
	checkRecreate(spec, job.Meta, &ps)

	if len(ps) > 0 {
		return spec, &ValidationError{Namespace: spec.Namespace, Name: spec.Name, Problems: ps}
	}
	return spec, nil
}

// parseAnnotations reads every statefulset_* key in sorted order (so the
// problem list is deterministic) into spec.
func parseAnnotations(meta map[string]string, spec *reconciler.Spec, ps *problems) {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		if strings.HasPrefix(k, annotationPrefix) || nearAnnotation(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw := meta[k]
		v := strings.TrimSpace(raw)
		switch k {
		case KeyReplicas:
			spec.Replicas = parseNonNegative(k, raw, v, spec.Replicas, ps)
		case KeyOrdinalsStart:
			spec.OrdinalsStart = parseNonNegative(k, raw, v, spec.OrdinalsStart, ps)
		case KeyPartition:
			spec.Partition = parseNonNegative(k, raw, v, spec.Partition, ps)
		case KeyMinReadySeconds:
			spec.MinReadySeconds = parseNonNegative(k, raw, v, spec.MinReadySeconds, ps)
		case KeyRevisionHistoryLimit:
			spec.RevisionHistoryLimit = parseNonNegative(k, raw, v, spec.RevisionHistoryLimit, ps)
		case KeyPodManagementPolicy:
			switch reconciler.PodManagementPolicy(v) {
			case reconciler.OrderedReady, reconciler.Parallel:
				spec.PodManagementPolicy = reconciler.PodManagementPolicy(v)
			default:
				ps.add(k, raw, oneOfRule(v, string(reconciler.OrderedReady), string(reconciler.Parallel)))
			}
		case KeyUpdateStrategy:
			switch reconciler.UpdateStrategy(v) {
			case reconciler.RollingUpdate, reconciler.OnDelete, reconciler.Recreate:
				spec.UpdateStrategy = reconciler.UpdateStrategy(v)
			default:
				ps.add(k, raw, oneOfRule(v, string(reconciler.RollingUpdate), string(reconciler.OnDelete), string(reconciler.Recreate)))
			}
		case KeyVolumeRetentionDeleted, KeyVolumeRetentionScaled:
			p := reconciler.RetentionPolicy(v)
			if p != reconciler.Retain && p != reconciler.Delete {
				ps.add(k, raw, oneOfRule(v, string(reconciler.Retain), string(reconciler.Delete)))
				continue
			}
			if k == KeyVolumeRetentionDeleted {
				spec.WhenDeleted = p
			} else {
				spec.WhenScaled = p
			}
		case KeyPaused:
			switch v {
			case "true":
				spec.Paused = true
			case "false":
				spec.Paused = false
			default:
				ps.add(k, raw, oneOfRule(v, "true", "false"))
			}
		case KeyMaxUnavailable:
			if mu, ok := parseMaxUnavailable(v); ok {
				spec.MaxUnavailable = mu
			} else {
				ps.add(k, raw, "is not an integer ≥ 1 or a percentage from 1% to 100%")
			}
		case KeyProgressDeadline:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				ps.add(k, raw, "is not a Go duration > 0 (such as 90s or 10m)")
				continue
			}
			spec.ProgressDeadline = d
		case KeyVolumeClaims:
			spec.VolumeClaims = parseClaims(k, raw, ps)
		case KeySpread:
			if !spreadAttribute.MatchString(v) {
				ps.add(k, raw, "is not a node attribute such as ${node.unique.id}, ${node.datacenter}, ${node.class}, ${node.pool}, ${meta.<key>} or ${attr.<key>}")
				continue
			}
			spec.Spread = v
		case KeySpreadRequired:
			switch v {
			case "true":
				spec.SpreadRequired = true
			case "false":
				spec.SpreadRequired = false
			default:
				ps.add(k, raw, oneOfRule(v, "true", "false"))
			}
		case KeyLeaderCheck:
			// Which checks exist is known only with the group: checkLeader.
			spec.LeaderCheck = v
		case KeyLeaderUpdate:
			switch u := reconciler.LeaderUpdate(v); u {
			case reconciler.LeaderLast, reconciler.LeaderSwitchover, reconciler.LeaderSupervised:
				spec.LeaderUpdate = u
			default:
				ps.add(k, raw, oneOfRule(v, string(reconciler.LeaderLast), string(reconciler.LeaderSwitchover), string(reconciler.LeaderSupervised)))
			}
		case KeySwitchoverCommand:
			spec.SwitchoverCommand = parseCommand(k, raw, v, ps)
		case KeyDisruptionCheck:
			spec.DisruptionCheck = parseCommand(k, raw, v, ps)
		case KeyExecTask:
			// Checked against the group's tasks in checkLeader.
			spec.ExecTask = v
		case KeyExecTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				ps.add(k, raw, "is not a Go duration > 0 (such as 30s or 2m)")
				continue
			}
			spec.ExecTimeout = d
		case KeyApprove:
			if v == "" {
				ps.add(k, raw, "is empty: it holds the token 'nomad-statefulset rollout approve' writes")
				continue
			}
			spec.Approval = v
		case KeyMaintenanceWindow:
			ws, err := reconciler.ParseMaintenanceWindows(v)
			if err != nil {
				ps.add(k, raw, err.Error())
				continue
			}
			spec.MaintenanceWindows = ws
		default:
			if strings.HasPrefix(k, KeyClaimPrefix) {
				// They need the claims, which sort after them:
				// parseClaimTemplates.
				continue
			}
			if strings.HasPrefix(k, KeyPodReplacePrefix) {
				if req, ok := parsePodReplace(k, raw, v, ps); ok {
					spec.Replacements = append(spec.Replacements, req)
				}
				continue
			}
			ps.add(k, raw, unknownKeyRule(k))
		}
	}
}

// spreadAttribute is the node attributes statefulset_spread may name.
var spreadAttribute = regexp.MustCompile(`^\$\{(node\.unique\.id|node\.unique\.name|node\.datacenter|node\.class|node\.pool|(meta|attr)\.[A-Za-z0-9_.-]+)\}$`)

// parsePodReplace reads a `pod replace` request key.
func parsePodReplace(k, raw, v string, ps *problems) (reconciler.Replacement, bool) {
	ord := strings.TrimPrefix(k, KeyPodReplacePrefix)
	if !digits.MatchString(ord) {
		ps.add(k, raw, "names no ordinal: the key is statefulset_pod_replace_<ordinal>, written by 'nomad-statefulset pod replace'")
		return reconciler.Replacement{}, false
	}
	n, err := strconv.ParseInt(ord, 10, 0)
	if err != nil || n > math.MaxInt32 {
		ps.add(k, raw, fmt.Sprintf("names an ordinal beyond %d", math.MaxInt32))
		return reconciler.Replacement{}, false
	}
	token, newVolume := strings.CutSuffix(v, PodReplaceNewVolume)
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, ", ") {
		ps.add(k, raw, `is not "<token>" or "<token>,new-volume" (as 'nomad-statefulset pod replace' writes it)`)
		return reconciler.Replacement{}, false
	}
	return reconciler.Replacement{Ordinal: int(n), Token: token, NewVolume: newVolume}, true
}

// parseNonNegative parses a plain decimal integer ≥ 0. It refuses signs,
// spaces inside and values that overflow, so "-1", "+3" and "1e3" all fail
// with the same rule the user can act on.
func parseNonNegative(key, raw, v string, def int, ps *problems) int {
	if !digits.MatchString(v) {
		ps.add(key, raw, "is not an integer ≥ 0")
		return def
	}
	n, err := strconv.ParseInt(v, 10, 0)
	if err != nil || n > math.MaxInt32 {
		// MaxInt32 keeps every later sum (start+replicas) and every
		// rendered ordinal far from overflow on any platform.
		ps.add(key, raw, fmt.Sprintf("is not an integer from 0 to %d", math.MaxInt32))
		return def
	}
	return int(n)
}

// parseMaxUnavailable accepts "N" with N ≥ 1 or "P%" with 1 ≤ P ≤ 100, as
// Kubernetes validates rollingUpdate.maxUnavailable: zero would block every
// update, and more than 100% means nothing.
func parseMaxUnavailable(v string) (reconciler.IntOrPercent, bool) {
	if p, ok := strings.CutSuffix(v, percentSuffix); ok {
		if !digits.MatchString(p) {
			return reconciler.IntOrPercent{}, false
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > maxPercent {
			return reconciler.IntOrPercent{}, false
		}
		return reconciler.IntOrPercent{Value: n, Percent: true}, true
	}
	if !digits.MatchString(v) {
		return reconciler.IntOrPercent{}, false
	}
	n, err := strconv.ParseInt(v, 10, 0)
	if err != nil || n < 1 || n > math.MaxInt32 {
		return reconciler.IntOrPercent{}, false
	}
	return reconciler.IntOrPercent{Value: int(n)}, true
}

// parseClaims splits the comma list, trimming spaces. Empty entries and
// duplicates are problems: "data,,logs" is almost surely a typo, and a claim
// listed twice would create its volume twice.
func parseClaims(key, raw string, ps *problems) []string {
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	var claims []string
	seen := map[string]bool{}
	for _, c := range strings.Split(raw, ",") {
		c = strings.TrimSpace(c)
		switch {
		case c == "":
			ps.add(key, raw, "has an empty entry in its comma list")
		case seen[c]:
			ps.add(key, raw, fmt.Sprintf("names %q more than once", c))
		default:
			seen[c] = true
			claims = append(claims, c)
		}
	}
	return claims
}

// checkStructure applies the job-shape rules: one task group, count 0,
// service type. It returns the template group, or nil if there is no single
// usable one.
func checkStructure(job *api.Job, ps *problems) *api.TaskGroup {
	// The child job is always a service job (it needs deployments for
	// health), so a batch or system parent would silently change meaning.
	if t := strOr(job.Type, api.JobTypeService); t != api.JobTypeService {
		ps.add(structuralKeyType, t, "is not \"service\": the pods of a set are long-running services")
	}
	var groups []*api.TaskGroup
	for _, g := range job.TaskGroups {
		if g != nil {
			groups = append(groups, g)
		}
	}
	if len(groups) != 1 {
		ps.add(structuralKeyGroups, strconv.Itoa(len(groups))+" groups", "is not exactly one task group: the single group is the pod template")
		return nil
	}
	g := groups[0]
	// A nil count means 1 to Nomad: the template would run an unmanaged
	// instance outside every ordinal, so an explicit 0 is required.
	count := "unset (Nomad's default is 1)"
	if g.Count != nil {
		count = strconv.Itoa(*g.Count)
	}
	if g.Count == nil || *g.Count != 0 {
		ps.add(structuralKeyCount, count, "is not 0: the group is a template and nomad-statefulset creates the instances")
	}
	return g
}

// checkNames makes sure every name derived from the set is valid for Nomad
// and for DNS before anything is created: a pod name that Nomad or Consul
// rejects would surface only on the first failed register, mid-rollout.
func checkNames(spec reconciler.Spec, ps *problems) {
	if strings.ContainsAny(spec.Namespace, " \x00") {
		ps.add(structuralKeyNamespace, spec.Namespace, "contains a space or a NUL character")
	}
	if !dnsLabel.MatchString(spec.Name) {
		ps.add(structuralKeyID, spec.Name, "is not a valid set name: "+dnsLabelRule)
		return
	}
	if pod := podName(spec.Name, maxOrdinal(spec)); len(pod) > maxPodNameLength {
		ps.add(structuralKeyID, spec.Name, fmt.Sprintf("is too long: pod name %q is longer than %d characters", pod, maxPodNameLength))
	}
}

// checkClaims verifies each claim names a host volume of the template group
// and yields a valid per-ordinal volume name.
func checkClaims(spec reconciler.Spec, group *api.TaskGroup, ps *problems) {
	for _, c := range spec.VolumeClaims {
		if !volumeNamePart.MatchString(c) {
			ps.add(KeyVolumeClaims, c, "is not a valid claim name: "+volumeNameRule)
			continue
		}
		if vn := volumeName(c, spec.Name, maxOrdinal(spec)); len(vn) > maxVolumeNameLength {
			ps.add(KeyVolumeClaims, c, fmt.Sprintf("is too long: volume name %q is longer than %d characters", vn, maxVolumeNameLength))
		}
		if group == nil {
			continue
		}
		v, ok := group.Volumes[c]
		switch {
		case !ok || v == nil:
			ps.add(KeyVolumeClaims, c, "is not a volume of the task group"+closest(c, mapKeys(group.Volumes)))
		case v.Type != "host":
			ps.add(KeyVolumeClaims, c, fmt.Sprintf("is a volume of type %q, not \"host\"", v.Type))
		case v.PerAlloc:
			// per_alloc makes Nomad append "[n]" to the source: it would
			// fight the per-ordinal name this daemon sets.
			ps.add(KeyVolumeClaims, c, "is a per_alloc volume: nomad-statefulset names per-ordinal volumes itself")
		}
	}
}

// parseCommand reads a command line the daemon runs with /bin/sh -c inside
// a pod. An empty one runs nothing and exits 0: a disruption check that
// always says yes, a switchover that never hands over. A NUL cannot be
// passed to exec at all.
func parseCommand(key, raw, v string, ps *problems) string {
	switch {
	case v == "":
		ps.add(key, raw, "is not a command line: it is empty")
		return ""
	case strings.ContainsRune(v, 0):
		ps.add(key, raw, "is not a command line: it contains a NUL character")
		return ""
	}
	return v
}

// checkLeader applies the rules of the leader-aware keys (DESIGN §3b) that
// need the group or more than one key, and picks the exec task when the
// group's only task is meant. Keys the user set but got wrong are reported
// on their own key only: "requires" asks whether a key is present, so one
// mistake is not reported twice.
func checkLeader(job *api.Job, spec *reconciler.Spec, group *api.TaskGroup, ps *problems) {
	meta := job.Meta
	if u := spec.LeaderUpdate; u != reconciler.LeaderLast {
		if _, ok := meta[KeyLeaderCheck]; !ok {
			ps.add(KeyLeaderUpdate, meta[KeyLeaderUpdate], "requires "+KeyLeaderCheck+": without it no pod is the leader")
		}
		if _, ok := meta[KeySwitchoverCommand]; !ok && u == reconciler.LeaderSwitchover {
			ps.add(KeyLeaderUpdate, meta[KeyLeaderUpdate], "requires "+KeySwitchoverCommand+": the command that hands leadership to another pod")
		}
	}
	if group == nil {
		// The group is broken (reported already): there is nothing to
		// look names up in.
		return
	}
	if raw, ok := meta[KeyLeaderCheck]; ok {
		names := serviceCheckNames(job, group)
		if !slices.Contains(names, spec.LeaderCheck) {
			rule := "is not the name of a service check of the task group, which has none"
			if len(names) > 0 {
				rule = "is not the name of a service check of the task group (its checks: " + quoteList(names) + ")"
			}
			ps.add(KeyLeaderCheck, raw, rule)
		}
	}
	checkExecTask(meta, spec, group, ps)
}

// checkExecTask checks statefulset_exec_task, or picks the group's only
// task when it is not set and a command needs one. Without a command key
// the task stays unset: nothing runs in it.
func checkExecTask(meta map[string]string, spec *reconciler.Spec, group *api.TaskGroup, ps *problems) {
	var tasks []string
	byName := map[string]*api.Task{}
	for _, t := range group.Tasks {
		if t != nil {
			tasks = append(tasks, t.Name)
			byName[t.Name] = t
		}
	}
	if raw, ok := meta[KeyExecTask]; ok {
		t, found := byName[spec.ExecTask]
		switch {
		case !found:
			ps.add(KeyExecTask, raw, "is not a task of the task group (its tasks: "+quoteList(tasks)+")"+closest(spec.ExecTask, tasks))
		case isEphemeral(t):
			ps.add(KeyExecTask, raw, ephemeralRule(t))
		}
		return
	}
	var commands []string
	for _, k := range []string{KeyDisruptionCheck, KeySwitchoverCommand} {
		if _, ok := meta[k]; ok {
			commands = append(commands, k)
		}
	}
	if len(commands) == 0 {
		return
	}
	if len(tasks) != 1 {
		ps.add(KeyExecTask, "", fmt.Sprintf("is required: %s run in one task, and the group has %d (its tasks: %s)",
			strings.Join(commands, " and "), len(tasks), quoteList(tasks)))
		return
	}
	if t := byName[tasks[0]]; isEphemeral(t) {
		ps.add(KeyExecTask, "", "is required: the group's only task "+strconv.Quote(t.Name)+" "+ephemeralRule(t))
		return
	}
	spec.ExecTask = tasks[0]
}

// isEphemeral reports whether a task is a lifecycle hook that does not
// keep running (prestart, poststart or poststop without sidecar): a
// command could never find it running while the pod is ready.
func isEphemeral(t *api.Task) bool {
	return t.Lifecycle != nil && t.Lifecycle.Hook != "" && !t.Lifecycle.Sidecar
}

func ephemeralRule(t *api.Task) string {
	return fmt.Sprintf("is a %s task without sidecar = true: it does not keep running, and the commands need a running task", t.Lifecycle.Hook)
}

// serviceCheckNames lists the names of every service check of the group, group
// services first, as Nomad names them: a check without a name is called
// `service: "<service>" check` (nomad/structs ServiceCheck.Canonicalize).
// The parent read back from Nomad carries that name already; a job
// parsed from HCL (validate) does not, so it is computed here the same way.
func serviceCheckNames(job *api.Job, group *api.TaskGroup) []string {
	var names []string
	seen := map[string]bool{}
	eachServiceCheck(job, group, func(name string, _ *api.Service, _ *api.ServiceCheck) {
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	})
	return names
}

// eachServiceCheck calls fn with every service check of the group, group
// services first, named as serviceCheckNames names them, with its service.
func eachServiceCheck(job *api.Job, group *api.TaskGroup, fn func(name string, s *api.Service, c *api.ServiceCheck)) {
	add := func(task string, services []*api.Service) {
		for _, s := range services {
			if s == nil {
				continue
			}
			for i := range s.Checks {
				c := &s.Checks[i]
				n := c.Name
				if n == "" {
					n = fmt.Sprintf("service: %q check", nomadServiceName(job, group, task, s.Name))
				}
				fn(n, s, c)
			}
		}
	}
	add("", group.Services)
	for _, t := range group.Tasks {
		if t != nil {
			add(t.Name, t.Services)
		}
	}
}

// serviceNameVar is the ${...} reference Nomad's args.ReplaceEnv replaces.
var serviceNameVar = regexp.MustCompile(`\$\{[a-zA-Z0-9_\-\.]+\}`)

// nomadServiceName is the name Nomad gives a service: "<job>-<group>" or
// "<job>-<group>-<task>" when it has none (api Service.Canonicalize), with
// ${JOB}, ${TASKGROUP}, ${TASK} and ${BASE} replaced (nomad/structs
// Service.Canonicalize; a group service's ${TASK} is "group"). The
// default check names are built from it.
func nomadServiceName(job *api.Job, group *api.TaskGroup, task, name string) string {
	jobName := strOr(job.Name, strOr(job.ID, ""))
	groupName := strOr(group.Name, "")
	if name == "" {
		name = jobName + "-" + groupName
		if task != "" {
			name += "-" + task
		}
	}
	if task == "" {
		task = "group"
	}
	vars := map[string]string{
		"JOB": jobName, "TASKGROUP": groupName, "TASK": task,
		"BASE": jobName + "-" + groupName + "-" + task,
	}
	return serviceNameVar.ReplaceAllStringFunc(name, func(ref string) string {
		if v, ok := vars[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// quoteList renders names as "a", "b" for a rule; none is "none".
func quoteList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// maxOrdinal is the largest ordinal the spec can produce; names are
// checked at it because it gives the longest names.
func maxOrdinal(spec reconciler.Spec) int {
	if spec.Replicas == 0 {
		return spec.OrdinalsStart
	}
	return spec.OrdinalsStart + spec.Replicas - 1
}

func oneOfRule(v string, allowed ...string) string {
	rule := "is not one of " + strings.Join(allowed, ", ")
	for _, a := range allowed {
		if strings.EqualFold(a, v) {
			return rule + fmt.Sprintf(" (values are case-sensitive: did you mean %q?)", a)
		}
	}
	return rule
}

// nearAnnotation catches typos that lose the prefix itself, such as
// "statefulset-replicas" or "statefullset_replicas": such a key would be
// ignored silently otherwise, and would even enter the revision data.
func nearAnnotation(k string) bool {
	if k == KeyManaged {
		return false
	}
	for _, a := range annotationKeys {
		if levenshtein.Distance(k, a, nil) <= nearTypoDistance {
			return true
		}
	}
	return false
}

func unknownKeyRule(k string) string {
	if strings.HasSuffix(k, ClaimCapacitySuffix) || strings.HasSuffix(k, ClaimClassSuffix) {
		return "is not a known statefulset annotation: a claim's keys are " + ClaimCapacityKey("<claim>") + " and " + ClaimClassKey("<claim>")
	}
	return "is not a known statefulset annotation" + closest(k, annotationKeys)
}

// closest suggests the candidate nearest to s by Levenshtein distance, when
// it is near enough to be a plausible typo.
func closest(s string, candidates []string) string {
	best, bestDist := "", suggestionMaxDistance+1
	for _, c := range candidates {
		if d := levenshtein.Distance(s, c, nil); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func strOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// podName is "<set>-<ordinal>", the child job ID and the pod's identity.
// The reconciler owns the naming scheme; going through it keeps the names
// the controller computes and the names rendered here from ever diverging.
func podName(set string, ordinal int) string {
	return reconciler.PodName(set, ordinal)
}

// volumeName is "<claim>-<set>-<ordinal>", built the way Kubernetes names
// PVCs: the name the controller creates the volume under before the child
// that mounts it.
func volumeName(claim, set string, ordinal int) string {
	return reconciler.VolumeName(claim, set, ordinal)
}

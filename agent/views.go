package agent

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// maxEvents is how many recent events are kept per set for `status`.
const maxEvents = 20

// The views are what the HTTP API shows for each set, refreshed at the end
// of every reconcile and kept in the set's state. Reads never touch Nomad or
// the store.

// withView runs f on key's view under its lock.
func (s *setStates) withView(key backend.SetKey, f func(d *client.SetDetail)) {
	st := s.of(key)
	st.viewMu.Lock()
	defer st.viewMu.Unlock()
	f(&st.view)
}

func (s *setStates) event(key backend.SetKey, now time.Time, typ, msg string) {
	s.withView(key, func(d *client.SetDetail) {
		d.Events = append(d.Events, client.Event{Time: now, Type: typ, Message: msg})
		if len(d.Events) > maxEvents {
			d.Events = append([]client.Event(nil), d.Events[len(d.Events)-maxEvents:]...)
		}
	})
}

func (s *setStates) setError(key backend.SetKey, msg string) {
	s.withView(key, func(d *client.SetDetail) { d.Error = msg })
}

func (s *setStates) setStatus(key backend.SetKey, st reconciler.Status) {
	s.withView(key, func(d *client.SetDetail) { d.Status = statusView(st) })
}

// update replaces the set's view with the outcome of a reconcile, which
// also clears an error an earlier pass showed (an invalid spec, a corrupt
// stored value).
func (s *setStates) update(key backend.SetKey, spec reconciler.Spec, st reconciler.Status, obs backend.Observation, revs []reconciler.Revision, now time.Time) {
	set := s.of(key)
	counts := map[string]int{}
	pods := make([]client.Pod, 0, len(obs.Pods))
	claimsByOrd := claimViews(spec, obs.Volumes)
	volumesByOrd := map[int][]string{}
	volumeNodes := map[int][]string{}
	for _, vol := range obs.Volumes {
		volumesByOrd[vol.Volume.Ordinal] = append(volumesByOrd[vol.Volume.Ordinal], vol.Volume.Name)
		volumeNodes[vol.Volume.Ordinal] = append(volumeNodes[vol.Volume.Ordinal], vol.NodeID)
	}
	for _, p := range obs.Pods {
		state, notReady := podStateAndReason(p, spec.MinReadySeconds, obs.Nodes, volumeNodes[p.Pod.Ordinal], now)
		counts[state]++
		pods = append(pods, client.Pod{
			Ordinal: p.Pod.Ordinal, Name: reconciler.PodName(spec.Name, p.Pod.Ordinal),
			Revision: p.Pod.Revision, AllocID: p.AllocID, NodeID: p.NodeID, State: state, NotReady: notReady,
			ReadySince: p.Pod.ReadySince, Volumes: volumesByOrd[p.Pod.Ordinal], Leader: p.Pod.Leader,
			Claims: claimsByOrd[p.Pod.Ordinal], OlderRendering: set.rendered.older[p.JobID],
		})
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Ordinal < pods[j].Ordinal })
	rv := make([]client.Revision, 0, len(revs))
	for _, r := range revs {
		rv = append(rv, client.Revision{Number: r.Number, Name: r.Name, CreatedAt: r.CreatedAt, JobVersion: r.JobVersion, Template: string(r.Data)})
	}
	sort.Slice(rv, func(i, j int) bool { return rv[i].Number < rv[j].Number })

	set.viewMu.Lock()
	defer set.viewMu.Unlock()
	d := &set.view
	for _, e := range readinessEvents(d.Pods, pods) {
		d.Events = append(d.Events, client.Event{Time: now, Type: e[0], Message: e[1]})
	}
	if len(d.Events) > maxEvents {
		d.Events = append([]client.Event(nil), d.Events[len(d.Events)-maxEvents:]...)
	}
	switch {
	case st.UpdateRevision == "" || st.UpdateRevision == st.CurrentRevision:
		set.rolloutSince, set.rolloutTo = time.Time{}, ""
	case set.rolloutTo != st.UpdateRevision:
		set.rolloutSince, set.rolloutTo = now, st.UpdateRevision
	}
	set.hasLeaderCheck = spec.LeaderCheck != ""
	d.Spec = client.SpecOf(spec)
	d.Status = statusView(st)
	d.Pods = pods
	d.Revisions = rv
	d.Error = ""
	if s.onPods != nil {
		set.podStates = s.onPods(key, set.podStates, counts)
	}
}

// Event types of readiness changes.
const (
	// EventPodNotReady: a pod that was Ready stopped being Ready, its
	// allocation unchanged (a task restarts, a check turned critical).
	EventPodNotReady = "PodNotReady"
	// EventPodReady: a pod whose allocation ran without being Ready, for
	// a reason other than Nomad's first health verdict, is Ready again.
	EventPodReady = "PodReady"
)

// readinessEvents compares a set's pods before and after a reconcile and
// returns an event (type, message) for each pod whose readiness changed
// while its allocation stayed the same. A new allocation becoming Ready
// for the first time is the rollout's ordinary progress, not news.
func readinessEvents(before, after []client.Pod) [][2]string {
	var out [][2]string
	for _, p := range after {
		i := slices.IndexFunc(before, func(o client.Pod) bool { return o.Ordinal == p.Ordinal })
		if i < 0 || p.AllocID == "" || before[i].AllocID != p.AllocID {
			continue
		}
		was, is := before[i], p
		switch {
		case isReadyState(was.State) && is.State == "Running":
			out = append(out, [2]string{EventPodNotReady, fmt.Sprintf("%s is no longer ready: %s", p.Name, orUnknown(is.NotReady))})
		case was.State == "Running" && isReadyState(is.State) && was.NotReady != "" && was.NotReady != backend.WaitingForHealth && was.NotReady != notReadyHookHeld:
			out = append(out, [2]string{EventPodReady, fmt.Sprintf("%s is ready again (it was not: %s)", p.Name, was.NotReady)})
		}
	}
	return out
}

func isReadyState(s string) bool { return s == "Ready" || s == "Available" }

func orUnknown(s string) string {
	if s == "" {
		return "no reason known"
	}
	return s
}

// podStateAndReason is the state status shows for a pod, and why it is not
// ready when that has a reason to show (client.Pod.NotReady): the node
// that keeps it down or moving comes before Nomad's placement failure.
func podStateAndReason(p backend.PodDetail, minReady int, nodes map[string]backend.NodeState, volumeNodes []string, now time.Time) (state, notReady string) {
	state = podState(p.Pod, minReady, now)
	if why := nodeReason(p, nodes, volumeNodes); why != "" && state != "Terminating" {
		state = why
	} else if state == "Pending" && p.Blocked != "" {
		state = "Blocked"
	}
	switch {
	case state == "Running":
		notReady = p.NotReady
	case state == "Blocked" || state == "WaitingForNode":
		notReady = p.Blocked
	case state == "Pending":
		notReady = p.Waiting
	}
	return state, notReady
}

// nodeReason names why a pod's node keeps it down or moving: NodeDown (its
// allocation's node, or for a pod not placed yet its volume's node, is down
// or disconnected), NodeDraining (its node is being drained; the daemon
// moves it within the budget), WaitingForNode (not placed, and its volume's
// node takes no new allocations). "" when its nodes are fine.
func nodeReason(p backend.PodDetail, nodes map[string]backend.NodeState, volumeNodes []string) string {
	if n, ok := nodes[p.NodeID]; ok && p.NodeID != "" && p.Pod.Phase != reconciler.PhasePending {
		switch {
		case n.Down():
			return "NodeDown"
		case n.Draining:
			return "NodeDraining"
		}
	}
	if p.Pod.Phase != reconciler.PhasePending {
		return ""
	}
	for _, id := range volumeNodes {
		if n, ok := nodes[id]; ok {
			if n.Down() {
				return "NodeDown"
			}
			return "WaitingForNode"
		}
	}
	return ""
}

func podState(p reconciler.Pod, minReady int, now time.Time) string {
	switch {
	case p.Terminating:
		return "Terminating"
	case p.Phase == reconciler.PhaseFailed:
		return "Failed"
	case p.Phase == reconciler.PhaseSucceeded:
		// A service that ended was stopped from outside: the set wants it
		// running, so it is never shown as Succeeded.
		return "Stopped"
	case reconciler.Available(p, minReady, now):
		return "Available"
	case p.Ready:
		return "Ready"
	case p.Phase == reconciler.PhaseRunning:
		return "Running"
	}
	return "Pending"
}

func (s *setStates) list() client.SetList {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := client.SetList{Sets: []client.SetSummary{}}
	for _, st := range s.m {
		st.viewMu.Lock()
		d := &st.view
		out.Sets = append(out.Sets, client.SetSummary{
			Namespace: d.Namespace, Name: d.Name, Replicas: d.Spec.Replicas, ReadyReplicas: d.Status.ReadyReplicas,
			CurrentRevision: d.Status.CurrentRevision, UpdateRevision: d.Status.UpdateRevision, Conditions: d.Status.Conditions,
			Error: d.Error,
		})
		st.viewMu.Unlock()
	}
	sort.Slice(out.Sets, func(i, j int) bool {
		if out.Sets[i].Namespace != out.Sets[j].Namespace {
			return out.Sets[i].Namespace < out.Sets[j].Namespace
		}
		return out.Sets[i].Name < out.Sets[j].Name
	})
	return out
}

// setMetrics is what the metrics say of one set, read at a scrape.
type setMetrics struct {
	key      backend.SetKey
	desired  int
	status   client.Status
	leader   int // the leading pod's ordinal; -1 for none
	rollout  time.Time
	hasCheck bool
}

// metricsViews returns every set's metrics, as its view says now: a set
// that is dropped has none, so its series go with it.
func (s *setStates) metricsViews() []setMetrics {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]setMetrics, 0, len(s.m))
	for key, st := range s.m {
		st.viewMu.Lock()
		m := setMetrics{key: key, desired: st.view.Spec.Replicas, status: st.view.Status, leader: -1,
			rollout: st.rolloutSince, hasCheck: st.hasLeaderCheck}
		m.status.Conditions = slices.Clone(m.status.Conditions)
		for _, p := range st.view.Pods {
			if p.Leader {
				m.leader = p.Ordinal
			}
		}
		st.viewMu.Unlock()
		out = append(out, m)
	}
	return out
}

func (s *setStates) get(key backend.SetKey) (client.SetDetail, bool) {
	st, ok := s.peek(key)
	if !ok {
		return client.SetDetail{}, false
	}
	st.viewMu.Lock()
	defer st.viewMu.Unlock()
	d := &st.view
	cp := *d
	cp.Pods = append([]client.Pod(nil), d.Pods...)
	cp.Revisions = append([]client.Revision(nil), d.Revisions...)
	cp.Events = append([]client.Event(nil), d.Events...)
	return cp, true
}

func statusView(s reconciler.Status) client.Status {
	conds := make([]client.Condition, 0, len(s.Conditions))
	for _, c := range s.Conditions {
		conds = append(conds, client.Condition{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime})
	}
	return client.Status{
		ObservedGeneration: s.ObservedGeneration, Replicas: s.Replicas, ReadyReplicas: s.ReadyReplicas,
		AvailableReplicas: s.AvailableReplicas, CurrentReplicas: s.CurrentReplicas, UpdatedReplicas: s.UpdatedReplicas,
		CurrentRevision: s.CurrentRevision, UpdateRevision: s.UpdateRevision, CollisionCount: s.CollisionCount,
		Conditions: conds,
	}
}

// claimViews shows each ordinal's volumes with their class and sizes, and
// what their claim template asks of them.
func claimViews(spec reconciler.Spec, vols []backend.VolumeDetail) map[int][]client.ClaimVolume {
	out := map[int][]client.ClaimVolume{}
	for _, v := range vols {
		cv := client.ClaimVolume{Claim: v.Volume.Claim, Name: v.Volume.Name, Class: v.Volume.Class, Capacity: v.Volume.Capacity}
		for _, t := range spec.ClaimTemplates {
			if t.Claim == v.Volume.Claim {
				cv.Requested = t.CapacityMin
				cv.ClassDiffers = t.Class != v.Volume.Class
				cv.ResizePending = !cv.ClassDiffers && v.Volume.Capacity > 0 && t.CapacityMin > v.Volume.Capacity
			}
		}
		out[v.Volume.Ordinal] = append(out[v.Volume.Ordinal], cv)
	}
	return out
}

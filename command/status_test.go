package command

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// webDetail is a set halfway through a rolling update: web-2 is updated and
// ready, web-1 is being replaced, web-0 is still at the old revision.
func webDetail() *client.SetDetail {
	return &client.SetDetail{
		Namespace: "default",
		Name:      "web",
		Spec: client.Spec{
			Replicas: 3, PodManagementPolicy: "OrderedReady", UpdateStrategy: "RollingUpdate",
			MaxUnavailable: "1", RevisionHistoryLimit: 10, VolumeClaims: []string{"data"},
			WhenDeleted: "Retain", WhenScaled: "Retain", ProgressDeadline: "10m0s",
		},
		Status: client.Status{
			ObservedGeneration: 42, Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2,
			CurrentReplicas: 1, UpdatedReplicas: 2, CurrentRevision: "web-5d8f7c", UpdateRevision: "web-7a9b1e",
			Conditions: []client.Condition{
				{Type: "Progressing", Status: true, Reason: "RollingUpdate", Message: "updating web-1 to web-7a9b1e", LastTransitionTime: testNow.Add(-90 * time.Second)},
				{Type: "Available", Status: false, Reason: "MinimumReplicasUnavailable", Message: "2 of 3 replicas available", LastTransitionTime: testNow.Add(-75 * time.Second)},
			},
		},
		Pods: []client.Pod{
			{Ordinal: 2, Name: "web-2", Revision: "web-7a9b1e", AllocID: "c3d4e5f6-0000-4000-8000-000000000002", NodeID: "9f8e7d6c-0000-4000-8000-00000000000a", State: "Available", ReadySince: testNow.Add(-62 * time.Second), Volumes: []string{"data-web-2"}},
			{Ordinal: 0, Name: "web-0", Revision: "web-5d8f7c", AllocID: "a1b2c3d4-0000-4000-8000-000000000000", NodeID: "9f8e7d6c-0000-4000-8000-00000000000a", State: "Available", ReadySince: testNow.Add(-3 * time.Hour), Volumes: []string{"data-web-0"}},
			{Ordinal: 1, Name: "web-1", Revision: "web-7a9b1e", AllocID: "b2c3d4e5-0000-4000-8000-000000000001", NodeID: "1a2b3c4d-0000-4000-8000-00000000000b", State: "Pending", Volumes: []string{"data-web-1"}},
		},
		Revisions: []client.Revision{
			{Number: 2, Name: "web-7a9b1e", CreatedAt: testNow.Add(-2 * time.Minute), JobVersion: 3, Template: `{"Datacenters":["dc1"],"Group":{"Name":"web"}}`},
			{Number: 1, Name: "web-5d8f7c", CreatedAt: testNow.Add(-72 * time.Hour), JobVersion: 0, Template: `{"Datacenters":["dc1"],"Group":{"Name":"web","Meta":{"v":"1"}}}`},
		},
		Events: []client.Event{
			{Time: testNow.Add(-2 * time.Minute), Type: "RevisionCreated", Message: "created revision web-7a9b1e from job version 3"},
			{Time: testNow.Add(-100 * time.Second), Type: "PodDeleted", Message: "deleted web-2 at web-5d8f7c for update"},
			{Time: testNow.Add(-80 * time.Second), Type: "PodCreated", Message: "created web-2 at web-7a9b1e"},
			{Time: testNow.Add(-61 * time.Second), Type: "PodDeleted", Message: "deleted web-1 at web-5d8f7c\nfor update"},
		},
	}
}

// dbDetail is a settled set in another namespace, with an invalid-spec
// sibling to show conditions in the list.
func dbDetail() *client.SetDetail {
	return &client.SetDetail{
		Namespace: "prod", Name: "db",
		Spec:   client.Spec{Replicas: 2, UpdateStrategy: "OnDelete"},
		Status: client.Status{ReadyReplicas: 2, CurrentRevision: "db-11aa22", UpdateRevision: "db-11aa22", Conditions: []client.Condition{{Type: "Available", Status: true}}},
	}
}

func brokenDetail() *client.SetDetail {
	return &client.SetDetail{
		Namespace: "default", Name: "cache",
		Error: `statefulset_replicas: "three" is not an integer ≥ 0`,
		Status: client.Status{Conditions: []client.Condition{
			{Type: "InvalidSpec", Status: true, Reason: "InvalidAnnotation", Message: `statefulset_replicas: "three" is not an integer ≥ 0`, LastTransitionTime: testNow.Add(-5 * time.Minute)},
		}},
	}
}

func runStatus(t *testing.T, agent *fakeAgent, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	cmd := &StatusCommand{Meta: m}
	code := cmd.Run(append([]string{"-address", agent.srv.URL}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func TestStatusListAllNamespacesGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	agent.add(dbDetail())
	agent.add(brokenDetail())
	code, out, errOut := runStatus(t, agent, "-namespace", "*")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "status_list_all", out)
}

func TestStatusListFiltersNamespace(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	agent.add(dbDetail())
	agent.add(brokenDetail())
	code, out, _ := runStatus(t, agent)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	golden(t, "status_list_default", out)
	if strings.Contains(out, "db") {
		t.Errorf("set of namespace prod listed under default:\n%s", out)
	}
	if got := agent.requests[0]; got != "/v1/statefulsets?namespace=default" {
		t.Errorf("request = %q, want the namespace sent as a query", got)
	}
}

func TestStatusListEmpty(t *testing.T) {
	agent := newFakeAgent(t)
	code, out, _ := runStatus(t, agent, "-namespace", "nothing-here")
	if code != ExitOK || !strings.HasSuffix(strings.TrimSpace(out), "\n"+`No statefulsets in namespace "nothing-here"`) {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

func TestStatusSetGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, errOut := runStatus(t, agent, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "status_set", out)
}

// A pod that runs without being Ready says why, in a column that shows
// only then.
func TestStatusSetNotReadyGolden(t *testing.T) {
	agent := newFakeAgent(t)
	d := webDetail()
	d.Pods[0].State, d.Pods[0].ReadySince = "Running", time.Time{}
	d.Pods[0].NotReady = `check "data" of service "web" is critical: /data/healthy is missing`
	agent.add(d)
	code, out, errOut := runStatus(t, agent, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "status_set_not_ready", out)
}

func TestStatusSetVerboseGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	// Flags after the set name work too, as operators type them.
	code, out, errOut := runStatus(t, agent, "web", "-verbose")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "status_set_verbose", out)
}

func TestStatusSetInvalidSpecGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(brokenDetail())
	code, out, _ := runStatus(t, agent, "cache")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	golden(t, "status_set_invalid", out)
}

func TestStatusJSON(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, _ := runStatus(t, agent, "-json", "web")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var d client.SetDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("-json output is not a SetDetail: %v\n%s", err, out)
	}
	if d.Name != "web" || d.Status.UpdatedReplicas != 2 || len(d.Pods) != 3 {
		t.Errorf("decoded %+v", d)
	}

	code, out, _ = runStatus(t, agent, "-json")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var l client.SetList
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Sets) != 1 || l.Sets[0].Name != "web" {
		t.Fatalf("-json list: %v %+v\n%s", err, l, out)
	}
}

// The agent's state heads the output, in each election state the agent can
// be in: no high availability, leader with the term's start, follower, and a
// follower whose election fails (a degraded agent answers 503; its body is
// still shown).
func TestStatusAgentStateGolden(t *testing.T) {
	since := testNow.Add(-3*time.Hour - 5*time.Minute)
	denied := `leader election: Consul denied the request; the token lacks session:write (ACL rule session_prefix "" { policy = "write" }): creating session: Unexpected response code: 403`
	for _, tc := range []struct {
		name   string
		health client.Health
	}{
		{"leader_ha", client.Health{Status: "ok", Leader: true, HighAvailability: true, LeaderSince: &since,
			Checks: map[string]string{"nomad": "ok", "store": "ok", "leader_election": "ok"}}},
		{"follower", client.Health{Status: "ok", HighAvailability: true,
			Checks: map[string]string{"nomad": "standby: not the leader, not watching", "store": "ok", "leader_election": "ok"}}},
		{"denied", client.Health{Status: "degraded", HighAvailability: true,
			Checks: map[string]string{"nomad": "standby: not the leader, not watching", "store": "ok", "leader_election": denied}}},
		{"store_down", client.Health{Status: "degraded", HighAvailability: true, Leader: true, LeaderSince: &since,
			Checks: map[string]string{"nomad": "ok", "store": "listing sets from consul: connection refused", "leader_election": "ok"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := newFakeAgent(t)
			agent.health = tc.health
			if tc.health.Leader {
				agent.add(webDetail())
			}
			code, out, errOut := runStatus(t, agent)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden(t, "status_agent_"+tc.name, out)
		})
	}
}

// A follower shows no sets; asking it for one says why instead of
// suggesting the set does not exist.
func TestStatusSetOnFollower(t *testing.T) {
	agent := newFakeAgent(t)
	agent.health = client.Health{Status: "ok", HighAvailability: true, Checks: map[string]string{"leader_election": "ok"}}
	code, out, errOut := runStatus(t, agent, "web")
	if code != ExitNotFound {
		t.Fatalf("exit %d, want %d", code, ExitNotFound)
	}
	if out != "" || !strings.Contains(errOut, "it is a follower") || !strings.Contains(errOut, client.AddressEnv) {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

// -json carries the agent's state under "agent", beside the set's fields
// (which stay where they were, so `.status.ready_replicas` still works).
func TestStatusJSONAgentState(t *testing.T) {
	since := testNow.Add(-time.Minute)
	agent := newFakeAgent(t)
	agent.health = client.Health{Status: "ok", Leader: true, HighAvailability: true, LeaderSince: &since, Checks: map[string]string{"leader_election": "ok"}}
	agent.add(webDetail())
	for _, args := range [][]string{{"-json", "web"}, {"-json"}} {
		code, out, _ := runStatus(t, agent, args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d", args, code)
		}
		var got struct {
			Agent  *client.Health `json:"agent"`
			Status *client.Status `json:"status"`
			Sets   []any          `json:"sets"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if got.Agent == nil || !got.Agent.Leader || !got.Agent.HighAvailability || got.Agent.LeaderSince == nil || !got.Agent.LeaderSince.Equal(since) {
			t.Fatalf("%v: agent = %+v\n%s", args, got.Agent, out)
		}
		if (got.Status == nil) == (got.Sets == nil) {
			t.Fatalf("%v: want the set's status or the list beside the agent:\n%s", args, out)
		}
	}
}

func TestStatusNotFound(t *testing.T) {
	agent := newFakeAgent(t)
	code, out, errOut := runStatus(t, agent, "nope")
	if code != ExitNotFound {
		t.Fatalf("exit %d, want %d", code, ExitNotFound)
	}
	if out != "" || !strings.Contains(errOut, `statefulset "nope" not found in namespace "default"`) {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	checkNoCrash(t, errOut)
}

func TestStatusUsesEnvAddress(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	t.Setenv(client.AddressEnv, agent.srv.URL)
	m, ui := newTestMeta()
	if code := (&StatusCommand{Meta: m}).Run([]string{"web"}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if !strings.Contains(ui.OutputWriter.String(), "web-7a9b1e") {
		t.Errorf("output %q", ui.OutputWriter.String())
	}
}

func TestStatusNamespaceFromEnv(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(dbDetail())
	t.Setenv("NOMAD_NAMESPACE", "prod")
	code, out, errOut := runStatus(t, agent, "db")
	if code != ExitOK || !strings.Contains(out, "prod") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// TestVolumesCellShowsClaims: status names each volume with its class, its
// size and what its claim still asks, and marks the leader.
func TestVolumesCellShowsClaims(t *testing.T) {
	p := client.Pod{Volumes: []string{"data-pg-0", "wal-pg-0"}, Claims: []client.ClaimVolume{
		{Claim: "data", Name: "data-pg-0", Class: "fast", Capacity: 10 << 30, Requested: 20 << 30, ResizePending: true},
		{Claim: "wal", Name: "wal-pg-0", Capacity: 512 << 20, ClassDiffers: true},
	}}
	want := "data-pg-0 (fast, 10.0 GiB, growing to 20.0 GiB),wal-pg-0 (512.0 MiB, its claim names another class)"
	if got := volumesCell(p); got != want {
		t.Fatalf("volumesCell = %q, want %q", got, want)
	}
	if got := volumesCell(client.Pod{Volumes: []string{"a", "b"}}); got != "a,b" {
		t.Fatalf("without claims: %q", got)
	}
}

// The agent line names lost event streams only once there was one: how
// many, by reason, and the last one's message.
func TestFormatAgentShowsLostStreams(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	h := &client.Health{Status: "ok", Leader: true, Checks: map[string]string{"nomad": "ok"},
		EventStream: &client.EventStreamHealth{Resets: map[string]uint64{}}}
	if got := formatAgent(h, now); strings.Contains(got, "event stream") {
		t.Fatalf("no loss yet, but the agent line says:\n%s", got)
	}
	h.EventStream = &client.EventStreamHealth{
		Resets: map[string]uint64{"buffer_overflow": 2, "disconnect": 1},
		LastReset: &client.EventStreamReset{Reason: "buffer_overflow", At: now.Add(-90 * time.Second),
			Message: "Nomad dropped events the daemon had not read yet (raise event_buffer_size on the servers); re-listing"},
	}
	want := "Agent event stream: lost 3 time(s) this term (buffer_overflow 2, disconnect 1); the last 1m30s ago: " +
		"Nomad dropped events the daemon had not read yet (raise event_buffer_size on the servers); re-listing"
	if got := formatAgent(h, now); !strings.Contains(got, want) {
		t.Fatalf("the agent line is\n%s\nwant it to hold\n%s", got, want)
	}
}

// Children an earlier release rendered differently are named: an upgrade
// restarts none of them (DESIGN §2), so the operator must learn which still
// run an older rendering, and when they take the new one.
func TestStatusSetNamesOlderRenderings(t *testing.T) {
	agent := newFakeAgent(t)
	d := webDetail()
	d.Pods[0].OlderRendering = true
	agent.add(d)
	code, out, errOut := runStatus(t, agent, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := "Older Rendering   = " + d.Pods[0].Name + " registered by an earlier release; rendered anew at the next rollout or `rollout restart`"
	if !strings.Contains(out, want) {
		t.Fatalf("status does not name the older rendering (%q):\n%s", want, out)
	}
	agent2 := newFakeAgent(t)
	agent2.add(webDetail())
	if _, out, _ := runStatus(t, agent2, "web"); strings.Contains(out, "Older Rendering") {
		t.Fatalf("status names older renderings when there are none:\n%s", out)
	}
}

// A set with maintenance windows shows them, and while a step waits for
// one, the condition naming the next window's start.
func TestStatusSetShowsMaintenanceWindow(t *testing.T) {
	agent := newFakeAgent(t)
	d := webDetail()
	d.Spec.MaintenanceWindow = "Sat 02:00-05:00 UTC"
	msg := "no rollout, repair, volume expansion or scale-down starts outside Sat 02:00-05:00 UTC; the next window opens at 2026-01-03T02:00:00Z (Sat 02:00 UTC)"
	d.Status.Conditions = append(d.Status.Conditions, client.Condition{Type: "WaitingForMaintenanceWindow", Status: true,
		Reason: "OutsideMaintenanceWindow", Message: msg, LastTransitionTime: d.Status.Conditions[0].LastTransitionTime})
	agent.add(d)
	code, out, errOut := runStatus(t, agent, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"Maintenance Window", "Sat 02:00-05:00 UTC", "WaitingForMaintenanceWindow", "OutsideMaintenanceWindow", "2026-01-03T02:00:00Z (Sat 02:00 UTC)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %q:\n%s", want, out)
		}
	}
}

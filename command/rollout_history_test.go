package command

import (
	"encoding/json"
	"strings"
	"testing"
)

func runHistory(t *testing.T, agent *fakeAgent, args ...string) (int, string, string) {
	t.Helper()
	m, ui := newTestMeta()
	code := (&RolloutHistoryCommand{Meta: m}).Run(append([]string{"-address", agent.srv.URL}, args...))
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

func TestRolloutHistoryGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, errOut := runHistory(t, agent, "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "rollout_history", out)
}

func TestRolloutHistoryRevisionGolden(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, errOut := runHistory(t, agent, "-revision", "1", "web")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "rollout_history_revision", out)
	if got := agent.requests[len(agent.requests)-1]; got != "/v1/statefulset/default/web?revision=1" {
		t.Errorf("request %q, want the revision asked for", got)
	}
}

func TestRolloutHistoryRevisionJSON(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, _ := runHistory(t, agent, "-json", "-revision", "1", "web")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var got struct {
		Number   int64 `json:"number"`
		Template struct {
			Group struct {
				Meta map[string]string `json:"Meta"`
			} `json:"Group"`
		} `json:"template"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Number != 1 || got.Template.Group.Meta["v"] != "1" {
		t.Errorf("decoded %+v: the template must be embedded as JSON", got)
	}
}

func TestRolloutHistoryJSONList(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, out, _ := runHistory(t, agent, "-json", "web")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var got historyOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Revisions) != 2 || got.Revisions[0].Number != 1 || got.UpdateRevision != "web-7a9b1e" {
		t.Errorf("decoded %+v", got)
	}
}

func TestRolloutHistoryUnknownRevision(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(webDetail())
	code, _, errOut := runHistory(t, agent, "-revision", "9", "web")
	if code != ExitNotFound {
		t.Fatalf("exit %d, want %d", code, ExitNotFound)
	}
	if !strings.Contains(errOut, `statefulset "web" has no revision 9 (it has: 1, 2)`) {
		t.Errorf("stderr %q", errOut)
	}
}

func TestRolloutHistoryEmpty(t *testing.T) {
	agent := newFakeAgent(t)
	agent.add(brokenDetail())
	code, out, _ := runHistory(t, agent, "cache")
	if code != ExitOK || strings.TrimSpace(out) != `Statefulset "cache" has no revisions yet` {
		t.Errorf("exit %d, out %q", code, out)
	}
}

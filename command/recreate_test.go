package command

import (
	"strings"
	"testing"
)

// validate and status show the Recreate strategy as what it does: every
// pod stopped at once, and what max_unavailable still bounds; validate
// refuses a partition with it, naming both keys.
func TestRecreateShown(t *testing.T) {
	const want = "Recreate (a new revision stops every pod at once; max unavailable 2 bounds drains and repairs)"

	j := parentJob("web")
	j.Meta["statefulset_update_strategy"] = "Recreate"
	j.Meta["statefulset_max_unavailable"] = "2"
	code, out, errOut := runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
	if code != ExitOK || !strings.Contains(out, want) {
		t.Fatalf("validate: exit %d, want %q in:\n%s%s", code, want, out, errOut)
	}

	j.Meta["statefulset_partition"] = "1"
	code, out, errOut = runValidate(t, closedAddress(t), writeJSONJob(t, j, true))
	refusal := `statefulset_partition: "1" is not allowed with statefulset_update_strategy = "Recreate"`
	if code == ExitOK || !strings.Contains(out+errOut, refusal) {
		t.Fatalf("validate of a partition with Recreate: exit %d, want %q in:\n%s%s", code, refusal, out, errOut)
	}

	agent := newFakeAgent(t)
	d := webDetail()
	d.Spec.UpdateStrategy, d.Spec.MaxUnavailable = "Recreate", "2"
	agent.add(d)
	code, out, errOut = runStatus(t, agent, "web")
	if code != ExitOK || !strings.Contains(out, want) {
		t.Fatalf("status: exit %d, want %q in:\n%s%s", code, want, out, errOut)
	}
}

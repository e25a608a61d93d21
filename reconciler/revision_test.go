package reconciler

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestHashRevision(t *testing.T) {
	data := []byte(`{"group":"web"}`)
	// The definition, computed independently with hash/fnv.
	h := fnv.New32a()
	h.Write(data)
	h.Write([]byte("7"))
	dec := strconv.FormatUint(uint64(h.Sum32()), 10)
	var want strings.Builder
	for _, c := range []byte(dec) {
		want.WriteByte(safeAlphabet[int(c)%len(safeAlphabet)])
	}
	if got := HashRevision(data, 7); got != want.String() {
		t.Fatalf("HashRevision = %q, want %q", got, want.String())
	}
	seen := map[string]bool{}
	for cc := 0; cc < 100; cc++ {
		got := HashRevision(data, cc)
		if seen[got] {
			t.Fatalf("collision count %d repeats hash %s", cc, got)
		}
		seen[got] = true
		if strings.Trim(got, safeAlphabet) != "" || got == "" {
			t.Fatalf("hash %q leaves the safe alphabet", got)
		}
	}
	if HashRevision(data, 0) == HashRevision([]byte(`{"group":"api"}`), 0) {
		t.Fatal("different data, same hash")
	}
	if got := RevisionName("web", "abc"); got != "web-abc" {
		t.Fatalf("RevisionName = %q", got)
	}
	if got := VolumeName("data", "web", 3); got != "data-web-3" {
		t.Fatalf("VolumeName = %q", got)
	}
}

// TestRevisionCollision: a stored revision that has the new template's name
// but other data is a hash collision; the collision count goes up until the
// name is free, and is recorded in the status.
func TestRevisionCollision(t *testing.T) {
	in := Input{Spec: Spec{Name: "web", Replicas: 1}, TemplateData: []byte("v2")}
	for cc := 0; cc < 2; cc++ {
		in.Revisions = append(in.Revisions, Revision{
			Name: RevisionName("web", HashRevision([]byte("v2"), cc)), Number: int64(cc + 1), Data: []byte("other" + strconv.Itoa(cc)),
		})
	}
	out := Reconcile(in)
	a := out.Actions[1] // after RecordOrdinals: ordinal 0 joins
	if a.Type != ActionCreateRevision || a.Revision.Name != RevisionName("web", HashRevision([]byte("v2"), 2)) {
		t.Fatalf("first action %+v", a)
	}
	if a.Revision.Number != 3 || out.Status.CollisionCount != 2 {
		t.Fatalf("number %d, collision count %d", a.Revision.Number, out.Status.CollisionCount)
	}
	// The stored revision with equal data is found again without hashing.
	in.Revisions = append(in.Revisions, a.Revision)
	in.Previous = out.Status
	if out := Reconcile(in); countActions(out, ActionCreateRevision) != 0 || out.Status.UpdateRevision != a.Revision.Name {
		t.Fatalf("second reconcile: %+v", out)
	}
}

// TestRollback: a template equal to an older revision reuses it with a new
// number; pods already at it are not touched.
func TestRollback(t *testing.T) {
	forPolicies(t, func(t *testing.T, spec Spec) {
		spec.Replicas = 3
		spec.Partition = 2 // pods 0,1 stay at v1 during the v2 rollout
		w := newWorld(spec, "v1")
		converge(t, w)
		w.template = []byte("v2")
		converge(t, w)
		w.template = []byte("v1")
		out := mustStep(t, w)
		if out.Actions[0].Type != ActionUpdateRevision || out.Actions[0].Revision.Name != revName("web", "v1") ||
			out.Actions[0].Revision.Number != 3 {
			t.Fatalf("rollback: first action %+v", out.Actions[0])
		}
		if countActions(out, ActionCreateRevision) != 0 {
			t.Fatal("rollback created a revision")
		}
		w.spec.Partition = 0
		converge(t, w)
		if got := podRevisions(w, 0, 3); slices.ContainsFunc(got, func(r string) bool { return r != revName("web", "v1") }) {
			t.Fatalf("after rollback: %v", got)
		}
		if len(w.revisions) != 2 {
			t.Fatalf("%d revisions stored, want 2", len(w.revisions))
		}
	})
}

// TestRevisionHistoryLimit: the history is trimmed to the limit, oldest
// first, but a revision a live pod uses is never trimmed.
func TestRevisionHistoryLimit(t *testing.T) {
	w := newWorld(Spec{Replicas: 3, Partition: 2, RevisionHistoryLimit: 1}, "v0")
	converge(t, w) // pods 0,1,2 at v0; v0 is current
	for i := 1; i <= 5; i++ {
		w.template = []byte("v" + strconv.Itoa(i))
		converge(t, w) // pod 2 moves to vi; 0 and 1 stay at v0
	}
	mustStep(t, w)
	var names []string
	for _, r := range w.revisions {
		names = append(names, r.Name)
	}
	// Live: v0 (current, pods 0 and 1), v5 (update, pod 2). One more may stay: v4.
	want := []string{revName("web", "v0"), revName("web", "v4"), revName("web", "v5")}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("revisions %v, want %v", names, want)
	}
	// Limit 0 keeps only live revisions.
	w.spec.RevisionHistoryLimit = 0
	mustStep(t, w)
	if len(w.revisions) != 2 {
		t.Fatalf("%d revisions with limit 0, want the 2 live ones", len(w.revisions))
	}
}

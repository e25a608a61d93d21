package jobs

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// FuzzDigestDoc: digestDoc, which walks the document once, gives the
// digest of each field encoded on its own (digestDocFieldByField), for a
// child whose task names, env, meta and constraints hold any text, with
// and without a second task.
func FuzzDigestDoc(f *testing.F) {
	f.Add("app", "KEY", "value", false)
	f.Add("", `q"}]`, `say "hi", \ ]}{[:`, true)
	f.Add("Tasks[x]", "<a>", "&amp;\u2028", true)
	spec, rev := mustSpecRev(f, submitted(f, "web"))
	f.Fuzz(func(t *testing.T, task, key, value string, second bool) {
		job, err := RenderChild(spec, rev, 0)
		if err != nil {
			t.Fatal(err)
		}
		g := job.TaskGroups[0]
		g.Tasks[0].Name = task
		g.Tasks[0].Env[key] = value
		job.Meta[key] = value
		g.Constraints = append(g.Constraints, &api.Constraint{LTarget: key, RTarget: value, Operand: "!="})
		if second {
			g.Tasks = append(g.Tasks, &api.Task{Name: value, Driver: "docker", Config: map[string]any{key: value}})
		}
		for _, spread := range []func(string, string) bool{
			func(string, string) bool { return false },
			func(string, string) bool { return true },
		} {
			docA, err := newRevisionDoc(job)
			if err != nil {
				t.Fatal(err)
			}
			docB, err := newRevisionDoc(job)
			if err != nil {
				t.Fatal(err)
			}
			got, err := digestDoc(docA, spread)
			if err != nil {
				t.Fatal(err)
			}
			want, err := digestDocFieldByField(docB, spread)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) || got.Encode() != want.Encode() {
				t.Fatalf("digest differs from each field encoded alone in %v", got.Changed(want))
			}
		}
	})
}

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
		sameAsFieldByField(t, job, "fuzzed job")
	})
}

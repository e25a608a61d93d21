package jobs

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs/specdigest"
)

// TestDigestOfRegisteredChildMatches: a child rendered here and the same
// child registered on a real Nomad agent and read back
// (testdata/<name>.child.registered.json) have equal digests: what Nomad
// fills in itself is not an edit.
func TestDigestOfRegisteredChildMatches(t *testing.T) {
	for _, name := range examples {
		t.Run(name, func(t *testing.T) {
			spec, rev := mustSpecRev(t, submitted(t, name))
			reg := loadJob(t, filepath.Join("testdata", name+".child.registered.json"))
			_, ord, _, _ := ParseChild(reg)
			sent, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatal(err)
			}
			want, err := DigestChild(sent)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DigestChild(reg)
			if err != nil {
				t.Fatal(err)
			}
			if ch := want.Changed(got); len(ch) != 0 {
				t.Fatalf("Nomad's own defaults read as edits of %v", ch)
			}
			// RenderedDigest digests its own rendering without a copy.
			spread, recorded := sent.Meta[MetaSpreadAvoid]
			rendered, err := RenderedDigest(spec, rev, ord, spread, recorded)
			if err != nil {
				t.Fatal(err)
			}
			if !rendered.Equal(want) {
				t.Fatalf("RenderedDigest differs from DigestChild of the rendering in %v", rendered.Changed(want))
			}
		})
	}
}

// TestDigestNamesHandEdits: any hand edit of a child is found, and named
// by field, while what the daemon or Nomad sets on its own is not an edit:
// the count (put back in place), the spread constraints and affinities the
// agent adds at creation, and Nomad's defaults.
func TestDigestNamesHandEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(j *api.Job)
		want []string
	}{
		{"env var added", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1" }, []string{"Group.Tasks[app].Env"}},
		{"task config", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "sleep 1"} }, []string{"Group.Tasks[app].Config"}},
		{"resources", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources = &api.Resources{MemoryMB: ptr(999)} }, []string{"Group.Tasks[app].Resources"}},
		{"job meta", func(j *api.Job) { j.Meta["owner"] = "me" }, []string{"Meta"}},
		{"datacenters", func(j *api.Job) { j.Datacenters = []string{"dc9"} }, []string{"Datacenters"}},
		{"group constraint", func(j *api.Job) {
			j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="})
		}, []string{"Group.Constraints"}},
		{"task and group at once", func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1"
			j.TaskGroups[0].RestartPolicy.Attempts = ptr(9)
		}, []string{"Group.RestartPolicy", "Group.Tasks[app].Env"}},
		{"count (not an edit: put back in place)", func(j *api.Job) { j.TaskGroups[0].Count = ptr(3) }, nil},
		{"spread affinity (the agent's own)", func(j *api.Job) { SpreadChild(j, "${node.unique.id}", false, []string{"n1", "n2"}) }, nil},
		{"spread constraint (the agent's own)", func(j *api.Job) { SpreadChild(j, "${meta.rack}", true, []string{"r1"}) }, nil},
		// Spreading's rules are recorded, so a "!=" rule of the user's
		// is seen like any other: it used to be left out with them.
		{"a user's != affinity added by hand", func(j *api.Job) {
			j.TaskGroups[0].Affinities = append(j.TaskGroups[0].Affinities, &api.Affinity{LTarget: "${node.class}", RTarget: "spot", Operand: "!=", Weight: pointer(int8(50))})
		}, []string{"Group.Affinities"}},
		{"a user's != constraint added by hand beside spreading's", func(j *api.Job) {
			SpreadChild(j, "${node.unique.id}", true, []string{"n1"})
			j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${node.unique.id}", RTarget: "n9", Operand: "!="})
		}, []string{"Group.Constraints"}},
		// A child registered before the record existed: every "!=" rule
		// is left out, as then, so that it is not taken for edited.
		{"spread rules of a child without a record", func(j *api.Job) {
			delete(j.Meta, MetaSpreadAvoid)
			j.TaskGroups[0].Affinities = append(j.TaskGroups[0].Affinities, &api.Affinity{LTarget: "${node.unique.id}", RTarget: "n1", Operand: "!=", Weight: pointer(int8(100))})
		}, nil},
		{"nothing", func(*api.Job) {}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, rev := mustSpecRev(t, submitted(t, "web"))
			want, err := RenderChild(spec, rev, 1)
			if err != nil {
				t.Fatal(err)
			}
			edited, err := RenderChild(spec, rev, 1)
			if err != nil {
				t.Fatal(err)
			}
			if edited.TaskGroups[0].Tasks[0].Env == nil {
				edited.TaskGroups[0].Tasks[0].Env = map[string]string{}
			}
			tc.edit(edited)
			dw, err := DigestChild(want)
			if err != nil {
				t.Fatal(err)
			}
			de, err := DigestChild(edited)
			if err != nil {
				t.Fatal(err)
			}
			if got := dw.Changed(de); !slices.Equal(got, tc.want) {
				t.Fatalf("changed fields %v, want %v", got, tc.want)
			}
		})
	}
	var unknown SpecDigest
	if got := unknown.Changed(specdigest.New([]specdigest.Field{{Path: "Meta", Sum: 1}})); got != nil {
		t.Fatalf("an unknown digest reads as edits of %v", got)
	}
}

// TestDecodeChildRecordKeepsWhatPurgeAndDriftNeed: the record a watcher
// keeps of a child event has the child's kill grace (a purge waits it
// out; the compact job alone lost kill_timeout and shutdown_delay, so a
// purged child with kill_timeout = 30s was re-created after 5s), and
// DigestChildJSON of the event gives the digest of its whole spec.
func TestDecodeChildRecordKeepsWhatPurgeAndDriftNeed(t *testing.T) {
	spec, rev := mustSpecRev(t, submitted(t, "web"))
	child, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	child.TaskGroups[0].Tasks[0].KillTimeout = pointer(30 * time.Second)
	child.TaskGroups[0].ShutdownDelay = pointer(2 * time.Second)
	raw, err := json.Marshal(child)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := DecodeChildRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DigestChildJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	rec = rec.WithDigest(d)
	if got := rec.KillGrace(); got != 32*time.Second {
		t.Fatalf("kill grace %v, want 32s", got)
	}
	want, err := DigestChild(child)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Digest().Known() || len(want.Changed(rec.Digest())) != 0 {
		t.Fatalf("digest %v, want that of the whole child (changed %v)", rec.Digest(), want.Changed(rec.Digest()))
	}
}

func pointer[T any](v T) *T { return &v }

// TestDigestEncodesOnceAsEachFieldAlone: digestDoc encodes the document
// once and splits it; its checksums are those of each field encoded on
// its own (digestDocFieldByField, the plain way it was first written), so
// that a field's checksum is its own JSON and nothing of its neighbours'.
// Covered: every example, rendered for several ordinals and as Nomad read
// it back, a task without a name, a nil task, and empty collections.
func TestDigestEncodesOnceAsEachFieldAlone(t *testing.T) {
	var cases []*api.Job
	for _, name := range examples {
		spec, rev := mustSpecRev(t, submitted(t, name))
		for ord := range 3 {
			c, err := RenderChild(spec, rev, ord)
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, c)
		}
		cases = append(cases, loadJob(t, filepath.Join("testdata", name+".child.registered.json")))
	}
	spec, rev := mustSpecRev(t, submitted(t, "web"))
	odd, err := RenderChild(spec, rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := odd.TaskGroups[0]
	g.Tasks = append(g.Tasks, &api.Task{Driver: "docker", Config: map[string]any{"image": "<redis>&"}}, nil)
	g.Meta, g.Constraints = map[string]string{}, []*api.Constraint{}
	odd.Meta["html"] = "<a href='x'>&</a>"
	odd.Meta[`q"}]`] = `say "hi", \\ ]}{[:`
	cases = append(cases, odd)

	for i, job := range cases {
		sameAsFieldByField(t, job, fmt.Sprintf("case %d (%s)", i, *job.ID))
	}
}

// sameAsFieldByField fails unless digestDoc of job, with and without every
// "!=" rule counted as spreading's, equals digestDocFieldByField's in every
// checksum and in its encoding.
func sameAsFieldByField(t *testing.T, job *api.Job, what string) {
	t.Helper()
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
		if !got.Equal(want) || len(got.Changed(want)) != 0 || got.Encode() != want.Encode() {
			t.Fatalf("%s: digest differs from each field encoded alone in %v", what, got.Changed(want))
		}
	}
}

// digestDocFieldByField is digestDoc as first written: each level
// encoded on its own, each field encoded again. The reference of
// TestDigestEncodesOnceAsEachFieldAlone.
func digestDocFieldByField(doc *revisionDoc, spread func(attr, value string) bool) (SpecDigest, error) {
	g := doc.Group
	dropSpreadRules(g, spread)
	var fields []specdigest.Field
	add := func(path string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if string(b) == "null" || string(b) == "{}" || string(b) == "[]" {
			return nil
		}
		h := fnv.New64a()
		h.Write(b)
		fields = append(fields, specdigest.Field{Path: path, Sum: h.Sum64()})
		return nil
	}
	remarshal := func(in, out any) error {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, out)
	}
	var top, group map[string]json.RawMessage
	if err := remarshal(doc, &top); err != nil {
		return SpecDigest{}, err
	}
	delete(top, "Group")
	if err := remarshal(g, &group); err != nil {
		return SpecDigest{}, err
	}
	delete(group, "Tasks")
	for k, v := range top {
		if err := add(k, v); err != nil {
			return SpecDigest{}, err
		}
	}
	for k, v := range group {
		if err := add("Group."+k, v); err != nil {
			return SpecDigest{}, err
		}
	}
	for i, task := range g.Tasks {
		if task == nil {
			continue
		}
		var m map[string]json.RawMessage
		if err := remarshal(task, &m); err != nil {
			return SpecDigest{}, err
		}
		delete(m, "Name")
		name := task.Name
		if name == "" {
			name = fmt.Sprint(i)
		}
		for k, v := range m {
			if err := add("Group.Tasks["+name+"]."+k, v); err != nil {
				return SpecDigest{}, err
			}
		}
	}
	return specdigest.New(fields), nil
}

// TestNullTaskIsNothing: a job whose group lists a null task (no Nomad
// server accepts one, so only a hand-made payload has it) is read as if
// the null were not there, by the parent's parser, its revision and a
// child's digest from JSON, instead of panicking in the api package's
// Canonicalize.
func TestNullTaskIsNothing(t *testing.T) {
	parent := submitted(t, "web")
	want, err := RevisionData(parent)
	if err != nil {
		t.Fatal(err)
	}
	parent.TaskGroups[0].Tasks = append(parent.TaskGroups[0].Tasks, nil)
	if _, err := Parse(parent); err != nil {
		t.Fatalf("parse: %v", err)
	}
	got, err := RevisionData(parent)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("a null task changed the revision:\n%s\nwant\n%s", got, want)
	}
	d, err := DigestChildJSON([]byte(`{"ID":"web-0","TaskGroups":[{"Name":"g","Tasks":[null,{"Name":"app","Driver":"docker"}]}]}`))
	if err != nil || !d.Known() {
		t.Fatalf("digest of a child with a null task: %v, known %v", err, d.Known())
	}
}

// FuzzSplitJSON: splitJSON finds the members of what json.Marshal
// writes, whatever the strings hold, as json.Unmarshal into raw messages
// does.
func FuzzSplitJSON(f *testing.F) {
	f.Add("Meta", `say "hi", \ ]}{[:`)
	f.Add("", "")
	f.Add(`q"}]`, "<a href='x'>&</a>\u2028")
	f.Fuzz(func(t *testing.T, key, value string) {
		doc := map[string]any{
			key:   value,
			"arr": []any{value, map[string]string{key: value}, nil, 1.5, true},
			"obj": map[string]any{"x": []string{value}, "e": map[string]string{}},
		}
		b, err := json.Marshal(doc) // strings and maps of strings: it never fails
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string]json.RawMessage{}
		if err := splitJSON(b, func(k string, v []byte) { got[k] = v }); err != nil {
			t.Fatalf("splitJSON(%s): %v", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("splitJSON(%s) found %d members, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("splitJSON(%s)[%q] = %s, want %s", b, k, got[k], v)
			}
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(want["arr"], &elems); err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := splitJSON(want["arr"], func(_ string, v []byte) {
			if n < len(elems) && string(v) != string(elems[n]) {
				t.Fatalf("element %d = %s, want %s", n, v, elems[n])
			}
			n++
		}); err != nil || n != len(elems) {
			t.Fatalf("splitJSON(%s): %d elements, %v; want %d", want["arr"], n, err, len(elems))
		}
	})
}

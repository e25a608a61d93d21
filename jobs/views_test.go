package jobs

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestChildRecordAnswersAsItsJob: what the agent reads of a child through
// backend.ChildJob is what the functions on the whole job say, though
// ScaledCount and SpreadRecord read the record without rebuilding it.
func TestChildRecordAnswersAsItsJob(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{"statefulset_replicas": "3"}))
	rendered, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(j *api.Job)
	}{
		{"as rendered", func(*api.Job) {}},
		{"count nil", func(j *api.Job) { j.TaskGroups[0].Count = nil }},
		{"count 0", func(j *api.Job) { j.TaskGroups[0].Count = ptr(0) }},
		{"scaled to 3", func(j *api.Job) { j.TaskGroups[0].Count = ptr(3) }},
		{"spread recorded", func(j *api.Job) { SpreadChild(j, "${node.unique.id}", false, []string{"n1"}) }},
		{"no spread record", func(j *api.Job) { delete(j.Meta, MetaSpreadAvoid) }},
		{"an edited env", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Env = map[string]string{"X": "1"} }},
		{"no groups", func(j *api.Job) { j.TaskGroups = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := RenderChild(spec, rev, 1)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(job)
			rec := NewChildRecord(job)
			if got, want := rec.ScaledCount(), ScaledChild(job); got != want {
				t.Errorf("ScaledCount %d, ScaledChild %d", got, want)
			}
			record, recorded := rec.SpreadRecord()
			wantRecord, wantRecorded := job.Meta[MetaSpreadAvoid]
			if record != wantRecord || recorded != wantRecorded {
				t.Errorf("SpreadRecord %q %v, meta says %q %v", record, recorded, wantRecord, wantRecorded)
			}
			if got, want := rec.Matches(spec, rev, 1), ChildMatches(spec, rev, 1, job); got != want {
				t.Errorf("Matches %v, ChildMatches %v", got, want)
			}
		})
	}
	if !NewChildRecord(rendered).Matches(spec, rev, 1) {
		t.Fatal("a child as rendered does not match its rendering")
	}
}

package jobs

import (
	"strings"
	"testing"
)

// TestNullEntriesAreRefused: a null inside one of a job's lists or maps is
// JSON no Nomad server accepts or sends, but a hand-made payload or file
// can hold one. The api package's Canonicalize dereferences such entries;
// the digest of a child and the revision data of a parent refuse the job
// with an error that names it, and parsing it never panics.
func TestNullEntriesAreRefused(t *testing.T) {
	for _, payload := range []string{
		`{"ID":"web-0","TaskGroups":[{"Name":"g","Services":[null],"Tasks":[{"Name":"t","Driver":"exec"}]}]}`,
		`{"ID":"web-0","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"exec","Services":[null]}]}]}`,
		`{"ID":"web-0","TaskGroups":[{"Name":"g","Services":[{"Name":"s","Checks":[null]}],"Tasks":[{"Name":"t","Driver":"exec"}]}]}`,
		`{"ID":"web-0","TaskGroups":[{"Name":"g","Volumes":{"a":null},"Tasks":[{"Name":"t","Driver":"exec","Templates":[null],"Artifacts":[null]}]}]}`,
		`{"ID":"web-0","TaskGroups":[{"Name":"g","Networks":[null],"Tasks":[{"Name":"t","Driver":"exec","Resources":{"Networks":[null],"Devices":[null]}}]}]}`,
		`{"ID":"web-0","Constraints":[null],"Affinities":[null],"Spreads":[null],"TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"exec","Constraints":[null],"VolumeMounts":[null]}]}]}`,
	} {
		t.Run(payload, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			if _, err := DigestChildJSON([]byte(payload)); err != nil && !strings.Contains(err.Error(), `"web-0"`) {
				t.Errorf("the digest's error does not name the job: %v", err)
			}
			if _, err := DecodeChildRecord([]byte(payload)); err != nil {
				t.Logf("record: %v", err)
			}
			_, j, err := DecodeChild([]byte(payload))
			if err != nil {
				t.Fatal(err)
			}
			j.Meta = map[string]string{"statefulset": "true", "statefulset_replicas": "1"}
			if _, err := RevisionData(j); err != nil && !strings.Contains(err.Error(), `"web-0"`) {
				t.Errorf("the revision data's error does not name the job: %v", err)
			}
			if _, err := Parse(j); err != nil {
				t.Logf("parse: %v", err)
			}
		})
	}
}

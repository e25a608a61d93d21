package jobs

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestClaimModes(t *testing.T) {
	job := &api.Job{TaskGroups: []*api.TaskGroup{{Volumes: map[string]*api.VolumeRequest{
		"data": {Type: "host", AccessMode: "single-node-single-writer", AttachmentMode: "file-system"},
		"bare": {Type: "host"},
	}}}}
	for _, tc := range []struct{ claim, access, attach string }{
		{"data", "single-node-single-writer", "file-system"},
		{"bare", "single-node-writer", "file-system"},
	} {
		a, m := ClaimModes(job, tc.claim)
		if a != tc.access || m != tc.attach {
			t.Errorf("ClaimModes(%q) = %q, %q; want %q, %q", tc.claim, a, m, tc.access, tc.attach)
		}
	}
}

package jobs

import (
	"encoding/json"
	"testing"
)

// BenchmarkParseRender is the per-pod cost on the controller's hot path:
// parse the parent's annotations and render one child from a revision.
func BenchmarkParseRender(b *testing.B) {
	job := submitted(b, "web")
	data, err := RevisionData(job)
	if err != nil {
		b.Fatal(err)
	}
	rev := testRevision("web", data)
	b.ReportAllocs()
	for b.Loop() {
		spec, err := Parse(job)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := RenderChild(spec, rev, 2); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRevisionData is the cost of computing the canonical template,
// paid once per parent job change (and per resync).
func BenchmarkRevisionData(b *testing.B) {
	job := submitted(b, "web")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RevisionData(job); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDigestChild is what finding hand edits costs per child: the
// digest of a child as Nomad sent it (an event's JSON, once per new spec)
// and of one as rendered (once per revision and ordinal).
func BenchmarkDigestChild(b *testing.B) {
	reg := loadJob(b, "testdata/web.child.registered.json")
	raw, err := json.Marshal(reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DigestChildJSON(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rendered", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DigestChild(reg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeChildRecord is the watcher's cost per child event, for a
// child as this release registers it (with its statefulset_rendered
// record, decoded into the record) and for one registered before the
// record existed.
func BenchmarkDecodeChildRecord(b *testing.B) {
	for name, path := range map[string]string{
		"recorded": "testdata/releases/2026-12-01/web.child-0.json",
		"legacy":   "testdata/web.child.registered.json",
	} {
		raw, err := json.Marshal(loadJob(b, path))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeChildRecord(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

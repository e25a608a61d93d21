package jobs

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestDecodeChildIsRecordAndDigest: DecodeChild's record is
// DecodeChildRecord's, and DigestDecoded of its job is DigestChildJSON,
// for every one of the changes TestCompactChildKeepsDrift tries, of
// children with and without a rendering and spread record; the digest
// changes nothing of the record.
func TestDecodeChildIsRecordAndDigest(t *testing.T) {
	spec, rev := mustSpecRev(t, newJob(map[string]string{KeyVolumeClaims: "data,logs"}))
	rendered, err := RenderChild(spec, rev, 2)
	if err != nil {
		t.Fatal(err)
	}
	spread, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	SpreadChild(spread, "${node.unique.id}", false, []string{"n1", "n2"})
	if _, err := RecordRendering(spread); err != nil {
		t.Fatal(err)
	}
	bases := []*api.Job{rendered, spread}
	for _, name := range examples {
		bases = append(bases, loadJob(t, filepath.Join("testdata", name+".child.registered.json")))
	}
	eachMutatedChild(t, bases, func(i int, what string, data []byte) {
		want, err := DecodeChildRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		got, job, err := DecodeChild(data)
		if err != nil {
			t.Fatal(err)
		}
		sameRecord(t, i, what, got, want)
		// A null entry (a payload no Nomad server sends) is refused by
		// both with an error, never a panic (TestNullEntriesAreRefused).
		wantDigest, wantPanic, wantErr := digestOrPanic(func() (SpecDigest, error) { return DigestChildJSON(data) })
		gotDigest, gotPanic, gotErr := digestOrPanic(func() (SpecDigest, error) { return DigestDecoded(job) })
		if gotPanic || wantPanic || (gotErr == nil) != (wantErr == nil) || gotDigest.Known() != wantDigest.Known() ||
			(gotDigest.Known() && !gotDigest.Equal(wantDigest)) {
			t.Fatalf("base %d, %s: digest %v (%v, panic %v), DigestChildJSON %v (%v, panic %v)", i, what, gotDigest, gotErr, gotPanic, wantDigest, wantErr, wantPanic)
		}
		sameRecord(t, i, what+", after the digest", got, want)
	})
	if _, _, err := DecodeChild([]byte("{")); err == nil {
		t.Fatal("truncated JSON decoded")
	}
}

// sameRecord fails unless got answers every question as want does.
func sameRecord(t *testing.T, base int, what string, got, want *ChildRecord) {
	t.Helper()
	if g, w := got.Job(), want.Job(); !reflect.DeepEqual(g, w) {
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		t.Fatalf("base %d, %s: record\n%s\nwant\n%s", base, what, gj, wj)
	}
	gs, gok := got.SpreadRecord()
	ws, wok := want.SpreadRecord()
	if got.KillGrace() != want.KillGrace() || got.StopOnClientAfter() != want.StopOnClientAfter() ||
		got.ScaledCount() != want.ScaledCount() || gs != ws || gok != wok ||
		got.Rendered().Known() != want.Rendered().Known() ||
		(want.Rendered().Known() && !got.Rendered().Equal(want.Rendered())) {
		t.Fatalf("base %d, %s: record answers differ", base, what)
	}
}

// digestOrPanic calls digest, and says whether it panicked.
func digestOrPanic(digest func() (SpecDigest, error)) (d SpecDigest, panicked bool, err error) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	d, err = digest()
	return d, false, err
}

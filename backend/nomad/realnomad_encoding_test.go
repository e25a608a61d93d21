//go:build realagents

package nomad_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestRealNomadAnswersWritesAndTheStreamUncompressed checks, through a
// recording proxy in front of a real Nomad, that Nomad answers the
// daemon's writes and its event stream without gzip (the api package asks
// for gzip on every call; the daemon's Accept-Encoding comes first, and
// Nomad reads only the first), while a list, which the daemon leaves alone,
// still comes gzipped: the proof that the header, not this Nomad, decides.
func TestRealNomadAnswersWritesAndTheStreamUncompressed(t *testing.T) {
	n := testagent.Nomad(t)
	target, err := url.Parse(n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	encodings := map[string][]string{} // "METHOD path" → each answer's Content-Encoding
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		mu.Lock()
		defer mu.Unlock()
		k := r.Request.Method + " " + r.Request.URL.Path
		encodings[k] = append(encodings[k], r.Header.Get("Content-Encoding"))
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	// The register and the purge are in the stream: reading them proves
	// it decodes as it comes.
	callEncodingVerbs(t, nomad.NewAPI(c), realJob(parentOf("web"), "default"))

	mu.Lock()
	defer mu.Unlock()
	for _, tc := range []struct {
		call, want string
	}{
		{"PUT /v1/jobs", ""},
		{"DELETE /v1/job/web", ""},
		{"GET /v1/event/stream", ""},
		{"GET /v1/jobs", "gzip"},
	} {
		got, ok := encodings[tc.call]
		if !ok {
			t.Errorf("%s: no such call went through the proxy; calls: %v", tc.call, encodings)
			continue
		}
		for _, enc := range got {
			if enc != tc.want {
				t.Errorf("%s: Nomad answered with Content-Encoding %q, want %q", tc.call, enc, tc.want)
			}
		}
	}
}

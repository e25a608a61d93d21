package nomadsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// Handler serves the simulation over the part of Nomad's HTTP API that
// nomad.Client uses: the job, allocation and host volume endpoints and the
// event stream, with Nomad's paths, bodies, index headers and error
// statuses. A real api.Client, and so the daemon's own nomad.Client, can
// then drive the simulation from another process: the scale benchmark
// measures the agent's memory that way, without the simulator's in the same
// heap. Event payloads are written as JSON whatever NomadConfig.JSONPayloads
// says.
func (s *Nomad) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", s.httpListJobs)
	mux.HandleFunc("PUT /v1/jobs", s.httpRegister)
	mux.HandleFunc("POST /v1/jobs", s.httpRegister)
	mux.HandleFunc("GET /v1/job/{id}", s.httpGetJob)
	mux.HandleFunc("DELETE /v1/job/{id}", s.httpDeregister)
	mux.HandleFunc("GET /v1/allocations", s.httpListAllocations)
	mux.HandleFunc("PUT /v1/volume/host/create", s.httpCreateVolume)
	mux.HandleFunc("POST /v1/volume/host/create", s.httpCreateVolume)
	mux.HandleFunc("GET /v1/volumes", s.httpListVolumes)
	mux.HandleFunc("GET /v1/volume/host/{id}", s.httpGetVolume)
	mux.HandleFunc("DELETE /v1/volume/host/{id}", s.httpDeleteVolume)
	mux.HandleFunc("GET /v1/event/stream", s.httpEvents)
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		nodes, err := s.ListNodes(r.Context())
		if err != nil {
			fail(w, err, "")
			return
		}
		s.reply(w, nodes)
	})
	return mux
}

// httpNamespace is the request's namespace, "default" when none is given.
func httpNamespace(r *http.Request) string {
	return namespaceOrDefault(r.URL.Query().Get("namespace"))
}

// reply writes v as JSON with the index headers the api client requires.
func (s *Nomad) reply(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Nomad-Index", strconv.FormatUint(s.Index(), 10))
	h.Set("X-Nomad-LastContact", "0")
	h.Set("X-Nomad-KnownLeader", "true")
	_, _ = w.Write(b)
}

// fail writes a simulated error as Nomad would answer it: the status and
// body of an api.UnexpectedResponseError, 404 for ErrNotFound, else 500.
func fail(w http.ResponseWriter, err error, notFound string) {
	var ue api.UnexpectedResponseError
	switch {
	case errors.As(err, &ue):
		http.Error(w, ue.Body(), ue.StatusCode())
	case errors.Is(err, nomad.ErrNotFound):
		http.Error(w, notFound, http.StatusNotFound)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (s *Nomad) httpListJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("namespace")
	if ns != "*" {
		ns = namespaceOrDefault(ns)
	}
	perPage := 0
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("failed to parse per_page %q", v), http.StatusBadRequest)
			return
		}
		perPage = n
	}
	stubs, next, _, err := s.listJobs(r.Context(), ns, q.Get("next_token"), perPage)
	if err != nil {
		fail(w, err, "")
		return
	}
	if q.Get("meta") != "true" {
		for _, st := range stubs {
			st.Meta = nil
		}
	}
	if next != "" {
		w.Header().Set("X-Nomad-NextToken", next)
	}
	s.reply(w, stubs)
}

func (s *Nomad) httpRegister(w http.ResponseWriter, r *http.Request) {
	var req api.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "decoding the register request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Job != nil && req.Job.Namespace == nil {
		ns := httpNamespace(r)
		req.Job.Namespace = &ns
	}
	resp, err := s.RegisterJob(r.Context(), req.Job, req.EnforceIndex, req.JobModifyIndex)
	if err != nil {
		fail(w, err, "")
		return
	}
	s.reply(w, resp)
}

func (s *Nomad) httpGetJob(w http.ResponseWriter, r *http.Request) {
	job, err := s.GetJob(r.Context(), httpNamespace(r), r.PathValue("id"))
	if err != nil {
		fail(w, err, "job not found")
		return
	}
	s.reply(w, job)
}

func (s *Nomad) httpDeregister(w http.ResponseWriter, r *http.Request) {
	purge := r.URL.Query().Get("purge") == "true"
	if err := s.DeregisterJob(r.Context(), httpNamespace(r), r.PathValue("id"), purge); err != nil {
		fail(w, err, "job not found")
		return
	}
	s.reply(w, &api.JobDeregisterResponse{})
}

func (s *Nomad) httpListAllocations(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "*" {
		ns = namespaceOrDefault(ns)
	}
	allocs, err := s.ListAllocations(r.Context(), ns)
	if err != nil {
		fail(w, err, "")
		return
	}
	s.reply(w, allocs)
}

func (s *Nomad) httpCreateVolume(w http.ResponseWriter, r *http.Request) {
	var req api.HostVolumeCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Volume == nil {
		http.Error(w, "decoding the host volume create request", http.StatusBadRequest)
		return
	}
	if req.Volume.Namespace == "" {
		req.Volume.Namespace = httpNamespace(r)
	}
	vol, err := s.CreateHostVolume(r.Context(), req.Volume)
	if err != nil {
		fail(w, err, "")
		return
	}
	s.reply(w, &api.HostVolumeCreateResponse{Volume: vol})
}

func (s *Nomad) httpListVolumes(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "*" {
		ns = namespaceOrDefault(ns)
	}
	vols, err := s.ListHostVolumes(r.Context(), ns, r.URL.Query().Get("prefix"))
	if err != nil {
		fail(w, err, "")
		return
	}
	s.reply(w, vols)
}

// httpGetVolume answers the re-list's read of a volume whose listing
// changed. Without it a re-list over HTTP failed with 405 and retried
// forever once any volume existed.
func (s *Nomad) httpGetVolume(w http.ResponseWriter, r *http.Request) {
	vol, err := s.GetHostVolume(r.Context(), httpNamespace(r), r.PathValue("id"))
	if err != nil {
		fail(w, err, "volume not found")
		return
	}
	s.reply(w, vol)
}

func (s *Nomad) httpDeleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.DeleteHostVolume(r.Context(), httpNamespace(r), r.PathValue("id")); err != nil {
		fail(w, err, "volume not found")
		return
	}
	s.reply(w, &api.HostVolumeDeleteResponse{})
}

// httpEvents streams events as Nomad does: one JSON object per index, each
// on its own line, flushed as it is written. Only the requested topics are
// sent.
func (s *Nomad) httpEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	index, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	topics := map[api.Topic]bool{}
	for _, t := range q["topic"] {
		name, _, _ := strings.Cut(t, ":")
		topics[api.Topic(name)] = true
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch, err := s.Events(ctx, index)
	if err != nil {
		fail(w, err, "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	for evs := range ch {
		if evs.Err != nil {
			// Nomad writes the error that ends a stream as plain text after
			// the last event ("event dropped from buffer", "subscription
			// closed by server, …"). An unreachable Nomad writes nothing.
			var unreachable *url.Error
			if !errors.As(evs.Err, &unreachable) {
				_, _ = w.Write([]byte(evs.Err.Error()))
			}
			return
		}
		out := &api.Events{Index: evs.Index}
		for _, e := range evs.Events {
			if topics[e.Topic] || topics[api.TopicAll] {
				out.Events = append(out.Events, e)
			}
		}
		if len(out.Events) == 0 {
			continue
		}
		if err := enc.Encode(out); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

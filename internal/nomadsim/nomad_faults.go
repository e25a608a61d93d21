package nomadsim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// simAddress is the address the simulated errors name, the default address
// of a Nomad agent.
const simAddress = "http://127.0.0.1:4646"

// UnreachableError returns the error the real api client gives for verb when
// no Nomad agent listens: a *url.Error around a dial error, so that
// errors.Is(err, syscall.ECONNREFUSED) holds as it does for the real one.
func UnreachableError(verb string) error {
	method, path := "GET", "/v1/"+verb
	if v, ok := nomad.Verbs[verb]; ok {
		method, path = v.Method, v.Path
	}
	return &url.Error{
		Op:  strings.ToUpper(method[:1]) + strings.ToLower(method[1:]),
		URL: simAddress + path,
		Err: &net.OpError{
			Op:  "dial",
			Net: "tcp",
			Err: os.NewSyscallError("connect", syscall.ECONNREFUSED),
		},
	}
}

// ResponseError returns a genuine api.UnexpectedResponseError with the given
// HTTP status code and body, exactly as the real api client builds it for a
// non-2xx answer: "Unexpected response code: 500 (body)". Its fields are
// unexported in the api package, so it is made by sending one request
// through a real api.Client whose transport answers in memory.
func ResponseError(code int, body string) error {
	client, err := api.NewClient(&api.Config{
		Address:    simAddress,
		HttpClient: &http.Client{Transport: cannedResponse{code: code, body: body}},
	})
	if err != nil {
		return fmt.Errorf("memory: building a response error: %w", err)
	}
	_, err = client.Status().Leader()
	if err == nil {
		// Nomad's own capitalized wording, so callers match it the same way.
		//lint:ignore ST1005 mirrors the text of api.UnexpectedResponseError
		return fmt.Errorf("Unexpected response code: %d (%s)", code, body)
	}
	return err
}

// ServerError is a 500 Internal Server Error with a body like the one Nomad
// sends when a server-side RPC fails, for 5xx fault injection.
func ServerError() error {
	return ResponseError(http.StatusInternalServerError, "rpc error: No cluster leader")
}

// cannedResponse is an http.RoundTripper that answers every request with one
// fixed status and body, without a network.
type cannedResponse struct {
	code int
	body string
}

// RoundTrip implements http.RoundTripper.
func (c cannedResponse) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", c.code, http.StatusText(c.code)),
		StatusCode:    c.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(c.body)),
		ContentLength: int64(len(c.body)),
		Request:       r,
	}, nil
}

// fault is one injected failure. afterApply makes a write take effect before
// the error is returned: the response was lost, not the request.
type fault struct {
	err        error
	afterApply bool
}

// verbFault fails the next times calls of one verb.
type verbFault struct {
	times int
	err   error
}

// FailCall makes the n-th call from now fail with err (n = 1 is the next
// call), counting calls of every verb. The call has no effect. Several
// pending failures may be armed at once; arming the same n again replaces
// the earlier one.
func (s *Nomad) FailCall(n int, err error) {
	s.armCall(n, fault{err: err})
}

// LoseResponse makes the n-th call from now take effect and then fail with
// err, as when a write commits but its response is lost to a timeout or a
// dropped connection. For reads it is the same as FailCall.
func (s *Nomad) LoseResponse(n int, err error) {
	s.armCall(n, fault{err: err, afterApply: true})
}

func (s *Nomad) armCall(n int, f fault) {
	if n < 1 {
		panic("memory: call faults count from 1 (the next call)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callFaults[s.totalCalls+uint64(n)] = f
}

// FailVerb makes the next times calls of verb fail with err, without effect.
// Failures armed for one verb queue up behind each other.
func (s *Nomad) FailVerb(verb string, times int, err error) {
	if times < 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verbFaults[verb] = append(s.verbFaults[verb], verbFault{times: times, err: err})
}

// ClearFaults disarms every pending FailCall, LoseResponse and FailVerb.
func (s *Nomad) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.callFaults)
	clear(s.verbFaults)
}

// SetUnreachable turns the unreachable mode on or off. While on, every call
// fails with UnreachableError and open event streams end with that error, as
// when the agent's connection to Nomad is cut. Turning it off restores
// service; streams must be opened again.
func (s *Nomad) SetUnreachable(on bool) {
	s.mu.Lock()
	s.unreachable = on
	s.mu.Unlock()
	if on {
		s.CloseEventStreams(UnreachableError(nomad.VerbEvents))
	}
}

// Calls returns how many calls each verb has received, failed ones included
// (calls whose context was already done are not counted: they never left
// the client).
func (s *Nomad) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Writes returns the number of calls to the verbs that change Nomad
// (nomad.Verbs' Write).
func (s *Nomad) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for verb, c := range s.calls {
		if nomad.Verbs[verb].Write {
			n += c
		}
	}
	return n
}

// ResetCalls sets every call counter back to zero, for measuring one phase
// of a test. Armed FailCall faults keep their position relative to now.
func (s *Nomad) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
}

// enterRead admits one call of a read verb, for which a lost response is
// just a failure.
func (s *Nomad) enterRead(ctx context.Context, verb string) error {
	after, err := s.enter(ctx, verb)
	if err != nil {
		return err
	}
	return after
}

// enter admits one call of verb: it counts the call and decides its fault. err is returned to the caller at once; after, when not
// nil, is returned after a write has been applied.
func (s *Nomad) enter(ctx context.Context, verb string) (after error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[verb]++
	s.totalCalls++
	n := s.totalCalls
	f, armed := s.callFaults[n]
	if armed {
		delete(s.callFaults, n)
	}
	if s.unreachable {
		return nil, UnreachableError(verb)
	}
	if armed {
		if f.afterApply {
			return f.err, nil
		}
		return nil, f.err
	}
	if q := s.verbFaults[verb]; len(q) > 0 {
		err := q[0].err
		q[0].times--
		if q[0].times == 0 {
			q = q[1:]
		}
		if len(q) == 0 {
			delete(s.verbFaults, verb)
		} else {
			s.verbFaults[verb] = q
		}
		return nil, err
	}
	return nil, nil
}

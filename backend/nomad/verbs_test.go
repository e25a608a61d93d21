package nomad_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/nomadsim"
)

// tracedCall is one report to a CallTrace.
type tracedCall struct {
	verb string
	err  error
}

// sameError compares errors by text: some of Nomad's are uncomparable values.
func sameError(a, b error) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error())
}

// recordCalls returns a context whose CallTrace appends to *calls.
func recordCalls(calls *[]tracedCall) context.Context {
	return nomad.WithCallTrace(context.Background(), func(_ context.Context, verb string, err error) {
		*calls = append(*calls, tracedCall{verb, err})
	})
}

// TestVerbsDescribeEveryMethodOfAPI: metrics, health, ACL errors and the
// simulator's faults all read nomad.Verbs, so it must name exactly the
// methods of API, each with its capability and route.
func TestVerbsDescribeEveryMethodOfAPI(t *testing.T) {
	it := reflect.TypeFor[nomad.API]()
	var methods []string
	for i := 0; i < it.NumMethod(); i++ {
		methods = append(methods, it.Method(i).Name)
	}
	var verbs []string
	for verb, v := range nomad.Verbs {
		verbs = append(verbs, verb)
		if v.Capability == "" || v.Method == "" || v.Path == "" {
			t.Errorf("Verbs[%q] = %+v: every verb needs its ACL capability and HTTP route", verb, v)
		}
	}
	slices.Sort(methods)
	slices.Sort(verbs)
	if !slices.Equal(methods, verbs) {
		t.Fatalf("nomad.Verbs names %v; the methods of nomad.API are %v", verbs, methods)
	}
}

// TestClientTracesEveryCallAndNamesItsCapability: the real client reports
// each call once to the context's CallTrace, with the error it returns; a
// 403 names the capability Verbs gives for the verb; and the route Verbs
// gives is the one the client sends (the simulator's errors name it).
func TestClientTracesEveryCallAndNamesItsCapability(t *testing.T) {
	var routes []string // method and path of each request, in order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routes = append(routes, r.Method+" "+r.URL.Path)
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	client := nomad.NewAPI(c)
	for verb, v := range nomad.Verbs {
		t.Run(verb, func(t *testing.T) {
			routes = nil
			var calls []tracedCall
			err := nomadsim.CallVerb(recordCalls(&calls), client, verb)
			if verb == nomad.VerbExecAlloc && len(routes) > 0 && strings.HasPrefix(routes[0], "GET /v1/node/") {
				// The api client's Exec reads the allocation's node first,
				// to try it directly; a failed read sends the exec through
				// the address it was given. That read is the api's step,
				// not the verb's route.
				routes = routes[1:]
			}
			if len(routes) == 0 || !strings.HasPrefix(routes[0], v.Method+" "+v.Path) {
				t.Errorf("%s sent %v; Verbs gives %s %s", verb, routes, v.Method, v.Path)
			}
			var perm *nomad.PermissionError
			if !errors.As(err, &perm) || perm.Verb != verb || perm.Capability != v.Capability {
				t.Fatalf("%s answered 403 with %v; want a PermissionError naming %s and %q", verb, err, verb, v.Capability)
			}
			if len(calls) != 1 || calls[0].verb != verb || !sameError(calls[0].err, err) {
				t.Fatalf("the trace saw %+v; want exactly one %s reporting %v", calls, verb, err)
			}
		})
	}
}

// TestSimulatorTracesEveryCall: the simulated Nomad reports its calls as
// the real client does, failures included, so the agent's metrics and
// health read the same against both.
func TestSimulatorTracesEveryCall(t *testing.T) {
	injected := errors.New("injected")
	for verb := range nomad.Verbs {
		for _, fail := range []bool{false, true} {
			name := verb
			if fail {
				name += "/failing"
			}
			t.Run(name, func(t *testing.T) {
				sim := nomadsim.NewNomad(nomadsim.NomadConfig{})
				defer sim.Close()
				if fail {
					sim.FailVerb(verb, 1, injected)
				}
				var calls []tracedCall
				ctx, cancel := context.WithCancel(recordCalls(&calls))
				defer cancel()
				err := nomadsim.CallVerb(ctx, sim, verb)
				if fail && !errors.Is(err, injected) {
					t.Fatalf("%s returned %v; want the injected fault", verb, err)
				}
				if len(calls) != 1 || calls[0].verb != verb || !sameError(calls[0].err, err) {
					t.Fatalf("the trace saw %+v; want exactly one %s reporting %v", calls, verb, err)
				}
				if n := sim.Calls()[verb]; n != 1 {
					t.Fatalf("the simulator counted %d calls of %s, want 1", n, verb)
				}
			})
		}
	}
}

package nomadsim

import (
	"context"
	"fmt"
	"reflect"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
)

// CallVerb calls the method of impl that verb names (see nomad.Verbs) with
// ctx and placeholder arguments: "x" for a string (an ID or namespace that
// exists nowhere; an empty one would change the request's path), {"x"} for
// a []string (a command), a new empty value for a pointer, the zero value
// otherwise. It returns the call's error. Tests use it to hold every
// implementation of nomad.API to the same rules for every verb, a verb
// added later included, without a hand-written call per verb.
func CallVerb(ctx context.Context, impl nomad.API, verb string) error {
	m := reflect.ValueOf(&impl).Elem().MethodByName(verb)
	if !m.IsValid() {
		return fmt.Errorf("nomad.API has no method %q", verb)
	}
	t := m.Type()
	args := []reflect.Value{reflect.ValueOf(ctx)}
	for i := 1; i < t.NumIn(); i++ {
		in := t.In(i)
		switch in.Kind() {
		case reflect.String:
			args = append(args, reflect.ValueOf("x").Convert(in))
		case reflect.Pointer:
			args = append(args, reflect.New(in.Elem()))
		case reflect.Slice:
			// A command: an empty one is refused before any request.
			if in.Elem().Kind() == reflect.String {
				args = append(args, reflect.ValueOf([]string{"x"}).Convert(in))
			} else {
				args = append(args, reflect.Zero(in))
			}
		default:
			args = append(args, reflect.Zero(in))
		}
	}
	out := m.Call(args)
	err, _ := out[len(out)-1].Interface().(error)
	return err
}

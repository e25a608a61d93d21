package nomad

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestLostStreamReasons: each way the event stream can end is counted
// under one reason, read from Nomad's own text where it wrote one.
func TestLostStreamReasons(t *testing.T) {
	var syntax error = &json.SyntaxError{}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"Nomad dropped events, mid-stream", &StreamError{Body: "event dropped from buffer"}, ResetBufferOverflow},
		{"Nomad dropped events, in process", fmt.Errorf("following the event stream after a listing at index 3: %w", errors.New("event dropped from buffer")), ResetBufferOverflow},
		{"Nomad closed the subscription", &StreamError{Body: "subscription closed by server, client should resubscribe"}, ResetServerClosed},
		{"another error of Nomad's", &StreamError{Body: "rpc error: No cluster leader"}, ResetServerError},
		{"a permission error", &PermissionError{Verb: VerbEvents, Err: errors.New("Permission denied")}, ResetDenied},
		{"garbled JSON", fmt.Errorf("reading the event stream: %w", syntax), ResetDecode},
		{"the connection ended", fmt.Errorf("reading the event stream: %w", io.ErrUnexpectedEOF), ResetDisconnect},
		{"the stream closed", errors.New("the event stream closed"), ResetDisconnect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostStream(tc.err); got.reason != tc.want {
				t.Fatalf("reason %q (%s), want %q", got.reason, got.message, tc.want)
			}
		})
	}
}

package testagent

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does, without failing the outer test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Eventually on a goroutine of its own, since a fatal ends it.
func (f *fatalRecorder) run(timeout time.Duration, cond func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(f, timeout, "the probe", cond)
	}()
	<-done
}

func TestEventually(t *testing.T) {
	calls := 0
	ok := &fatalRecorder{TB: t}
	ok.run(time.Minute, func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if ok.msg != "" || calls != 3 {
		t.Fatalf("a condition met on its third call: %d calls, fatal %q", calls, ok.msg)
	}

	never := &fatalRecorder{TB: t}
	never.run(0, func() error { return errors.New("still pending") })
	if !strings.Contains(never.msg, "waiting for the probe: still pending") {
		t.Fatalf("a condition never met: fatal %q, want it to name what and the last error", never.msg)
	}
}

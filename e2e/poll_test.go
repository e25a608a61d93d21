package e2e

import "time"

// pollUntilStopped calls poll at once, then every `every`, in a goroutine
// of its own, until stop is called; stop returns once poll's last call
// has. It is what the e2e tests' recorders (events, sockets) run on.
func pollUntilStopped(every time.Duration, poll func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			poll()
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

package nomad

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// DeregisterKindOf exposes deregisterKindOf to the package's external
// tests, by name: "stopped", "purged" or "unknown".
func DeregisterKindOf(job *api.Job, index uint64) string {
	return deregisterKindOf(job, index).String()
}

// SetMaxHold shortens how long one write may wait for the stream.
func (p *StreamPacer) SetMaxHold(d time.Duration) { p.maxHold = d }

// Wrote records the index of a write made without Wait, as if Nomad had
// returned it: the tests' way to put the pacer ahead of the stream.
func (p *StreamPacer) Wrote(index uint64) {
	p.mu.Lock()
	p.head = max(p.head, index)
	p.mu.Unlock()
}

package testagent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// MachineCPU is the machine's CPU time by kind, from the first line of
// /proc/stat.
type MachineCPU struct {
	// User includes nice; System includes irq and softirq; Iowait is idle
	// time with the disk outstanding.
	User, System, Idle, Iowait time.Duration
}

// parseMachineCPU reads /proc/stat's aggregate line, "cpu user nice system
// idle iowait irq softirq steal …".
func parseMachineCPU(stat string) (MachineCPU, error) {
	line, _, _ := strings.Cut(stat, "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("the first line of /proc/stat is %q, want \"cpu\" and at least 7 counters", line)
	}
	var n [7]time.Duration
	for i := range n {
		v, err := strconv.ParseInt(fields[i+1], 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("counter %d of /proc/stat's cpu line, %q, is not a number: %w", i+1, fields[i+1], err)
		}
		n[i] = time.Duration(v) * time.Second / clockTicks
	}
	return MachineCPU{User: n[0] + n[1], System: n[2] + n[5] + n[6], Idle: n[3], Iowait: n[4]}, nil
}

// ReadMachineCPU reads the machine's CPU time so far.
func ReadMachineCPU() (MachineCPU, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, fmt.Errorf("reading the machine's CPU time: %w", err)
	}
	m, err := parseMachineCPU(string(raw))
	if err != nil {
		return MachineCPU{}, fmt.Errorf("reading the machine's CPU time: %w", err)
	}
	return m, nil
}

// String says how the machine spent a phase: the share of its CPU time
// busy, in the kernel, and idle waiting for the disk.
func (m MachineCPU) String() string {
	total := m.User + m.System + m.Idle + m.Iowait
	if total <= 0 {
		return "no CPU time"
	}
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / total.Seconds() }
	return fmt.Sprintf("busy %.0f%% (user %.0f%%, system %.0f%%), waiting on the disk %.0f%%, idle %.0f%%",
		pct(m.User+m.System), pct(m.User), pct(m.System), pct(m.Iowait), pct(m.Idle))
}

// Sub is m − before: the machine's CPU time between two readings.
func (m MachineCPU) Sub(before MachineCPU) MachineCPU {
	return MachineCPU{User: m.User - before.User, System: m.System - before.System, Idle: m.Idle - before.Idle, Iowait: m.Iowait - before.Iowait}
}

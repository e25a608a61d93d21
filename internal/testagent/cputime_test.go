package testagent

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	// Fields 14–17 (utime, stime, cutime, cstime) are 250, 50, 7 and 3
	// ticks: 3.1 s. The name holds a space and a parenthesis.
	const line = "4242 (nomad (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 7 3 20 0 12 0 100 1000000 500 18446744073709551615"
	tests := []struct {
		name, line string
		want       time.Duration
		wantErr    bool
	}{
		{"a name with spaces and parentheses", line, 3100 * time.Millisecond, false},
		{"no command name", "4242 nomad S 1", 0, true},
		{"too few fields", "4242 (nomad) S 1 2 3", 0, true},
		{"a field that is not a number", "4242 (nomad) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 50 7 3 20", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatCPU(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseProcStatCPU: err = %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseProcStatCPU = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProcCPUTimeOfThisProcess(t *testing.T) {
	before, err := procCPUTime(os.Getpid())
	if err != nil {
		t.Fatalf("procCPUTime: %v", err)
	}
	// Burn CPU until the kernel's tick counter moves; the count only grows.
	var sink uint64
	for i := 0; ; i++ {
		for j := 0; j < 1_000_000; j++ {
			sink += uint64(j) * uint64(i)
		}
		after, err := procCPUTime(os.Getpid())
		if err != nil {
			t.Fatalf("procCPUTime: %v", err)
		}
		if after < before {
			t.Fatalf("CPU time went back from %v to %v", before, after)
		}
		if after > before {
			return
		}
	}
}

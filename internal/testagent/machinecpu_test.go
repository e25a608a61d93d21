package testagent

import (
	"strings"
	"testing"
	"time"
)

func TestParseMachineCPU(t *testing.T) {
	tests := []struct {
		name, stat string
		want       MachineCPU
		wantErr    string
	}{
		{
			name: "user and nice, system with irq and softirq",
			stat: "cpu  1000 50 300 4000 200 10 40 0 0 0\ncpu0 500 25 150 2000 100 5 20 0 0 0\n",
			want: MachineCPU{User: 10500 * time.Millisecond, System: 3500 * time.Millisecond, Idle: 40 * time.Second, Iowait: 2 * time.Second},
		},
		{name: "not the aggregate line", stat: "cpu0 1 2 3 4 5 6 7", wantErr: `want "cpu"`},
		{name: "too few counters", stat: "cpu 1 2 3 4 5 6", wantErr: "at least 7"},
		{name: "a counter that is not a number", stat: "cpu 1 2 x 4 5 6 7", wantErr: `counter 3 of /proc/stat's cpu line, "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMachineCPU(tc.stat)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMachineCPU: err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMachineCPU: %v", err)
			}
			if got != tc.want {
				t.Errorf("parseMachineCPU = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMachineCPUString(t *testing.T) {
	m := MachineCPU{User: 6 * time.Second, System: 2 * time.Second, Idle: 1 * time.Second, Iowait: 1 * time.Second}
	const want = "busy 80% (user 60%, system 20%), waiting on the disk 10%, idle 10%"
	if got := m.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (MachineCPU{}).String(); got != "no CPU time" {
		t.Errorf("String of nothing = %q", got)
	}
	later := MachineCPU{User: 7 * time.Second, System: 3 * time.Second, Idle: 2 * time.Second, Iowait: 4 * time.Second}
	if got, want := later.Sub(m), (MachineCPU{User: time.Second, System: time.Second, Idle: time.Second, Iowait: 3 * time.Second}); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
}

func TestReadMachineCPU(t *testing.T) {
	m, err := ReadMachineCPU()
	if err != nil {
		t.Fatalf("ReadMachineCPU: %v", err)
	}
	if m.User+m.System+m.Idle <= 0 {
		t.Errorf("ReadMachineCPU = %+v: this machine has spent no CPU time", m)
	}
}

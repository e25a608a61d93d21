package reconciler

import (
	"testing"
	"time"
)

// fuzzInput decodes fuzz bytes into an observation: a spec from a few knobs,
// and pods, volumes and revisions from data, including the bad cases
// (duplicate ordinals, negative and out-of-range ordinals, unknown
// revisions, garbage phases, a pod both ready and failed...).
func fuzzInput(knobs uint64, now int64, data []byte) Input {
	b := func(shift uint) int { return int(knobs >> shift & 0xff) }
	spec := Spec{
		Name:                 "web",
		Replicas:             b(0)%12 - 1,
		OrdinalsStart:        b(8)%5 - 1,
		Partition:            b(16)%10 - 1,
		MaxUnavailable:       IntOrPercent{Value: b(24)%120 - 5, Percent: b(24)&1 == 1},
		MinReadySeconds:      b(32) % 4,
		RevisionHistoryLimit: b(40)%4 - 1,
		ProgressDeadline:     time.Duration(b(48)%4) * time.Minute,
		Generation:           uint64(b(56)),
	}
	flags := b(32) >> 2
	spec.PodManagementPolicy = []PodManagementPolicy{OrderedReady, Parallel, "", "Bogus"}[flags&3]
	spec.UpdateStrategy = []UpdateStrategy{RollingUpdate, OnDelete}[flags>>2&1]
	spec.WhenScaled = []RetentionPolicy{Retain, Delete}[flags>>3&1]
	spec.WhenDeleted = []RetentionPolicy{Retain, Delete}[flags>>4&1]
	spec.Paused = flags>>5&1 == 1
	spec.Deleted = b(40)&0x80 != 0
	spec.SpreadRequired = b(40)&0x40 != 0
	if b(56)&0x10 != 0 {
		spec.LeaderCheck = "primary"
		spec.LeaderUpdate = []LeaderUpdate{LeaderLast, LeaderSwitchover, LeaderSupervised, ""}[b(56)>>5&3]
	}
	if b(56)&0x80 != 0 {
		spec.DisruptionCheck = "check"
	}
	if b(48)&0x40 != 0 {
		spec.Approval = "ok"
	}
	leaderUnknown := b(48)&0x80 != 0
	if b(40)&0x20 != 0 {
		spec.ClaimTemplates = []ClaimTemplate{{Claim: "data", CapacityMin: int64(b(24) & 0x3f), CapacityMax: int64(b(16) & 0x3f),
			Class: []string{"", "fast"}[b(8)&1]}}
	}
	if b(48)&0x10 != 0 {
		spec.VolumeClaims = []string{"data"}
	}
	if b(48)&0x20 != 0 {
		spec.VolumeClaims = append(spec.VolumeClaims, "logs")
	}
	t0 := epoch.Add(time.Duration(now%100000) * time.Second)
	in := Input{Spec: spec, Now: t0, TemplateData: []byte{'v', byte('0' + b(56)%4)}, LeaderUnknown: leaderUnknown}
	if b(32)&0x80 != 0 {
		in.CannotExpand = []string{"fast"}
	}
	names := []string{"", "web-x", "garbage"}
	for r := 0; r < b(16)>>4%4; r++ {
		d := []byte{'v', byte('0' + r)}
		rev := Revision{Name: RevisionName("web", HashRevision(d, 0)), Number: int64(r + 1), Data: d}
		in.Revisions = append(in.Revisions, rev)
		names = append(names, rev.Name)
	}
	if b(8)&0x80 != 0 {
		in.Previous.CurrentRevision = names[b(8)>>5%len(names)]
		in.Previous.UpdateRevision = names[b(0)>>5%len(names)]
		in.Previous.LastProgressTime = t0.Add(-time.Duration(b(24)) * time.Second)
	}
	phases := []Phase{PhasePending, PhaseRunning, PhaseSucceeded, PhaseFailed, "", "Exploded"}
	for len(data) >= 4 {
		c := data[:4]
		data = data[4:]
		if c[0]&0x80 != 0 { // a volume
			in.Volumes = append(in.Volumes, Volume{
				Claim: []string{"data", "logs", "other"}[int(c[1])%3], Ordinal: int(int8(c[2])) % 16,
				Capacity: int64(c[3] & 0x3f), Class: []string{"", "fast"}[c[3]>>6&1],
			})
			continue
		}
		p := Pod{
			Ordinal:     int(int8(c[1])) % 16,
			Revision:    names[int(c[0])%len(names)],
			Phase:       phases[int(c[2])%len(phases)],
			Ready:       c[2]&0x10 != 0,
			Terminating: c[2]&0x20 != 0,
			Drifted:     c[2]&0x40 != 0,
			Created:     t0.Add(-time.Duration(c[3]) * time.Second),
			AllTerminal: c[3]&0x02 != 0,
			NodeBack:    c[3]&0x04 != 0,
			ScaledCount: int(c[3] >> 6),
			Leader:      c[2]&0x80 != 0,
		}
		if c[3]&0x01 != 0 {
			in.Cleared = append(in.Cleared, Clearance{Ordinal: p.Ordinal, Until: t0.Add(time.Duration(int(c[3]>>3&7)-2) * time.Second)})
		}
		if c[0]&0x40 != 0 {
			// A hold on this ordinal, some already over.
			in.Holds = append(in.Holds, Hold{
				Ordinal: p.Ordinal,
				Step:    []HoldStep{StepCreate, StepDisrupt}[c[0]>>5&1],
				Until:   t0.Add(time.Duration(int(c[3]&0x38>>3)-2) * time.Second),
				Reason:  []string{HoldBackOff, HoldKillGrace, HoldHookWaiting, HoldSpreadUnsatisfiable}[c[0]&3],
			})
		}
		if p.Ready && c[3]&1 == 0 {
			p.ReadySince = t0.Add(-time.Duration(c[3]>>1) * time.Second)
		}
		if c[1]&0x80 != 0 {
			// The memory's side of the pod: an allocation its post_ready
			// hooks answered about or await, a node change asked about, a
			// crash count, a refusal count, a switchover from it and its
			// failed tries.
			p.AllocID = names[int(c[1]>>4&3)%len(names)]
			p.AwaitsPostReady = c[1]&0x08 != 0
			p.NodeChange = uint64(c[3] & 7)
			mem := &in.Memory
			if mem.PostReady == nil {
				mem.PostReady, mem.Evaluated, mem.Crashes, mem.AskFailures = map[string]PostReadyAnswer{}, map[int]uint64{}, map[int]CrashRecord{}, map[int]int{}
			}
			mem.PostReady[p.AllocID] = PostReadyAnswer{Done: c[2]&1 != 0, RetryAt: t0.Add(time.Duration(int(c[3]&0x30>>4)-1) * time.Second)}
			mem.Evaluated[p.Ordinal] = uint64(c[0] & 7)
			mem.Crashes[p.Ordinal] = CrashRecord{Count: int(c[0] & 7), Last: t0.Add(-time.Duration(c[3]) * time.Second)}
			mem.AskFailures[p.Ordinal] = int(c[0] >> 5)
			// A round of switchovers from it that failed: candidates
			// (ordinals 0-5) and those of them that failed.
			var tries SwitchoverTries
			for o := 0; o < 6; o++ {
				if c[2]>>2&(1<<o) != 0 {
					tries.Candidates = append(tries.Candidates, o)
					if c[1]&(1<<(o%3)) != 0 {
						tries.Failed = append(tries.Failed, CandidateAnswer{Ordinal: o, Answer: "no"})
					}
				}
			}
			if len(tries.Candidates) > 0 {
				if mem.Tries == nil {
					mem.Tries = map[int]SwitchoverTries{}
				}
				mem.Tries[p.Ordinal] = tries
			}
			if c[0]&0x80 != 0 && mem.Switchover == nil {
				mem.Switchover = &Switchover{From: p.Ordinal, To: int(c[1] & 7), Candidates: []int{int(c[1] & 7)}, Started: t0.Add(-time.Second), Seen: c[1]&1 != 0}
				mem.Switchover.Candidates = append(mem.Switchover.Candidates, tries.Candidates...)
			}
			mem.TermSeen = c[2]&2 != 0
			in.TermStart = t0.Add(-time.Duration(c[3]&7) * time.Second)
		}
		in.Pods = append(in.Pods, p)
	}
	return in
}

// FuzzReconcile feeds arbitrary observations to Reconcile: it must never
// panic and every decision must pass checkSafety.
//
//	go test ./reconciler -run '^$' -fuzz FuzzReconcile -fuzztime 5m
func FuzzReconcile(f *testing.F) {
	// Seeds: a steady set, duplicates, a failed pod, condemned pods,
	// garbage phases and unknown revisions, a deleted set.
	f.Add(uint64(0x0000_0000_0000_0004), int64(100), []byte{3, 0, 0x11, 10, 3, 1, 0x11, 10, 3, 2, 0x11, 10})
	f.Add(uint64(0x0000_0030_0000_0003), int64(5), []byte{3, 1, 0x11, 1, 3, 1, 0x00, 2, 0x80, 0, 1, 0})
	f.Add(uint64(0x0010_0004_0000_0005), int64(7), []byte{4, 0, 3, 0, 3, 9, 1, 0, 3, 250, 0x15, 0})
	f.Add(uint64(0x0000_8014_3000_0002), int64(9), []byte{0, 0, 5, 0, 1, 1, 4, 9, 0x80, 1, 3, 0, 0x80, 0, 7, 0})
	f.Add(uint64(0x00f0_0000_a0ff_ff0b), int64(1), []byte{2, 5, 0x31, 3, 2, 6, 0x71, 3})
	f.Fuzz(func(t *testing.T, knobs uint64, now int64, data []byte) {
		in := fuzzInput(knobs, now, data)
		if _, err := checkSafety(in); err != nil {
			t.Fatalf("%v\ninput: %+v", err, in)
		}
	})
}

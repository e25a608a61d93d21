package jobs

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

func TestIsManaged(t *testing.T) {
	cases := []struct {
		name string
		job  *api.Job
		want bool
	}{
		{"nil job", nil, false},
		{"no meta", &api.Job{}, false},
		{"true", &api.Job{Meta: map[string]string{"statefulset": "true"}}, true},
		{"false", &api.Job{Meta: map[string]string{"statefulset": "false"}}, false},
		{"capitalised is not true", &api.Job{Meta: map[string]string{"statefulset": "True"}}, false},
		{"only other keys", &api.Job{Meta: map[string]string{"statefulset_replicas": "3"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsManaged(tc.job); got != tc.want {
				t.Errorf("IsManaged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseNotManaged(t *testing.T) {
	job := newJob(nil)
	delete(job.Meta, KeyManaged)
	_, err := Parse(job)
	if !errors.Is(err, ErrNotManaged) {
		t.Fatalf("Parse of an unannotated job: err = %v, want ErrNotManaged", err)
	}
	var verr *ValidationError
	if errors.As(err, &verr) {
		t.Errorf("an unmanaged job must not be reported as invalid: %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	job := newJob(nil)
	job.JobModifyIndex = ptr(uint64(42))
	spec, err := Parse(job)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := reconciler.Spec{
		Namespace:            "default",
		Name:                 "web",
		Replicas:             1,
		OrdinalsStart:        0,
		PodManagementPolicy:  reconciler.OrderedReady,
		UpdateStrategy:       reconciler.RollingUpdate,
		Partition:            0,
		MaxUnavailable:       reconciler.IntOrPercent{Value: 1},
		MinReadySeconds:      0,
		RevisionHistoryLimit: 10,
		WhenDeleted:          reconciler.Retain,
		WhenScaled:           reconciler.Retain,
		ProgressDeadline:     10 * time.Minute,
		Spread:               DefaultSpread,
		LeaderUpdate:         reconciler.LeaderLast,
		Generation:           42,
	}
	if !specEqual(spec, want) {
		t.Errorf("Parse defaults:\n got %+v\nwant %+v", spec, want)
	}
}

func TestParseJobFields(t *testing.T) {
	job := newJob(nil)
	job.Namespace = ptr("apps")
	job.Stop = ptr(true)
	job.JobModifyIndex = ptr(uint64(7))
	spec, err := Parse(job)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if spec.Namespace != "apps" || spec.Name != "web" || !spec.Deleted || spec.Generation != 7 {
		t.Errorf("spec = %+v, want namespace apps, name web, deleted, generation 7", spec)
	}
}

func specEqual(a, b reconciler.Spec) bool {
	if len(a.VolumeClaims) != len(b.VolumeClaims) {
		return false
	}
	for i := range a.VolumeClaims {
		if a.VolumeClaims[i] != b.VolumeClaims[i] {
			return false
		}
	}
	return reflect.DeepEqual(a, b)
}

// TestParseKeys covers every annotation of DESIGN §1 with valid and invalid
// values. A valid case checks the field it sets; an invalid case checks
// that exactly one problem names the key, the value and the rule.
func TestParseKeys(t *testing.T) {
	cases := []struct {
		key, value string
		check      func(reconciler.Spec) bool // valid cases
		rule       string                     // invalid cases: part of the rule text
		volume     bool                       // add a host volume named like the value
	}{
		{key: KeyReplicas, value: "3", check: func(s reconciler.Spec) bool { return s.Replicas == 3 }},
		{key: KeySpread, value: "${meta.rack}", check: func(s reconciler.Spec) bool { return s.Spread == "${meta.rack}" }},
		{key: KeySpread, value: "${node.datacenter}", check: func(s reconciler.Spec) bool { return s.Spread == "${node.datacenter}" }},
		{key: KeySpread, value: "rack", rule: "is not a node attribute such as ${node.unique.id}"},
		{key: KeySpread, value: "${meta.}", rule: "is not a node attribute"},
		{key: KeySpreadRequired, value: "true", check: func(s reconciler.Spec) bool { return s.SpreadRequired }},
		{key: KeySpreadRequired, value: "yes", rule: "is not one of true, false"},
		{key: KeyPodReplacePrefix + "2", value: "2026-11-24T10:00:00Z", check: func(s reconciler.Spec) bool {
			return len(s.Replacements) == 1 && s.Replacements[0] == reconciler.Replacement{Ordinal: 2, Token: "2026-11-24T10:00:00Z"}
		}},
		{key: KeyPodReplacePrefix + "0", value: "t1,new-volume", check: func(s reconciler.Spec) bool {
			return len(s.Replacements) == 1 && s.Replacements[0] == reconciler.Replacement{Ordinal: 0, Token: "t1", NewVolume: true}
		}},
		{key: KeyPodReplacePrefix + "x", value: "t1", rule: "names no ordinal"},
		{key: KeyPodReplacePrefix + "1", value: ",new-volume", rule: `is not "<token>" or "<token>,new-volume"`},
		{key: KeyPodReplacePrefix + "1", value: "a,b", rule: `is not "<token>" or "<token>,new-volume"`},
		{key: KeyReplicas, value: "0", check: func(s reconciler.Spec) bool { return s.Replicas == 0 }},
		{key: KeyReplicas, value: " 5 ", check: func(s reconciler.Spec) bool { return s.Replicas == 5 }},
		{key: KeyReplicas, value: "-1", rule: "is not an integer ≥ 0"},
		{key: KeyReplicas, value: "three", rule: "is not an integer ≥ 0"},
		{key: KeyReplicas, value: "+3", rule: "is not an integer ≥ 0"},
		{key: KeyReplicas, value: "1.5", rule: "is not an integer ≥ 0"},
		{key: KeyReplicas, value: "", rule: "is not an integer ≥ 0"},
		{key: KeyReplicas, value: "99999999999999999999", rule: "is not an integer from 0 to"},
		{key: KeyOrdinalsStart, value: "1", check: func(s reconciler.Spec) bool { return s.OrdinalsStart == 1 }},
		{key: KeyOrdinalsStart, value: "-2", rule: "is not an integer ≥ 0"},
		{key: KeyPodManagementPolicy, value: "Parallel", check: func(s reconciler.Spec) bool { return s.PodManagementPolicy == reconciler.Parallel }},
		{key: KeyPodManagementPolicy, value: "OrderedReady", check: func(s reconciler.Spec) bool { return s.PodManagementPolicy == reconciler.OrderedReady }},
		{key: KeyPodManagementPolicy, value: "parallel", rule: `did you mean "Parallel"`},
		{key: KeyPodManagementPolicy, value: "Burst", rule: "is not one of OrderedReady, Parallel"},
		{key: KeyUpdateStrategy, value: "OnDelete", check: func(s reconciler.Spec) bool { return s.UpdateStrategy == reconciler.OnDelete }},
		{key: KeyUpdateStrategy, value: "RollingUpdate", check: func(s reconciler.Spec) bool { return s.UpdateStrategy == reconciler.RollingUpdate }},
		{key: KeyUpdateStrategy, value: "Recreate", check: func(s reconciler.Spec) bool { return s.UpdateStrategy == reconciler.Recreate }},
		{key: KeyUpdateStrategy, value: "recreate", rule: `is not one of RollingUpdate, OnDelete, Recreate (values are case-sensitive: did you mean "Recreate"?)`},
		{key: KeyPartition, value: "2", check: func(s reconciler.Spec) bool { return s.Partition == 2 }},
		{key: KeyPartition, value: "-1", rule: "is not an integer ≥ 0"},
		{key: KeyMaxUnavailable, value: "2", check: func(s reconciler.Spec) bool { return s.MaxUnavailable == reconciler.IntOrPercent{Value: 2} }},
		{key: KeyMaxUnavailable, value: "25%", check: func(s reconciler.Spec) bool {
			return s.MaxUnavailable == reconciler.IntOrPercent{Value: 25, Percent: true}
		}},
		{key: KeyMaxUnavailable, value: "100%", check: func(s reconciler.Spec) bool {
			return s.MaxUnavailable == reconciler.IntOrPercent{Value: 100, Percent: true}
		}},
		{key: KeyMaxUnavailable, value: "0", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMaxUnavailable, value: "0%", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMaxUnavailable, value: "101%", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMaxUnavailable, value: "-5%", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMaxUnavailable, value: "%", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMaxUnavailable, value: "half", rule: "is not an integer ≥ 1 or a percentage"},
		{key: KeyMinReadySeconds, value: "30", check: func(s reconciler.Spec) bool { return s.MinReadySeconds == 30 }},
		{key: KeyMinReadySeconds, value: "30s", rule: "is not an integer ≥ 0"},
		{key: KeyRevisionHistoryLimit, value: "0", check: func(s reconciler.Spec) bool { return s.RevisionHistoryLimit == 0 }},
		{key: KeyRevisionHistoryLimit, value: "x", rule: "is not an integer ≥ 0"},
		{key: KeyVolumeClaims, value: "data", check: func(s reconciler.Spec) bool { return strings.Join(s.VolumeClaims, ",") == "data" }},
		{key: KeyVolumeClaims, value: " data , logs ", check: func(s reconciler.Spec) bool { return strings.Join(s.VolumeClaims, ",") == "data,logs" }},
		{key: KeyVolumeClaims, value: "", check: func(s reconciler.Spec) bool { return len(s.VolumeClaims) == 0 }},
		{key: KeyVolumeClaims, value: "data,,logs", rule: "has an empty entry"},
		{key: KeyVolumeClaims, value: "data,data", rule: `names "data" more than once`},
		{key: KeyVolumeClaims, value: "dta", rule: `is not a volume of the task group (did you mean "data"?)`},
		{key: KeyVolumeClaims, value: "csi", rule: `is a volume of type "csi", not "host"`},
		{key: KeyVolumeClaims, value: "da ta", rule: "is not a valid claim name"},
		{key: KeyVolumeClaims, value: strings.Repeat("d", 130), rule: "is too long", volume: true},
		{key: KeyVolumeRetentionDeleted, value: "Delete", check: func(s reconciler.Spec) bool { return s.WhenDeleted == reconciler.Delete }},
		{key: KeyVolumeRetentionDeleted, value: "Retain", check: func(s reconciler.Spec) bool { return s.WhenDeleted == reconciler.Retain }},
		{key: KeyVolumeRetentionDeleted, value: "delete", rule: `did you mean "Delete"`},
		{key: KeyVolumeRetentionScaled, value: "Delete", check: func(s reconciler.Spec) bool { return s.WhenScaled == reconciler.Delete }},
		{key: KeyVolumeRetentionScaled, value: "Keep", rule: "is not one of Retain, Delete"},
		{key: KeyPaused, value: "true", check: func(s reconciler.Spec) bool { return s.Paused }},
		{key: KeyPaused, value: "false", check: func(s reconciler.Spec) bool { return !s.Paused }},
		{key: KeyPaused, value: "yes", rule: "is not one of true, false"},
		{key: KeyPaused, value: "1", rule: "is not one of true, false"},
		{key: KeyProgressDeadline, value: "90s", check: func(s reconciler.Spec) bool { return s.ProgressDeadline == 90*time.Second }},
		{key: KeyProgressDeadline, value: "1h30m", check: func(s reconciler.Spec) bool { return s.ProgressDeadline == 90*time.Minute }},
		{key: KeyProgressDeadline, value: "600", rule: "is not a Go duration > 0"},
		{key: KeyProgressDeadline, value: "0s", rule: "is not a Go duration > 0"},
		{key: KeyProgressDeadline, value: "-1m", rule: "is not a Go duration > 0"},
		{key: "statefulset_replica", value: "3", rule: `is not a known statefulset annotation (did you mean "statefulset_replicas"?)`},
		{key: "statefulset_partitoin", value: "1", rule: `(did you mean "statefulset_partition"?)`},
		{key: "statefulset-replicas", value: "3", rule: `(did you mean "statefulset_replicas"?)`},
		{key: "statefulset_something_else_entirely", value: "x", rule: "is not a known statefulset annotation"},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			job := newJob(map[string]string{tc.key: tc.value})
			if tc.volume {
				job.TaskGroups[0].Volumes[tc.value] = &api.VolumeRequest{Name: tc.value, Type: "host", Source: tc.value}
			}
			spec, err := Parse(job)
			if tc.check != nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if !tc.check(spec) {
					t.Errorf("%s=%q parsed to %+v", tc.key, tc.value, spec)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse: err = %v, want a *ValidationError", err)
			}
			if len(verr.Problems) != 1 {
				t.Fatalf("got %d problems, want 1: %v", len(verr.Problems), err)
			}
			p := verr.Problems[0]
			if p.Key != tc.key || !strings.Contains(p.Rule, tc.rule) {
				t.Errorf("problem = %+v, want key %q and rule containing %q", p, tc.key, tc.rule)
			}
			if p.Key == KeyVolumeClaims {
				// A claim problem names the claim; others name the raw value.
				if !strings.Contains(tc.value, p.Value) {
					t.Errorf("problem value %q is not part of %q", p.Value, tc.value)
				}
			} else if p.Value != tc.value {
				t.Errorf("problem value %q, want %q", p.Value, tc.value)
			}
			if !strings.Contains(err.Error(), p.String()) {
				t.Errorf("Error() %q does not list %q", err.Error(), p.String())
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	p := Problem{Key: KeyPartition, Value: "-1", Rule: "is not an integer ≥ 0"}
	if got, want := p.String(), `statefulset_partition: "-1" is not an integer ≥ 0`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseStructure(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*api.Job)
		key    string
		rule   string
	}{
		{"two groups", func(j *api.Job) { j.TaskGroups = append(j.TaskGroups, &api.TaskGroup{Name: ptr("b"), Count: ptr(0)}) },
			"group", "is not exactly one task group"},
		{"no groups", func(j *api.Job) { j.TaskGroups = nil }, "group", "is not exactly one task group"},
		{"count 3", func(j *api.Job) { j.TaskGroups[0].Count = ptr(3) }, "count", "is not 0"},
		{"count unset", func(j *api.Job) { j.TaskGroups[0].Count = nil }, "count", "is not 0"},
		{"batch job", func(j *api.Job) { j.Type = ptr("batch") }, "type", `is not "service"`},
		{"set name with capitals", func(j *api.Job) { j.ID = ptr("Web") }, "id", "is not a valid set name"},
		{"set name with underscore", func(j *api.Job) { j.ID = ptr("my_web") }, "id", "is not a valid set name"},
		{"set name with space", func(j *api.Job) { j.ID = ptr("my web") }, "id", "is not a valid set name"},
		{"empty set name", func(j *api.Job) { j.ID = nil }, "id", "is not a valid set name"},
		{"set name too long", func(j *api.Job) { j.ID = ptr(strings.Repeat("a", 62)) }, "id", "is too long"},
		{"set name too long at the last ordinal", func(j *api.Job) {
			j.ID = ptr(strings.Repeat("a", 61))
			j.Meta[KeyReplicas] = "11"
		}, "id", `pod name "` + strings.Repeat("a", 61) + `-10"`},
		{"namespace with space", func(j *api.Job) { j.Namespace = ptr("a b") }, "namespace", "contains a space"},
		{"per_alloc claim", func(j *api.Job) {
			j.Meta[KeyVolumeClaims] = "data"
			j.TaskGroups[0].Volumes["data"].PerAlloc = true
		}, KeyVolumeClaims, "per_alloc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(nil)
			tc.mutate(job)
			_, err := Parse(job)
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse: err = %v, want a *ValidationError", err)
			}
			for _, p := range verr.Problems {
				if p.Key == tc.key && strings.Contains(p.Rule, tc.rule) {
					return
				}
			}
			t.Errorf("no problem with key %q and rule %q in: %v", tc.key, tc.rule, err)
		})
	}
}

// TestParseCollectsEveryProblem makes sure one pass reports all problems,
// in a stable order, so the user can fix a job in one round.
func TestParseCollectsEveryProblem(t *testing.T) {
	job := newJob(map[string]string{
		KeyReplicas:            "-1",
		KeyPartition:           "x",
		KeyPodManagementPolicy: "Fast",
		KeyVolumeClaims:        "nope",
		"statefulset_pauzed":   "true",
	})
	job.TaskGroups[0].Count = ptr(2)
	_, err := Parse(job)
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Parse: err = %v, want a *ValidationError", err)
	}
	wantKeys := []string{KeyPartition, "statefulset_pauzed", KeyPodManagementPolicy, KeyReplicas, "count", KeyVolumeClaims}
	var got []string
	for _, p := range verr.Problems {
		got = append(got, p.Key)
	}
	if strings.Join(got, " ") != strings.Join(wantKeys, " ") {
		t.Errorf("problem keys = %v, want %v", got, wantKeys)
	}
	if !strings.Contains(err.Error(), `statefulset_pauzed: "true" is not a known statefulset annotation (did you mean "statefulset_paused"?)`) {
		t.Errorf("Error() lacks the suggestion: %s", err)
	}
	_, err2 := Parse(job)
	if err.Error() != err2.Error() {
		t.Errorf("problems are not in a stable order:\n%s\n%s", err, err2)
	}
}

func TestParseNilJob(t *testing.T) {
	if _, err := Parse(nil); err == nil {
		t.Error("Parse(nil) returned no error")
	}
}

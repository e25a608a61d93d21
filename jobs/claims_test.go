package jobs

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// TestParseClaimTemplates covers statefulset_claim_<claim>_capacity and
// _class (DESIGN §3b): valid values fill Spec.ClaimTemplates in the order
// of statefulset_volume_claims; every invalid one is exactly one problem,
// `key: "value" rule`, with a suggestion where one is plausible.
func TestParseClaimTemplates(t *testing.T) {
	const claims = "data,logs"
	cases := []struct {
		name string
		meta map[string]string
		want []reconciler.ClaimTemplate // valid cases
		key  string                     // invalid cases: the problem's key
		rule string                     // and part of its rule
	}{
		{name: "none", meta: map[string]string{}, want: nil},
		{name: "binary minimum", meta: map[string]string{"statefulset_claim_data_capacity": "10GiB"},
			want: []reconciler.ClaimTemplate{{Claim: "data", CapacityMin: 10 << 30}}},
		{name: "decimal range", meta: map[string]string{"statefulset_claim_data_capacity": "10GB..20GB"},
			want: []reconciler.ClaimTemplate{{Claim: "data", CapacityMin: 10e9, CapacityMax: 20e9}}},
		{name: "spaces and a one-letter unit", meta: map[string]string{"statefulset_claim_data_capacity": " 500MiB .. 1Ti "},
			want: []reconciler.ClaimTemplate{{Claim: "data", CapacityMin: 500 << 20, CapacityMax: 1 << 40}}},
		{name: "equal bounds", meta: map[string]string{"statefulset_claim_data_capacity": "1TiB..1TiB"},
			want: []reconciler.ClaimTemplate{{Claim: "data", CapacityMin: 1 << 40, CapacityMax: 1 << 40}}},
		{name: "class alone", meta: map[string]string{"statefulset_claim_logs_class": "fast-ssd"},
			want: []reconciler.ClaimTemplate{{Claim: "logs", Class: "fast-ssd"}}},
		{name: "both claims, in claim order", meta: map[string]string{
			"statefulset_claim_logs_capacity": "1GiB", "statefulset_claim_data_class": "lvm_thin",
			"statefulset_claim_data_capacity": "100GiB", "statefulset_claim_logs_class": "mkdir"},
			want: []reconciler.ClaimTemplate{
				{Claim: "data", CapacityMin: 100 << 30, Class: "lvm_thin"},
				{Claim: "logs", CapacityMin: 1 << 30, Class: "mkdir"},
			}},

		{name: "unknown claim", meta: map[string]string{"statefulset_claim_dta_capacity": "10GiB"},
			key:  "statefulset_claim_dta_capacity",
			rule: `names the claim "dta", which is not in statefulset_volume_claims (its claims: "data", "logs") (did you mean "statefulset_claim_data_capacity"?)`},
		{name: "unknown claim of a class", meta: map[string]string{"statefulset_claim_log_class": "fast"},
			key: "statefulset_claim_log_class", rule: `(did you mean "statefulset_claim_logs_class"?)`},
		{name: "a group volume that is not a claim", meta: map[string]string{"statefulset_claim_csi_capacity": "1GiB"},
			key: "statefulset_claim_csi_capacity", rule: `names the claim "csi", which is not in statefulset_volume_claims`},
		{name: "unknown suffix", meta: map[string]string{"statefulset_claim_data_size": "10GiB"},
			key:  "statefulset_claim_data_size",
			rule: `is not a claim key: a claim's keys are statefulset_claim_<claim>_capacity and statefulset_claim_<claim>_class`},
		{name: "misspelt suffix", meta: map[string]string{"statefulset_claim_data_capacty": "10GiB"},
			key: "statefulset_claim_data_capacty", rule: `(did you mean "statefulset_claim_data_capacity"?)`},
		{name: "unparseable size", meta: map[string]string{"statefulset_claim_data_capacity": "ten gigs"},
			key: "statefulset_claim_data_capacity", rule: "is not <min> or <min>..<max>, sizes such as 500MiB, 10GiB or 10GiB..20GiB"},
		{name: "unit typo", meta: map[string]string{"statefulset_claim_data_capacity": "10GiBs"},
			key: "statefulset_claim_data_capacity", rule: `(did you mean "10GiB"?)`},
		{name: "unit typo in a range", meta: map[string]string{"statefulset_claim_data_capacity": "10GiB..20Gbi"},
			key: "statefulset_claim_data_capacity", rule: `(did you mean "10GiB..20GiB"?)`},
		{name: "dash range", meta: map[string]string{"statefulset_claim_data_capacity": "10GiB-20GiB"},
			key: "statefulset_claim_data_capacity", rule: `(did you mean "10GiB..20GiB"?)`},
		{name: "three dots", meta: map[string]string{"statefulset_claim_data_capacity": "10GiB...20GiB"},
			key: "statefulset_claim_data_capacity", rule: `(did you mean "10GiB..20GiB"?)`},
		{name: "open range", meta: map[string]string{"statefulset_claim_data_capacity": "10GiB.."},
			key: "statefulset_claim_data_capacity", rule: "is not <min> or <min>..<max>"},
		{name: "negative", meta: map[string]string{"statefulset_claim_data_capacity": "-1GiB"},
			key: "statefulset_claim_data_capacity", rule: "is not <min> or <min>..<max>"},
		{name: "too large", meta: map[string]string{"statefulset_claim_data_capacity": "9EiB"},
			key: "statefulset_claim_data_capacity", rule: "is not <min> or <min>..<max>"},
		{name: "zero", meta: map[string]string{"statefulset_claim_data_capacity": "0GiB"},
			key: "statefulset_claim_data_capacity", rule: "has a minimum of 0 bytes"},
		{name: "minimum above maximum", meta: map[string]string{"statefulset_claim_data_capacity": "20GiB..10GiB"},
			key: "statefulset_claim_data_capacity", rule: "has its minimum 20GiB above its maximum 10GiB"},
		{name: "empty class", meta: map[string]string{"statefulset_claim_data_class": " "},
			key: "statefulset_claim_data_class", rule: "is empty: name a volume_provisioner block of the agent"},
		{name: "class not an identifier", meta: map[string]string{"statefulset_claim_data_class": "fast ssd"},
			key: "statefulset_claim_data_class", rule: "is not a storage class name"},
		{name: "class starting with a digit", meta: map[string]string{"statefulset_claim_data_class": "1fast"},
			key: "statefulset_claim_data_class", rule: "is not a storage class name"},
		{name: "class named like an attribute", meta: map[string]string{"statefulset_claim_data_class": "config"},
			key: "statefulset_claim_data_class", rule: "is not a storage class name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			meta := map[string]string{KeyVolumeClaims: claims}
			for k, v := range tc.meta {
				meta[k] = v
			}
			spec, err := Parse(newJob(meta))
			if tc.key == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if !reflect.DeepEqual(spec.ClaimTemplates, tc.want) {
					t.Fatalf("ClaimTemplates = %+v, want %+v", spec.ClaimTemplates, tc.want)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) != 1 {
				t.Fatalf("Parse: %v; want exactly one problem", err)
			}
			p := verr.Problems[0]
			if p.Key != tc.key || p.Value != tc.meta[tc.key] || !strings.Contains(p.Rule, tc.rule) {
				t.Fatalf("problem %s; want key %s, value %q and a rule containing %q", p, tc.key, tc.meta[tc.key], tc.rule)
			}
		})
	}
}

// TestParseClaimKeysWithoutClaims: a claim key on a set with no claims
// says so.
func TestParseClaimKeysWithoutClaims(t *testing.T) {
	_, err := Parse(newJob(map[string]string{"statefulset_claim_data_capacity": "1GiB"}))
	if err == nil || !strings.Contains(err.Error(), `statefulset_claim_data_capacity: "1GiB" names the claim "data", and statefulset_volume_claims lists no claims`) {
		t.Fatalf("Parse = %v", err)
	}
}

// TestClaimKeysMakeNoRevision: the claim keys are statefulset_* keys, so
// changing a claim's size or class changes how the set is managed, not its
// template: the revision data, and so the revision, stay the same, and the
// children carry none of the keys.
func TestClaimKeysMakeNoRevision(t *testing.T) {
	base := map[string]string{KeyVolumeClaims: "data,logs", KeyReplicas: "2"}
	plain := newJob(base)
	sized := newJob(base)
	sized.Meta[ClaimCapacityKey("data")] = "10GiB..20GiB"
	sized.Meta[ClaimClassKey("data")] = "fast"
	grown := newJob(base)
	grown.Meta[ClaimCapacityKey("data")] = "40GiB"
	var datas [][]byte
	for _, j := range []*api.Job{plain, sized, grown} {
		data, err := RevisionData(j)
		if err != nil {
			t.Fatal(err)
		}
		datas = append(datas, data)
	}
	if !bytes.Equal(datas[0], datas[1]) || !bytes.Equal(datas[1], datas[2]) {
		t.Fatalf("the claim keys changed the revision data:\n%s\n%s\n%s", datas[0], datas[1], datas[2])
	}
	spec, rev := mustSpecRev(t, sized)
	child, err := RenderChild(spec, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range child.Meta {
		if strings.HasPrefix(k, KeyClaimPrefix) {
			t.Fatalf("the child carries %s", k)
		}
	}
}

func TestFormatCapacity(t *testing.T) {
	for _, tc := range []struct {
		min, max int64
		want     string
	}{
		{10 << 30, 0, "10GiB"},
		{10 << 30, 20 << 30, "10GiB..20GiB"},
		{15e8, 10e9, "1500MB..10GB"},
	} {
		got := FormatCapacity(tc.min, tc.max)
		if got != tc.want {
			t.Errorf("FormatCapacity(%d, %d) = %q, want %q", tc.min, tc.max, got, tc.want)
		}
		if min, max, rule := parseCapacity(got); rule != "" || min != tc.min || max != tc.max {
			t.Errorf("parseCapacity(%q) = %d, %d, %q", got, min, max, rule)
		}
	}
}

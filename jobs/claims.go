package jobs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agext/levenshtein"

	"github.com/nomad-statefulset/nomad-statefulset/internal/bytesize"
	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// The rules of the per-claim keys (DESIGN §3b), as users read them.
const (
	capacityRule = "is not <min> or <min>..<max>, sizes such as 500MiB, 10GiB or 10GiB..20GiB " +
		"(units as Nomad's capacity_min reads them: KiB, MiB, GiB, TiB are binary, KB, MB, GB, TB decimal)"
	// classNameRule is agent/config's rule for the name of a
	// volume_provisioner block, which the value must be.
	classNameRule = "is not a storage class name: a volume_provisioner block's name is a letter, then letters, digits, '-' and '_', at most 63 in all"
	rangeSep      = ".."
)

// className is a storage class: a volume_provisioner block's label, checked
// by the same rule in agent/config (validClass). The agent's own classes
// are not known here; one it lacks is reported on the set by the agent.
var className = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// parseClaimTemplates reads the statefulset_claim_<claim>_capacity and
// _class keys into spec.ClaimTemplates, in the order of spec.VolumeClaims,
// after parseAnnotations has read the claims. A key that names no claim
// of statefulset_volume_claims is a problem with a suggestion, since a
// mistyped claim would silently leave its volumes at the defaults.
func parseClaimTemplates(meta map[string]string, spec *reconciler.Spec, ps *problems) {
	var keys []string
	for k := range meta {
		if strings.HasPrefix(k, KeyClaimPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	sort.Strings(keys)
	byClaim := map[string]*reconciler.ClaimTemplate{}
	for _, k := range keys {
		raw := meta[k]
		v := strings.TrimSpace(raw)
		rest := strings.TrimPrefix(k, KeyClaimPrefix)
		claim, isCapacity := strings.CutSuffix(rest, ClaimCapacitySuffix)
		isClass := false
		if !isCapacity {
			claim, isClass = strings.CutSuffix(rest, ClaimClassSuffix)
		}
		if !isCapacity && !isClass {
			ps.add(k, raw, "is not a claim key: a claim's keys are "+ClaimCapacityKey("<claim>")+" and "+ClaimClassKey("<claim>")+
				suggestKey(k, spec.VolumeClaims))
			continue
		}
		if !containsString(spec.VolumeClaims, claim) {
			ps.add(k, raw, unknownClaimRule(k, claim, spec.VolumeClaims))
			continue
		}
		t := byClaim[claim]
		if t == nil {
			t = &reconciler.ClaimTemplate{Claim: claim}
		}
		if isCapacity {
			lo, hi, rule := parseCapacity(v)
			if rule != "" {
				ps.add(k, raw, rule)
				continue
			}
			t.CapacityMin, t.CapacityMax = lo, hi
		} else {
			if !className.MatchString(v) || v == "plugin" || v == "config" {
				rule := classNameRule
				if v == "" {
					rule = "is empty: name a volume_provisioner block of the agent, or leave the key out for the default class"
				}
				ps.add(k, raw, rule)
				continue
			}
			t.Class = v
		}
		byClaim[claim] = t
	}
	for _, c := range spec.VolumeClaims {
		if t := byClaim[c]; t != nil {
			spec.ClaimTemplates = append(spec.ClaimTemplates, *t)
		}
	}
}

// parseCapacity reads "<min>" or "<min>..<max>". It returns the rule the
// value breaks, or "".
func parseCapacity(v string) (lo, hi int64, rule string) {
	if strings.Contains(v, "...") {
		// "10GiB...20GiB" would read as 10GiB..0.2GiB.
		return 0, 0, capacityRule + suggestCapacity(v)
	}
	loText, hiText, isRange := strings.Cut(v, rangeSep)
	lo, err := bytesize.Parse(strings.TrimSpace(loText))
	if err == nil && isRange {
		hi, err = bytesize.Parse(strings.TrimSpace(hiText))
	}
	switch {
	case err != nil:
		return 0, 0, capacityRule + suggestCapacity(v)
	case lo == 0:
		return 0, 0, "has a minimum of 0 bytes: a claim asks for more, or leaves the key out for its provisioner's default"
	case isRange && hi < lo:
		return 0, 0, fmt.Sprintf("has its minimum %s above its maximum %s", bytesize.Format(lo), bytesize.Format(hi))
	}
	return lo, hi, ""
}

// sizeUnits are the units suggestions are made in; Parse takes more
// spellings (any case, "Gi", "G").
var sizeUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "KB", "MB", "GB", "TB", "PB"}

// sizeShape splits a written size into its number and its unit, loosely.
var sizeShape = regexp.MustCompile(`^\s*([0-9][0-9.,]*)\s*([A-Za-z]*)\s*$`)

// suggestCapacity proposes the capacity the user probably meant: the
// units near what was written ("10GIBs", "10 gigs"), and ".." between two
// sizes written with another separator ("10GiB-20GiB", "10GiB to 20GiB").
func suggestCapacity(v string) string {
	// Commas are not among them: a size may group its digits with them.
	for _, sep := range []string{"...", " to ", "-", ":", "~"} {
		if lo, hi, ok := strings.Cut(v, sep); ok {
			l, lok := fixSize(lo)
			h, hok := fixSize(hi)
			if lok && hok {
				return fmt.Sprintf(" (did you mean %q?)", l+rangeSep+h)
			}
		}
	}
	var parts []string
	for _, p := range strings.SplitN(v, rangeSep, 2) {
		f, ok := fixSize(p)
		if !ok {
			return ""
		}
		parts = append(parts, f)
	}
	if s := strings.Join(parts, rangeSep); s != v {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// fixSize returns s with its unit replaced by the nearest known one, and
// whether the result is a size. The suggestion keeps the magnitude the
// user wrote: a unit is only proposed when it begins with the same letter
// as the written one (K, M, G, T, P, or B for bytes), since "10XB" could
// mean any of 10KB to 10PB, and proposing "10B" for it would be a guess a
// billion times off. A swap of letters ("Gbi" for "GiB") is nearer than
// any other edit; two units equally near are no suggestion at all.
func fixSize(s string) (string, bool) {
	if _, err := bytesize.Parse(strings.TrimSpace(s)); err == nil {
		return strings.TrimSpace(s), true
	}
	m := sizeShape.FindStringSubmatch(s)
	if m == nil || m[2] == "" {
		return "", false
	}
	written := strings.ToLower(m[2])
	// Scores are twice the edit distance, so that a swap (1) beats any
	// single edit (2).
	best, bestScore, tied := "", 2*nearTypoDistance+1, false
	for _, u := range sizeUnits {
		unit := strings.ToLower(u)
		if unit[0] != written[0] {
			continue
		}
		score := 2 * levenshtein.Distance(written, unit, nil)
		if sameLetters(written, unit) {
			score = min(score, 1)
		}
		switch {
		case score < bestScore:
			best, bestScore, tied = u, score, false
		case score == bestScore:
			tied = true
		}
	}
	if best == "" || tied {
		return "", false
	}
	fixed := m[1] + best
	if _, err := bytesize.Parse(fixed); err != nil {
		return "", false
	}
	return fixed, true
}

// sameLetters reports whether a and b have the same letters, any case, in
// any order.
func sameLetters(a, b string) bool {
	x, y := []byte(strings.ToLower(a)), []byte(strings.ToLower(b))
	sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	sort.Slice(y, func(i, j int) bool { return y[i] < y[j] })
	return string(x) == string(y)
}

// unknownClaimRule is the rule of a claim key whose claim is not one of
// the set's, with the key the user probably meant.
func unknownClaimRule(key, claim string, claims []string) string {
	if len(claims) == 0 {
		return fmt.Sprintf("names the claim %q, and %s lists no claims", claim, KeyVolumeClaims)
	}
	return fmt.Sprintf("names the claim %q, which is not in %s (its claims: %s)", claim, KeyVolumeClaims, quoteList(claims)) +
		suggestKey(key, claims)
}

// suggestKey proposes the claim key nearest to key among those of claims.
func suggestKey(key string, claims []string) string {
	var candidates []string
	for _, c := range claims {
		candidates = append(candidates, ClaimCapacityKey(c), ClaimClassKey(c))
	}
	return closest(key, candidates)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FormatCapacity writes a claim's capacity as statefulset_claim_<claim>
// _capacity takes it: "10GiB", or "10GiB..20GiB" with a maximum.
func FormatCapacity(minBytes, maxBytes int64) string {
	if maxBytes == 0 {
		return bytesize.Format(minBytes)
	}
	return bytesize.Format(minBytes) + rangeSep + bytesize.Format(maxBytes)
}

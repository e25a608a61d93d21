package client

import (
	"strconv"

	"github.com/nomad-statefulset/nomad-statefulset/reconciler"
)

// SpecOf renders a parsed set spec in the API's shape. The agent serves it
// in /v1/statefulset/…, and `validate -json` prints it, so both read alike.
func SpecOf(s reconciler.Spec) Spec {
	mu := strconv.Itoa(s.MaxUnavailable.Value)
	if s.MaxUnavailable.Percent {
		mu += "%"
	}
	var claims []ClaimSpec
	for _, c := range s.ClaimTemplates {
		claims = append(claims, ClaimSpec{Claim: c.Claim, CapacityMin: c.CapacityMin, CapacityMax: c.CapacityMax, Class: c.Class})
	}
	execTimeout := ""
	if s.ExecTimeout > 0 {
		execTimeout = s.ExecTimeout.String()
	}
	return Spec{
		Replicas:             s.Replicas,
		OrdinalsStart:        s.OrdinalsStart,
		PodManagementPolicy:  string(s.PodManagementPolicy),
		UpdateStrategy:       string(s.UpdateStrategy),
		Partition:            s.Partition,
		MaxUnavailable:       mu,
		MinReadySeconds:      s.MinReadySeconds,
		RevisionHistoryLimit: s.RevisionHistoryLimit,
		VolumeClaims:         append([]string{}, s.VolumeClaims...),
		WhenDeleted:          string(s.WhenDeleted),
		WhenScaled:           string(s.WhenScaled),
		Paused:               s.Paused,
		ProgressDeadline:     s.ProgressDeadline.String(),
		Claims:               claims,
		Spread:               s.Spread,
		SpreadRequired:       s.SpreadRequired,
		LeaderCheck:          s.LeaderCheck,
		LeaderUpdate:         string(s.LeaderUpdate),
		SwitchoverCommand:    s.SwitchoverCommand,
		DisruptionCheck:      s.DisruptionCheck,
		ExecTask:             s.ExecTask,
		ExecTimeout:          execTimeout,
		MaintenanceWindow:    s.MaintenanceWindows.String(),
	}
}

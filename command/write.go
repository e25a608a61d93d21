package command

import (
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// mutateFunc changes the parent job in place. It returns whether anything
// changed (nothing is written when not), a sentence saying what was done or
// why nothing was, and an error to refuse the change.
type mutateFunc func(job *api.Job) (changed bool, message string, err error)

// writeResult is the -json output of every write command.
type writeResult struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Action    string `json:"action"`
	// Changed is false when the job already was as asked and nothing was written.
	Changed bool   `json:"changed"`
	Message string `json:"message"`
	// ReadJobModifyIndex is the index the check-and-set was made against.
	ReadJobModifyIndex uint64 `json:"read_job_modify_index"`
	// JobModifyIndex is the parent's index after the write.
	JobModifyIndex uint64   `json:"job_modify_index,omitempty"`
	EvalID         string   `json:"eval_id,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
}

// updateParent is every write: read the parent job from Nomad, change it
// with mutate, and re-register it only if its JobModifyIndex is still the
// one read (EnforceRegister). A lost race exits ExitConflict and leaves the
// job as the other writer made it, so nothing is silently overwritten.
func (m *Meta) updateParent(action, name string, mutate mutateFunc) int {
	nc, err := m.NomadClient()
	if err != nil {
		return m.report(err)
	}
	ns := m.Namespace()
	addr := m.NomadConfig().Address
	job, _, err := nc.Jobs().Info(name, &api.QueryOptions{Namespace: ns})
	if err != nil {
		err = nomadError(addr, fmt.Sprintf("reading job %q in namespace %q", name, ns), err)
		return m.report(err)
	}
	if err := checkParent(job, ns, name); err != nil {
		return m.report(err)
	}
	readIndex := derefU64(job.JobModifyIndex)

	changed, msg, err := mutate(job)
	if err != nil {
		return m.report(err)
	}
	res := writeResult{Namespace: ns, Name: name, Action: action, Changed: changed, Message: msg, ReadJobModifyIndex: readIndex}
	if !changed {
		return m.writeOutput(res)
	}

	resp, _, err := nc.Jobs().EnforceRegister(job, readIndex, &api.WriteOptions{Namespace: ns})
	if err != nil {
		err = nomadError(addr, fmt.Sprintf("registering job %q (check-and-set on job modify index %d)", name, readIndex), err)
		return m.report(err)
	}
	res.JobModifyIndex = resp.JobModifyIndex
	res.EvalID = resp.EvalID
	if w := strings.TrimSpace(resp.Warnings); w != "" {
		res.Warnings = strings.Split(w, "\n")
	}
	return m.writeOutput(res)
}

// writeOutput prints a write's result as text or JSON. Nomad's warnings go
// to stderr in text mode so stdout stays the result alone.
func (m *Meta) writeOutput(res writeResult) int {
	if m.JSON() {
		return m.outputJSON(res)
	}
	m.UI.Output(res.Message)
	if res.Changed {
		m.UI.Output(fmt.Sprintf("Job %q re-registered: job modify index %d -> %d, evaluation %s",
			res.Name, res.ReadJobModifyIndex, res.JobModifyIndex, orDash(res.EvalID)))
	}
	for _, w := range res.Warnings {
		m.UI.Warn("Warning from Nomad: " + w)
	}
	return ExitOK
}

// checkParent refuses to write to a job that is not a statefulset parent,
// or that is stopped: re-registering a stopped job would start it again,
// undoing someone's `nomad job stop`.
func checkParent(job *api.Job, ns, name string) error {
	if !jobs.IsManaged(job) {
		return fmt.Errorf("job %q in namespace %q is not a statefulset: its meta %s is %q, not \"true\"", name, ns, jobs.KeyManaged, job.Meta[jobs.KeyManaged])
	}
	if job.Stop != nil && *job.Stop {
		return fmt.Errorf("job %q in namespace %q is stopped; run it again with `nomad job run` before changing it", name, ns)
	}
	if len(job.TaskGroups) != 1 {
		return fmt.Errorf("job %q in namespace %q has %d task groups; a statefulset parent has exactly one", name, ns, len(job.TaskGroups))
	}
	return nil
}

// isPaused reads statefulset_paused as jobs.Parse, and so the agent, does:
// surrounding space is ignored. Reading it any other way would let a
// restart through on a set the agent holds paused.
func isPaused(job *api.Job) bool {
	return strings.TrimSpace(job.Meta[jobs.KeyPaused]) == "true"
}

// derefU64 reads an optional api field.
func derefU64(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

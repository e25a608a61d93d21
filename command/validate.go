package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// ValidateCommand is `nomad-statefulset validate <jobfile>`.
type ValidateCommand struct {
	Meta
	// Stdin is read for the job file "-"; nil means os.Stdin.
	Stdin io.Reader
}

// Synopsis implements cli.Command.
func (c *ValidateCommand) Synopsis() string {
	return "Check an annotated job file before running it"
}

// Help implements cli.Command.
func (c *ValidateCommand) Help() string {
	return strings.TrimSpace(`
Usage: nomad-statefulset validate [options] <jobfile>

  Checks a job file against the statefulset rules, with the very code the
  agent uses: the statefulset_* annotations must parse, the job must be a
  service job with exactly one task group whose count is 0, the job ID must
  make valid pod names, and every volume claim must be a host volume of the
  group. Every problem is printed with its key, its value and the rule it
  breaks, so a job can be fixed in one round.

  An HCL job file is parsed by Nomad's parse API (/v1/jobs/parse), exactly
  as 'nomad job run' would see it, so Nomad must be reachable; if it is not,
  the command says so and exits 5. A JSON job file (as written by
  'nomad job inspect', or 'nomad job run -output') is read without Nomad.
  Use "-" to read the job from standard input: HCL read so needs Nomad as
  a file does, JSON does not.

  Exits 0 if the job is a valid statefulset, 1 if not.

Examples:

  $ nomad-statefulset validate web.nomad.hcl
  $ nomad job inspect web | nomad-statefulset validate -
  $ nomad-statefulset validate -json web.nomad.hcl | jq -r '.problems[].key'

` + commonOptionsHelp + nomadOptionsHelp + `
Validate Options:

  -var-file=<path>
    An HCL2 variables file for the job. May be given more than once.
` + exitCodesHelp)
}

// validateProblem is one broken rule in the -json output.
type validateProblem struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Rule  string `json:"rule"`
}

// validateOutput is the -json output of validate.
type validateOutput struct {
	File      string            `json:"file"`
	Namespace string            `json:"namespace"`
	Job       string            `json:"job"`
	Valid     bool              `json:"valid"`
	Problems  []validateProblem `json:"problems"`
	// Spec is the set spec as the agent would understand it; only when Valid.
	Spec *client.Spec `json:"spec,omitempty"`
}

// stringList is a repeatable string flag.
type stringList []string

// String implements flag.Value.
func (s *stringList) String() string { return strings.Join(*s, ",") }

// Set implements flag.Value.
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// Run implements cli.Command.
func (c *ValidateCommand) Run(args []string) int {
	var varFiles stringList
	f := c.FlagSet("validate", FlagSetCommon|FlagSetNomad)
	f.Var(&varFiles, "var-file", "")
	pos, code, ok := c.parse("validate", f, args, 1, 1, "nomad-statefulset validate [options] <jobfile>")
	if !ok {
		return code
	}
	path := pos[0]
	src, err := c.readJobFile(path)
	if err != nil {
		return c.report(err)
	}
	var vars strings.Builder
	for _, vf := range varFiles {
		b, err := os.ReadFile(vf)
		if err != nil {
			return c.report(fmt.Errorf("reading variables file: %w", err))
		}
		vars.Write(b)
		vars.WriteString("\n")
	}

	job, err := c.decodeJob(src, vars.String())
	if err != nil {
		return c.report(fmt.Errorf("%s: %w", displayPath(path), err))
	}

	// A job file without a namespace is run in the CLI's namespace, as
	// `nomad job run` does; validate it there.
	if job.Namespace == nil || *job.Namespace == "" {
		ns := c.Namespace()
		job.Namespace = &ns
	}
	out := validateOutput{File: displayPath(path), Namespace: strOrDefault(job.Namespace, "default"), Job: strOrDefault(job.ID, ""), Problems: []validateProblem{}}
	spec, err := jobs.Parse(job)
	var verr *jobs.ValidationError
	switch {
	case err == nil:
		out.Valid = true
		s := client.SpecOf(spec)
		out.Spec = &s
	case errors.As(err, &verr):
		for _, p := range verr.Problems {
			out.Problems = append(out.Problems, validateProblem{Key: p.Key, Value: p.Value, Rule: p.Rule})
		}
	case errors.Is(err, jobs.ErrNotManaged):
		rule := `is not "true": the job is not managed by nomad-statefulset (set meta statefulset = "true"); ` +
			`run as it is, it detaches a running set of its name: nothing of that set is changed, stopped or deleted until the job says "true" again`
		if jobs.LooksMeantToBeManaged(job) {
			rule = `is not "true" (did you mean "true"? the value is exact): ` +
				`run as it is, this job detaches a running set of its name: nothing of that set is changed, stopped or deleted until the job says statefulset = "true"`
		}
		out.Problems = append(out.Problems, validateProblem{Key: jobs.KeyManaged, Value: job.Meta[jobs.KeyManaged], Rule: rule})
	default:
		return c.report(fmt.Errorf("%s: %w", displayPath(path), err))
	}

	if c.JSON() {
		if code := c.outputJSON(out); code != ExitOK {
			return code
		}
	} else {
		c.UI.Output(formatValidate(out))
	}
	if !out.Valid {
		return ExitError
	}
	return ExitOK
}

// readJobFile reads the job file, or standard input for "-".
func (c *ValidateCommand) readJobFile(path string) ([]byte, error) {
	if path == "-" {
		r := c.Stdin
		if r == nil {
			r = os.Stdin
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("reading the job from standard input: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading job file: %w", err)
	}
	return b, nil
}

// decodeJob turns the file into a job: JSON locally, HCL through Nomad's
// parse API (Nomad's HCL dialect, functions and variables are Nomad's own,
// so only Nomad parses it faithfully).
func (c *ValidateCommand) decodeJob(src []byte, vars string) (*api.Job, error) {
	if trimmed := bytes.TrimSpace(src); len(trimmed) > 0 && trimmed[0] == '{' {
		return decodeJSONJob(trimmed)
	}
	nc, err := c.NomadClient()
	if err != nil {
		return nil, err
	}
	addr := c.NomadConfig().Address
	job, err := nc.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars})
	if err != nil {
		err = nomadError(addr, "parsing the HCL job file with Nomad's parse API", err)
		var down *NomadUnreachableError
		if errors.As(err, &down) {
			return nil, fmt.Errorf("%w (validate needs Nomad to parse HCL job files; JSON job files are checked without it)", err)
		}
		var ue api.UnexpectedResponseError
		if errors.As(err, &ue) && ue.StatusCode() < 500 {
			return nil, fmt.Errorf("the job file does not parse: %s", strings.TrimSpace(ue.Body()))
		}
		return nil, err
	}
	return job, nil
}

// decodeJSONJob reads a JSON job: either a bare job, or wrapped as
// {"Job": {...}} the way the register API and 'nomad job run -output' write it.
func decodeJSONJob(b []byte) (*api.Job, error) {
	var wrapped struct {
		Job *api.Job `json:"Job"`
	}
	if err := json.Unmarshal(b, &wrapped); err != nil {
		return nil, fmt.Errorf("the JSON job file does not parse: %w", err)
	}
	if wrapped.Job != nil {
		return wrapped.Job, nil
	}
	var job api.Job
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, fmt.Errorf("the JSON job file does not parse: %w", err)
	}
	return &job, nil
}

// formatValidate renders the result for people.
func formatValidate(out validateOutput) string {
	var b strings.Builder
	if !out.Valid {
		fmt.Fprintf(&b, "Job %q in %s is not a valid statefulset: %d problem(s)\n", out.Job, out.File, len(out.Problems))
		for _, p := range out.Problems {
			// As the InvalidSpec condition, the log and status show it.
			fmt.Fprintf(&b, "  - %s\n", jobs.Problem{Key: p.Key, Value: p.Value, Rule: p.Rule})
		}
		return strings.TrimRight(b.String(), "\n")
	}
	s := out.Spec
	fmt.Fprintf(&b, "Job %q in %s is a valid statefulset\n\n", out.Job, out.File)
	strategy := strategyLine(s.UpdateStrategy, s.Partition, s.MaxUnavailable)
	b.WriteString(formatKV(append([][2]string{
		{"Namespace", out.Namespace},
		{"Replicas", strconv.Itoa(s.Replicas)},
		{"Ordinals Start", strconv.Itoa(s.OrdinalsStart)},
		{"Pod Management", s.PodManagementPolicy},
		{"Update Strategy", strategy},
		{"Min Ready Seconds", strconv.Itoa(s.MinReadySeconds)},
		{"History Limit", strconv.Itoa(s.RevisionHistoryLimit)},
		{"Volume Claims", orDash(strings.Join(s.VolumeClaims, ","))},
		{"Volume Retention", fmt.Sprintf("when deleted: %s, when scaled: %s", s.WhenDeleted, s.WhenScaled)},
		{"Paused", strconv.FormatBool(s.Paused)},
		{"Progress Deadline", s.ProgressDeadline},
	}, specDetailPairs(*s)...)))
	return b.String()
}

// displayPath names the job source in messages.
func displayPath(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// strOrDefault reads an optional api string.
func strOrDefault(p *string, def string) string {
	if p == nil || *p == "" {
		return def
	}
	return *p
}

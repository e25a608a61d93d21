package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-statefulset/nomad-statefulset/client"
	"github.com/nomad-statefulset/nomad-statefulset/jobs"
)

// An upgrade of the daemon restarts nothing (DESIGN §2). A child that an
// earlier release rendered differently, and recorded as it registered it,
// is registered through real Nomad (here: one task meta key this release
// does not render); the daemon leaves it running, shows it as carrying an
// older rendering, and never registers it again. A hand edit of the same
// child (its record left as it was) is still found, named and replaced.
func TestUpgradeRestartsNothing(t *testing.T) {
	c := NewCluster(t)
	d := c.StartDaemon()
	const set = "up"
	RegisterHCL(t, c.Nomad.Client, setSpec{name: set, noVolume: true, meta: map[string]string{"statefulset_replicas": "2"}}.hcl())
	waitConverged(t, c, d, set, 2, nil)

	child := set + "-1"
	job, _, err := c.Nomad.Client.Jobs().Info(child, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Meta[jobs.MetaRendered] == "" {
		t.Fatalf("%s carries no %s: the daemon did not record what it registered", child, jobs.MetaRendered)
	}
	// As an earlier release would have rendered and registered it.
	task := job.TaskGroups[0].Tasks[0]
	if task.Meta == nil {
		task.Meta = map[string]string{}
	}
	task.Meta["rendered_by"] = "an earlier release"
	if _, err := jobs.RecordRendering(job); err != nil {
		t.Fatal(err)
	}
	resp, _, err := c.Nomad.Client.Jobs().EnforceRegister(job, *job.JobModifyIndex, nil)
	if err != nil {
		t.Fatalf("registering %s as an earlier release: %v", child, err)
	}
	WaitJobHealthy(t, c.Nomad.Client, "default", child, time.Minute)
	registered := resp.JobModifyIndex
	Eventually(t, time.Minute, "the daemon to show the older rendering", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if p, ok := podNamed(st, child); !ok || !p.OlderRendering {
			return fmt.Errorf("pods %+v", st.Pods)
		}
		return nil
	})
	time.Sleep(10 * time.Second) // a daemon that would replace it has had time to
	job, _, err = c.Nomad.Client.Jobs().Info(child, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *job.JobModifyIndex != registered || job.Stop != nil && *job.Stop {
		t.Fatalf("the daemon re-registered or stopped %s: JobModifyIndex %d, registered at %d", child, *job.JobModifyIndex, registered)
	}
	st, err := setStatus(d, set)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Events {
		if e.Type == "Edited" || strings.Contains(e.Message, child) && e.Type == "DeletePod" {
			t.Fatalf("the older rendering was taken for an edit: %+v", e)
		}
	}

	// A hand edit: the record still says what was registered.
	job.TaskGroups[0].Tasks[0].Env["DEBUG"] = "1"
	if _, _, err := c.Nomad.Client.Jobs().EnforceRegister(job, *job.JobModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	Eventually(t, convergeTimeout, "the hand edit to be named and repaired", func() error {
		st, err := setStatus(d, set)
		if err != nil {
			return err
		}
		if len(eventsOf(st, "Edited", child, "Group.Tasks[app].Env")) == 0 {
			return fmt.Errorf("no Edited event naming the env: %+v", st.Events)
		}
		j, _, err := c.Nomad.Client.Jobs().Info(child, nil)
		if err != nil {
			return err
		}
		if j.TaskGroups[0].Tasks[0].Env["DEBUG"] != "" {
			return fmt.Errorf("%s still carries the edit", child)
		}
		return nil
	})
	waitConverged(t, c, d, set, 2, nil)
}

// podNamed returns st's pod of that name.
func podNamed(st client.SetDetail, name string) (client.Pod, bool) {
	for _, p := range st.Pods {
		if p.Name == name {
			return p, true
		}
	}
	return client.Pod{}, false
}

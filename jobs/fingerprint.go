package jobs

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// CompactChild returns a copy of a child job read from Nomad that keeps only
// what ChildMatches and ParseChild read, and what an observation of the pod
// needs: identity, the statefulset meta, status, stop flag, version and
// indexes, submit time, and per group its count, host volume sources,
// disconnect, reschedule and update settings, service tags and the identity
// env of each task. A watcher that caches every child of every set keeps
// this instead of the whole job: a canonicalized child is some 10 KB of
// decoded structs, its compact form a tenth of that, and drift detection
// gives the same answer on both (TestCompactChildKeepsDrift proves it field
// by field). It is kept next to ChildMatches so that a new check there
// comes with the field it needs here. CompactChild(nil) is nil.
func CompactChild(j *api.Job) *api.Job {
	if j == nil {
		return nil
	}
	out := &api.Job{
		ID: j.ID, Namespace: j.Namespace, Stop: j.Stop, Status: j.Status,
		Version: j.Version, SubmitTime: j.SubmitTime, Stable: j.Stable,
		CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex, JobModifyIndex: j.JobModifyIndex,
	}
	if j.Meta != nil {
		out.Meta = make(map[string]string, 4)
		for k, v := range j.Meta {
			// The managed flag and every statefulset_* key: the identity
			// keys above plus the parent's annotations, which the cache
			// uses to tell parents from children.
			if strings.HasPrefix(k, KeyManaged) {
				out.Meta[k] = v
			}
		}
	}
	if j.TaskGroups != nil {
		out.TaskGroups = make([]*api.TaskGroup, len(j.TaskGroups))
		for i, g := range j.TaskGroups {
			out.TaskGroups[i] = compactGroup(g)
		}
	}
	return out
}

func compactGroup(g *api.TaskGroup) *api.TaskGroup {
	if g == nil {
		return nil
	}
	out := &api.TaskGroup{Name: g.Name, Count: g.Count, Services: compactServices(g.Services)}
	if g.Volumes != nil {
		out.Volumes = make(map[string]*api.VolumeRequest, len(g.Volumes))
		for k, v := range g.Volumes {
			if v == nil {
				out.Volumes[k] = nil
				continue
			}
			out.Volumes[k] = &api.VolumeRequest{Name: v.Name, Type: v.Type, Source: v.Source}
		}
	}
	if d := g.Disconnect; d != nil {
		out.Disconnect = &api.DisconnectStrategy{Replace: d.Replace, StopOnClientAfter: d.StopOnClientAfter}
	}
	if r := g.ReschedulePolicy; r != nil {
		out.ReschedulePolicy = &api.ReschedulePolicy{Attempts: r.Attempts, Unlimited: r.Unlimited}
	}
	if u := g.Update; u != nil {
		out.Update = &api.UpdateStrategy{Canary: u.Canary, MaxParallel: u.MaxParallel}
	}
	if g.Tasks != nil {
		out.Tasks = make([]*api.Task, len(g.Tasks))
		for i, t := range g.Tasks {
			if t == nil {
				continue
			}
			ct := &api.Task{Name: t.Name, Services: compactServices(t.Services)}
			for _, k := range [...]string{EnvName, EnvOrdinal, EnvPodName} {
				if v, ok := t.Env[k]; ok {
					if ct.Env == nil {
						ct.Env = make(map[string]string, 3)
					}
					ct.Env[k] = v
				}
			}
			out.Tasks[i] = ct
		}
	}
	return out
}

// compactServices keeps each service's tags, where ChildMatches looks for
// the pod name.
func compactServices(ss []*api.Service) []*api.Service {
	if ss == nil {
		return nil
	}
	out := make([]*api.Service, len(ss))
	for i, s := range ss {
		if s != nil {
			out[i] = &api.Service{Name: s.Name, Tags: s.Tags}
		}
	}
	return out
}

// DecodeCompactChild decodes a job's JSON (an event payload, as Nomad sent
// it) straight into its compact form: CompactChild(job) without building
// the whole job first. It is what a watcher does with every job event, and
// skipping the fields the compact form drops makes it several times faster
// than decoding an api.Job. The types below mirror api.Job's field names,
// so the decoding is as faithful as api.Job's own for the fields kept
// (TestDecodeCompactChildMatches proves it field by field).
func DecodeCompactChild(data []byte) (*api.Job, error) {
	var j compactJobJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("decoding a child job: %w", err)
	}
	out := &api.Job{
		ID: j.ID, Namespace: j.Namespace, Stop: j.Stop, Status: j.Status,
		Version: j.Version, SubmitTime: j.SubmitTime, Stable: j.Stable,
		CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex, JobModifyIndex: j.JobModifyIndex,
		Meta: j.Meta,
	}
	if j.TaskGroups != nil {
		out.TaskGroups = make([]*api.TaskGroup, len(j.TaskGroups))
		for i, g := range j.TaskGroups {
			if g == nil {
				continue
			}
			tg := &api.TaskGroup{
				Name: g.Name, Count: g.Count, Volumes: g.Volumes, Disconnect: g.Disconnect,
				ReschedulePolicy: g.ReschedulePolicy, Update: g.Update, Services: services(g.Services),
			}
			if g.Tasks != nil {
				tg.Tasks = make([]*api.Task, len(g.Tasks))
				for k, t := range g.Tasks {
					if t != nil {
						tg.Tasks[k] = &api.Task{Name: t.Name, Env: t.Env, Services: services(t.Services)}
					}
				}
			}
			out.TaskGroups[i] = tg
		}
	}
	// The same trimming as for a decoded job: what is kept is defined once.
	return CompactChild(out), nil
}

// compactJobJSON is the part of api.Job that CompactChild keeps, by the
// same field names.
type compactJobJSON struct {
	ID, Namespace, Status                             *string
	Stop, Stable                                      *bool
	Version, CreateIndex, ModifyIndex, JobModifyIndex *uint64
	SubmitTime                                        *int64
	Meta                                              map[string]string
	TaskGroups                                        []*compactGroupJSON
}

type compactGroupJSON struct {
	Name             *string
	Count            *int
	Volumes          map[string]*api.VolumeRequest
	Disconnect       *api.DisconnectStrategy
	ReschedulePolicy *api.ReschedulePolicy
	Update           *api.UpdateStrategy
	Services         []*compactServiceJSON
	Tasks            []*compactTaskJSON
}

type compactTaskJSON struct {
	Name     string
	Env      map[string]string
	Services []*compactServiceJSON
}

type compactServiceJSON struct {
	Name string
	Tags []string
}

func services(in []*compactServiceJSON) []*api.Service {
	if in == nil {
		return nil
	}
	out := make([]*api.Service, len(in))
	for i, s := range in {
		if s != nil {
			out[i] = &api.Service{Name: s.Name, Tags: s.Tags}
		}
	}
	return out
}

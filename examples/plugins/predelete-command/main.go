// Command predelete-command is an example external lifecycle-hook plugin for
// nomad-statefulset: before a pod is deleted, it runs a command or calls an
// HTTP endpoint, and lets the deletion go ahead only once that succeeds.
// Until then it answers "wait", so the agent holds that one pod's deletion
// and asks again later; other pods and sets carry on. It does the same for
// every event its hook block lists: after a pod became ready (post_ready,
// "has the new member caught up?") or before it is updated (pre_update).
//
// Take it as a starting point: the shape (a struct implementing
// plugin.LifecycleHook, plugin.Serve in main, config checked in SetConfig,
// every call idempotent and bounded by its context) is what matters.
//
// Config (the plugin block's config map):
//
//	command      a shell command, run with /bin/sh -c; the pod is in the
//	             environment as NSS_NAMESPACE, NSS_SET, NSS_ORDINAL, NSS_POD,
//	             NSS_REVISION, NSS_ALLOC_ID, NSS_NODE_ID, and the event as
//	             NSS_EVENT (pre_delete, post_ready or pre_update). Exit 0 is
//	             done.
//	url          instead of command: the pod is POSTed there as JSON, with
//	             the event in the X-NSS-Event header; a 2xx answer is done.
//	retry_after  how long the agent should wait before asking again after a
//	             failure (default 10s).
//	on_failure   what a failing command or endpoint answers: "wait" (the
//	             default: hold the step and ask again) or "fail" (the hook
//	             block's failure_policy decides: block holds, ignore skips).
//
// See docs/plugins.md for how to build, install and configure it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/plugin"
)

// Name is the plugin's name. The agent's launch check requires the binary in
// plugin_dir to be called this (or a plugin block's driver to say so).
const Name = "predelete-command"

// defaultRetryAfter is the suggested pause after a failed attempt: long
// enough not to hammer a struggling service, short enough that a scale-down
// resumes soon after it recovers.
const defaultRetryAfter = 10 * time.Second

// maxOutput is how much of a failing command's output goes into the message,
// which ends up in the agent's log and the set's conditions.
const maxOutput = 512

func main() {
	plugin.Serve(func(log hclog.Logger) plugin.Base { return &hook{log: log.Named(Name)} })
}

// settings is the parsed config.
type settings struct {
	command    string
	url        string
	retryAfter time.Duration
	// fail makes a failed check a fail answer instead of a wait.
	fail bool
}

// hook implements plugin.LifecycleHook.
type hook struct {
	log    hclog.Logger
	mu     sync.RWMutex
	conf   *settings
	client http.Client
}

// PluginInfo implements plugin.Base.
func (h *hook) PluginInfo(context.Context) (*plugin.Info, error) {
	return &plugin.Info{Name: Name, Type: plugin.TypeLifecycleHook}, nil
}

// SetConfig implements plugin.Base. It is called at launch, after a restart
// and on every agent reload, so it replaces the whole config.
func (h *hook) SetConfig(_ context.Context, config map[string]string) error {
	s := &settings{command: config["command"], url: config["url"], retryAfter: defaultRetryAfter}
	for k := range config {
		switch k {
		case "command", "url", "retry_after", "on_failure":
		default:
			return fmt.Errorf("unknown config key %q (known: command, url, retry_after, on_failure)", k)
		}
	}
	switch v := config["on_failure"]; v {
	case "", "wait":
	case "fail":
		s.fail = true
	default:
		return fmt.Errorf("on_failure %q is neither \"wait\" nor \"fail\"", v)
	}
	if (s.command == "") == (s.url == "") {
		return errors.New("set exactly one of command and url")
	}
	if v := config["retry_after"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("retry_after %q is not a positive duration", v)
		}
		s.retryAfter = d
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conf = s
	return nil
}

// PreDelete implements plugin.LifecycleHook: done once the command or the
// endpoint succeeds, wait while it fails. By default a failure is a wait,
// not a fail, because the point is to hold the deletion until the replica
// has been decommissioned; the hook's timeout and failure_policy still apply
// if the command hangs, and to every failure with on_failure = "fail".
func (h *hook) PreDelete(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.check(ctx, plugin.EventPreDelete, pod)
}

// PostReady implements plugin.LifecycleHook: the same check, after a pod
// became ready. Until it passes the pod does not count as ready, so an
// OrderedReady set does not start the next ordinal.
func (h *hook) PostReady(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.check(ctx, plugin.EventPostReady, pod)
}

// PreUpdate implements plugin.LifecycleHook: the same check, before a pod is
// replaced by a new revision.
func (h *hook) PreUpdate(ctx context.Context, pod plugin.Pod) (*plugin.HookResponse, error) {
	return h.check(ctx, plugin.EventPreUpdate, pod)
}

// check runs the command or calls the endpoint for one event of one pod.
// The agent calls only the events the hook block lists.
func (h *hook) check(ctx context.Context, event plugin.Event, pod plugin.Pod) (*plugin.HookResponse, error) {
	h.mu.RLock()
	s := h.conf
	h.mu.RUnlock()
	if s == nil {
		return nil, errors.New("the plugin has no config")
	}
	var err error
	if s.command != "" {
		err = runCommand(ctx, s.command, event, pod)
	} else {
		err = h.post(ctx, s.url, event, pod)
	}
	if err != nil && s.fail {
		h.log.Info("check failed; answering fail", "event", event, "pod", pod.Name, "error", err)
		return &plugin.HookResponse{Status: plugin.HookFail, RetryAfter: s.retryAfter, Message: err.Error()}, nil
	}
	if err != nil {
		h.log.Info("check failed; the pod waits", "event", event, "pod", pod.Name, "error", err)
		return plugin.Wait(s.retryAfter, "%v", err), nil
	}
	h.log.Info("check passed", "event", event, "pod", pod.Name)
	return plugin.Done(), nil
}

// runCommand runs the command for pod; ctx carries the hook's timeout and
// kills the command when it expires.
func runCommand(ctx context.Context, command string, event plugin.Event, pod plugin.Pod) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(),
		"NSS_EVENT="+string(event),
		"NSS_NAMESPACE="+pod.Namespace,
		"NSS_SET="+pod.Set,
		"NSS_ORDINAL="+strconv.Itoa(pod.Ordinal),
		"NSS_POD="+pod.Name,
		"NSS_REVISION="+pod.Revision,
		"NSS_ALLOC_ID="+pod.AllocID,
		"NSS_NODE_ID="+pod.NodeID,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("running %q: %w: %s", command, err, tail(out))
	}
	return nil
}

// post sends pod to url as JSON, naming the event in a header.
func (h *hook) post(ctx context.Context, url string, event plugin.Event, pod plugin.Pod) error {
	body, err := json.Marshal(pod)
	if err != nil {
		return fmt.Errorf("encoding the pod: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request to %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-NSS-Event", string(event))
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s: %w", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, tail(out))
	}
	return nil
}

// tail is the end of out, trimmed, for a message.
func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > maxOutput {
		s = "…" + s[len(s)-maxOutput:]
	}
	return s
}

//go:build realagents

package nomad_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/internal/testagent"
)

// TestRealNomadWritesTellTheIndexTheStreamDelivers checks on a real Nomad
// the two facts StreamPacer stands on: the answer to each of the daemon's
// writes carries the write's Raft index (Client.LastWriteIndex), and the
// event stream, on the topics the daemon follows, delivers a batch at
// exactly that index. Were either false, a paced write would wait for an
// index the stream never names, until the hold's bound.
func TestRealNomadWritesTellTheIndexTheStreamDelivers(t *testing.T) {
	n := testagent.Nomad(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := nomad.NewAPI(n.Client)
	stream, err := client.Events(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	delivered := make(chan uint64, 1024)
	go func() {
		for evs := range stream {
			if evs.Err == nil && !evs.IsHeartbeat() {
				delivered <- evs.Index
			}
		}
		close(delivered)
	}()

	var volumeID string
	writes := []struct {
		name  string
		write func() error
	}{
		{"register", func() error {
			resp, err := client.RegisterJob(ctx, realJob(childOf("web", 0, "r1"), "default"), false, 0)
			if err == nil && client.LastWriteIndex() != resp.JobModifyIndex {
				return fmt.Errorf("LastWriteIndex %d, the register's JobModifyIndex %d", client.LastWriteIndex(), resp.JobModifyIndex)
			}
			return err
		}},
		{"evaluate", func() error { return client.EvaluateJob(ctx, "default", "web-0") }},
		{"stop", func() error { return client.DeregisterJob(ctx, "default", "web-0", false) }},
		{"purge", func() error { return client.DeregisterJob(ctx, "default", "web-0", true) }},
		{"volume create", func() error {
			v, err := client.CreateHostVolume(ctx, &api.HostVolume{Namespace: "default", Name: "data-web-0", PluginID: "mkdir", NodeID: n.NodeID,
				RequestedCapabilities: []*api.HostVolumeCapability{{AttachmentMode: "file-system", AccessMode: "single-node-writer"}}})
			if err != nil {
				return err
			}
			volumeID = v.ID
			return nil
		}},
		{"volume delete", func() error { return client.DeleteHostVolume(ctx, "default", volumeID) }},
	}
	var last uint64
	for _, w := range writes {
		if err := w.write(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		index := client.LastWriteIndex()
		if index <= last {
			t.Fatalf("%s: LastWriteIndex %d, not past the previous write's %d", w.name, index, last)
		}
		last = index
		timeout := time.After(time.Minute)
	wait:
		for {
			select {
			case got, ok := <-delivered:
				if !ok {
					t.Fatalf("%s: the stream ended before index %d", w.name, index)
				}
				if got == index {
					break wait
				}
				if got > index {
					t.Fatalf("%s: the stream went from below %d to %d without delivering the write's index", w.name, index, got)
				}
			case <-timeout:
				t.Fatalf("%s: the stream did not deliver the write's index %d within a minute", w.name, index)
			}
		}
	}
}

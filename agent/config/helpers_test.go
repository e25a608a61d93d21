package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// noEnv is an empty environment, so tests never see the developer's NOMAD_*.
func noEnv(string) (string, bool) { return "", false }

// envOf returns a lookup over a fixed map.
func envOf(m map[string]string) lookupEnvFunc {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// sources names texts f0.hcl, f1.hcl, … in order.
func sources(texts ...string) []source {
	out := make([]source, len(texts))
	for i, t := range texts {
		out[i] = source{name: fmt.Sprintf("f%d.hcl", i), src: []byte(t)}
	}
	return out
}

// loadText loads in-memory texts under a fixed environment.
func loadText(env lookupEnvFunc, texts ...string) (*Config, error) {
	return load(env, sources(texts...), nil)
}

// mustLoad loads texts with no environment and fails the test on error.
func mustLoad(t *testing.T, texts ...string) *Config {
	t.Helper()
	c, err := loadText(noEnv, texts...)
	if err != nil {
		t.Fatalf("load failed:\n%v", err)
	}
	return c
}

// loadErr loads texts that must fail and returns the diagnostics.
func loadErr(t *testing.T, env lookupEnvFunc, texts ...string) (*Error, hcl.Diagnostics) {
	t.Helper()
	c, err := loadText(env, texts...)
	if err == nil {
		t.Fatalf("load succeeded, want an error; config:\n%s", c)
	}
	if c != nil {
		t.Errorf("load returned a config with its error")
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error is %T, want *Error: %v", err, err)
	}
	var diags hcl.Diagnostics
	if !errors.As(err, &diags) {
		t.Fatalf("errors.As(err, *hcl.Diagnostics) failed for %v", err)
	}
	return ce, diags
}

// normalize strips what legitimately differs between equal configs built
// different ways: recorded positions.
func normalize(c *Config) *Config {
	cp := *c
	cp.origins = nil
	cp.Plugins = nil
	for _, p := range c.Plugins {
		pp := *p
		pp.DeclRange = hcl.Range{}
		cp.Plugins = append(cp.Plugins, &pp)
	}
	cp.VolumeClasses = nil
	for _, vc := range c.VolumeClasses {
		vv := *vc
		vv.DeclRange = hcl.Range{}
		cp.VolumeClasses = append(cp.VolumeClasses, &vv)
	}
	if cp.VolumeClasses == nil {
		cp.VolumeClasses = []*VolumeProvisionerConfig{}
	}
	cp.VolumeProvisioner.DeclRange = hcl.Range{}
	cp.Hooks = nil
	for _, h := range c.Hooks {
		hh := *h
		hh.DeclRange = hcl.Range{}
		cp.Hooks = append(cp.Hooks, &hh)
	}
	if cp.Hooks == nil {
		cp.Hooks = []*HookConfig{}
	}
	return &cp
}

// assertEqualConfig compares two configs, ignoring positions, and prints
// both renderings on a difference.
func assertEqualConfig(t *testing.T, got, want *Config) {
	t.Helper()
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Errorf("configs differ\n--- got:\n%s\n--- want:\n%s", got.render(false), want.render(false))
	}
}

// schemaPaths lists every attribute path of the schema. Labeled blocks
// appear as "plugin.*.driver".
func schemaPaths(t reflect.Type, prefix string) []string {
	var out []string
	for _, fi := range infoFor(t).fields {
		switch fi.kind {
		case kindAttr:
			out = append(out, join(prefix, fi.name))
		case kindBlock:
			out = append(out, schemaPaths(fi.typ, join(prefix, fi.name))...)
		case kindBlockList, kindNamed:
			out = append(out, schemaPaths(fi.typ.Elem().Elem(), join(prefix, fi.name+".*"))...)
		}
	}
	sort.Strings(out)
	return out
}

// clearEnv blanks every honoured variable for tests that go through the
// exported Load, which reads the process environment; an empty variable
// counts as unset, so the developer's own NOMAD_ADDR cannot leak in.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, name := range envVars() {
		t.Setenv(name, "")
	}
}

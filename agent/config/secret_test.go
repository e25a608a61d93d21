package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

const secretValue = "s3cr3t-t0ken-value"

// TestSecret_NeverPrints: every way a token can reach a log or a dump.
func TestSecret_NeverPrints(t *testing.T) {
	s := Secret(secretValue)
	n := NomadConfig{Address: "http://x", Token: s}
	c := Default()
	c.Nomad.Token = s
	c.Consul.Token = s

	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-10v", "%T"} {
		outputs["Secret "+verb] = fmt.Sprintf(verb, s)
		outputs["NomadConfig "+verb] = fmt.Sprintf(verb, n)
		outputs["*NomadConfig "+verb] = fmt.Sprintf(verb, &n)
		outputs["*Config "+verb] = fmt.Sprintf(verb, c)
	}
	outputs["Println"] = fmt.Sprintln(s, n, c)
	outputs["String"] = c.String()
	outputs["GoString"] = c.GoString()

	js, err := json.Marshal(struct {
		N NomadConfig
		C *Config
	}{n, c})
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(js)

	var hbuf bytes.Buffer
	for _, jsonFormat := range []bool{false, true} {
		l := hclog.New(&hclog.LoggerOptions{Output: &hbuf, JSONFormat: jsonFormat, Level: hclog.Trace})
		l.Info("config", "token", s, "nomad", n, "config", c)
	}
	outputs["hclog"] = hbuf.String()

	var sbuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&sbuf, nil)).Info("config", "token", s, "nomad", n)
	slog.New(slog.NewTextHandler(&sbuf, nil)).Info("config", "token", s, "nomad", n)
	outputs["slog"] = sbuf.String()

	for name, out := range outputs {
		if strings.Contains(out, secretValue) || strings.Contains(out, fmt.Sprintf("%x", secretValue)) {
			t.Errorf("%s leaks the token: %s", name, out)
		}
	}
	// The redaction is visible, so "token set" and "no token" differ.
	if got := fmt.Sprint(s); got != "<redacted>" {
		t.Errorf("fmt.Sprint(secret) = %q", got)
	}
	if got := fmt.Sprint(Secret("")); got != "" {
		t.Errorf("an empty secret prints %q, want empty", got)
	}
	if got := fmt.Sprintf("%#v", s); got != `"<redacted>"` {
		t.Errorf("%%#v = %s", got)
	}
	if s.Reveal() != secretValue {
		t.Errorf("Reveal() lost the value")
	}
}

// TestSecret_NotInErrors: a bad value next to a token in the same file
// must not drag the token into the error text.
func TestSecret_NotInErrors(t *testing.T) {
	ce, _ := loadErr(t, noEnv, `nomad {
  token   = "`+secretValue+`"
  address = 42
}
consul { token = ["`+secretValue+`"] }`)
	if strings.Contains(ce.Error(), secretValue) {
		t.Errorf("error leaks the token: %v", ce)
	}
	var buf bytes.Buffer
	if err := ce.WriteDiagnostics(&buf, 0, false); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, secretValue) {
		t.Errorf("WriteDiagnostics leaks the token in a snippet:\n%s", out)
	}
	// The snippet is still there, masked, and the other error is intact.
	for _, want := range []string{`consul { token = ********`, `Inappropriate value for attribute "token"`, `address = 42`} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteDiagnostics output lacks %q:\n%s", want, out)
		}
	}
}

// TestSecret_NotInSyntaxErrorSnippets: a file that does not parse is never
// decoded, yet its snippet must not show a token either.
func TestSecret_NotInSyntaxErrorSnippets(t *testing.T) {
	for _, text := range []string{
		"nomad {\n  token = \"" + secretValue + "\" }\n",  // single-line block rule broken
		"nomad {\n  token = \"" + secretValue + "\n}\n",   // unterminated string
		"{\"nomad\": {\"token\": \"" + secretValue + "\"", // truncated JSON
	} {
		name := "f.hcl"
		if strings.HasPrefix(text, "{") {
			name = "f.json"
		}
		_, err := load(noEnv, []source{{name: name, src: []byte(text)}}, nil)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%q: want a syntax error, got %v", text, err)
		}
		var buf bytes.Buffer
		if err := ce.WriteDiagnostics(&buf, 0, false); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), secretValue) || strings.Contains(ce.Error(), secretValue) {
			t.Errorf("syntax error output leaks the token:\n%s", buf.String())
		}
		if !strings.Contains(buf.String(), "Error: ") {
			t.Errorf("no diagnostic written:\n%s", buf.String())
		}
	}
}

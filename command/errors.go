package command

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend/nomad"
	"github.com/nomad-statefulset/nomad-statefulset/client"
)

// ErrConflict is wrapped by errors from a check-and-set register that lost
// a race: the parent job's JobModifyIndex moved since it was read.
var ErrConflict = errors.New("the job changed since it was read (someone else ran `nomad job run`?); run the command again")

// errNotFound is wrapped by errors for a missing set or parent job.
var errNotFound = errors.New("not found")

// NomadUnreachableError means no HTTP answer came back from Nomad.
type NomadUnreachableError struct {
	// Address is the Nomad address that was tried.
	Address string
	// Err is the transport error.
	Err error
}

// Error implements error.
func (e *NomadUnreachableError) Error() string {
	return fmt.Sprintf("cannot reach Nomad at %s: %v", e.Address, e.Err)
}

// Unwrap returns the transport error.
func (e *NomadUnreachableError) Unwrap() error { return e.Err }

// nomadError turns an error from the Nomad API into one the CLI can explain
// and map to an exit code: transport failures become NomadUnreachableError,
// a lost check-and-set wraps ErrConflict, a 404 wraps errNotFound. what says
// what was being done ("reading job \"web\"").
func nomadError(address, what string, err error) error {
	if err == nil {
		return nil
	}
	// A lost check-and-set is recognised as the agent recognises it
	// (nomad.IsConflict): Nomad sends it as a plain 500, so its text is all
	// there is to go on, with or without the typed error around it.
	var ue api.UnexpectedResponseError
	isUE := errors.As(err, &ue)
	if nomad.IsConflict(err) {
		said := err.Error()
		if isUE {
			said = strings.TrimSpace(ue.Body())
		}
		return fmt.Errorf("%s: %w (Nomad said: %s)", what, ErrConflict, said)
	}
	if isUE {
		switch ue.StatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%s: %w", what, errNotFound)
		case http.StatusForbidden:
			return fmt.Errorf("%s: permission denied by Nomad (set -token or NOMAD_TOKEN to a token that may read and submit the job): %w", what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return fmt.Errorf("%s: %w", what, &NomadUnreachableError{Address: address, Err: urlErr.Err})
	}
	return fmt.Errorf("%s: %w", what, err)
}

// report prints err in plain words and returns the exit code for it. No
// error ever reaches the user as a stack trace or a bare Go value.
func (m *Meta) report(err error) int {
	var agentDown *client.UnreachableError
	var nomadDown *NomadUnreachableError
	var status *client.StatusError
	switch {
	case errors.As(err, &agentDown):
		m.UI.Error("Error: " + err.Error())
		m.UI.Error(agentDownHint(err))
		return ExitUnreachable
	case errors.Is(err, client.ErrForbidden):
		m.UI.Error("Error: " + err.Error())
		m.UI.Error("Nomad's ACLs are on: set NOMAD_TOKEN (or -token) to a Nomad ACL token whose policy grants read-job in the set's namespace (docs/security.md).")
		return ExitError
	case errors.As(err, &nomadDown):
		m.UI.Error("Error: " + err.Error())
		m.UI.Error("Is Nomad running? Point -nomad-address or NOMAD_ADDR at its HTTP API.")
		return ExitUnreachable
	case errors.As(err, &status) && status.Code == http.StatusBadRequest && strings.Contains(status.Body, "HTTPS server"):
		m.UI.Error("Error: " + err.Error())
		m.UI.Error("The agent serves HTTPS: use an https:// address in -address or " + client.AddressEnv + ", and set " + client.CACertEnv + " to its CA.")
		return ExitUnreachable
	case errors.Is(err, ErrConflict):
		m.UI.Error("Error: " + err.Error())
		return ExitConflict
	case errors.Is(err, errNotFound), errors.Is(err, client.ErrNotFound):
		m.UI.Error("Error: " + err.Error())
		return ExitNotFound
	default:
		m.UI.Error("Error: " + err.Error())
		return ExitError
	}
}

// agentDownHint says what to do when no answer came from the agent: for a
// TLS failure, which TLS setting to give; else to check the address.
func agentDownHint(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &verify):
		return "The agent's certificate is not signed by a CA this CLI trusts: set " + client.CACertEnv + " to the CA file of the agent's http { tls { cert_file } }."
	case errors.As(err, &hostname):
		return "The agent's certificate is not valid for this host name: use the name or address it was issued for in -address or " + client.AddressEnv + "."
	case errors.As(err, &header), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "The agent does not speak TLS at this address: use an http:// address, or give the agent an http { tls {} } block."
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"):
		return "The agent asks for a client certificate (verify_https_client): set " + client.ClientCertEnv + " and " + client.ClientKeyEnv + "."
	}
	return "Is the agent running? Point -address or " + client.AddressEnv + " at its HTTP API."
}

// setNotFound wraps an agent 404 with which set in which namespace was
// asked for, since the agent's own text may not say.
func setNotFound(namespace, name string, err error) error {
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("statefulset %q not found in namespace %q (is the parent job annotated with meta statefulset = \"true\", and is -namespace right?): %w", name, namespace, errNotFound)
	}
	return err
}

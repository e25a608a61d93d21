package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultAddress is where the agent's HTTP API listens unless told otherwise.
const DefaultAddress = "http://127.0.0.1:4650"

// AddressEnv is the environment variable that overrides DefaultAddress.
const AddressEnv = "NOMAD_STATEFULSET_ADDR"

// The environment variables of the agent's TLS, after Nomad's NOMAD_CACERT,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY and NOMAD_SKIP_VERIFY. The command
// package reads them (ConfigFromEnv); a Config built in Go ignores them.
const (
	// CACertEnv names a PEM CA file that verifies the agent's certificate.
	CACertEnv = "NOMAD_STATEFULSET_CACERT"
	// ClientCertEnv names the PEM client certificate for an agent with
	// http { tls { verify_https_client = true } }.
	ClientCertEnv = "NOMAD_STATEFULSET_CLIENT_CERT"
	// ClientKeyEnv names the PEM key of ClientCertEnv.
	ClientKeyEnv = "NOMAD_STATEFULSET_CLIENT_KEY"
	// SkipVerifyEnv, when true, skips the check of the agent's certificate.
	SkipVerifyEnv = "NOMAD_STATEFULSET_SKIP_VERIFY"
	// TokenEnv is the Nomad ACL token the CLI sends, as the nomad CLI does.
	TokenEnv = "NOMAD_TOKEN"
)

// TokenHeader carries the caller's Nomad ACL token, as in Nomad's API.
const TokenHeader = "X-Nomad-Token"

// Config configures a Client.
type Config struct {
	// Address is the agent's address; DefaultAddress when empty. An
	// address without a scheme is taken as http.
	Address string
	// Token is the Nomad ACL token sent with every request (X-Nomad-Token);
	// none when empty. It is never put in an error.
	Token string
	// CACert is a PEM CA file that verifies the agent's certificate; the
	// system's roots when empty.
	CACert string
	// ClientCert and ClientKey are a PEM client certificate and its key,
	// presented when the agent asks for one.
	ClientCert, ClientKey string
	// SkipVerify accepts any certificate the agent presents. Only for
	// tests: it lets anyone in the middle read the token.
	SkipVerify bool
}

// ConfigFromEnv returns the Config that the environment describes:
// AddressEnv, TokenEnv and the TLS variables. lookup is os.LookupEnv, or a
// test's map.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	c := Config{Address: get(AddressEnv), Token: get(TokenEnv), CACert: get(CACertEnv),
		ClientCert: get(ClientCertEnv), ClientKey: get(ClientKeyEnv)}
	if v := get(SkipVerifyEnv); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q is not a boolean (true or false)", SkipVerifyEnv, v)
		}
		c.SkipVerify = b
	}
	return c, nil
}

// tlsConfig builds the client's TLS configuration. Its errors name the
// files and the variables that set them, never their content.
func (c Config) tlsConfig() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.SkipVerify}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("reading the agent's CA (%s): %w", CACertEnv, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the agent's CA %s (%s) holds no PEM certificate", c.CACert, CACertEnv)
		}
	}
	switch {
	case c.ClientCert != "" && c.ClientKey != "":
		cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate %s with its key %s (%s, %s): %w", c.ClientCert, c.ClientKey, ClientCertEnv, ClientKeyEnv, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	case c.ClientCert != "" || c.ClientKey != "":
		return nil, fmt.Errorf("give both %s and %s, or neither", ClientCertEnv, ClientKeyEnv)
	}
	return conf, nil
}

// DefaultTimeout bounds one request. The agent answers from memory, so a
// slow answer means something is wrong; failing fast keeps the CLI from
// hanging in scripts.
const DefaultTimeout = 10 * time.Second

// ErrNotFound is matched (with errors.Is) by a *StatusError for a 404: the
// set, or the namespace, is unknown to the agent.
var ErrNotFound = errors.New("not found")

// ErrForbidden is matched (with errors.Is) by a *StatusError for a 403:
// Nomad's ACLs are on and the token sent (NOMAD_TOKEN) is missing, unknown
// to Nomad, or may not read-job in the set's namespace.
var ErrForbidden = errors.New("forbidden")

// StatusError is an answer from the agent with a status other than 200.
type StatusError struct {
	// Method and URL identify the request.
	Method string
	URL    string
	// Code is the HTTP status code.
	Code int
	// Body is the start of the response body: the agent's own explanation.
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := strings.TrimSpace(e.Body)
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("agent answered %s %s with %d: %s", e.Method, e.URL, e.Code, msg)
}

// Is reports a 404 as ErrNotFound and a 403 as ErrForbidden, so callers
// need not know status codes.
func (e *StatusError) Is(target error) bool {
	return target == ErrNotFound && e.Code == http.StatusNotFound ||
		target == ErrForbidden && e.Code == http.StatusForbidden
}

// UnreachableError means no HTTP answer came back at all: nothing listens at
// the address, DNS failed, or the request timed out.
type UnreachableError struct {
	// Address is the agent address that was tried.
	Address string
	// Err is the transport error.
	Err error
}

// Error implements error.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the nomad-statefulset agent at %s: %v", e.Address, e.Err)
}

// Unwrap returns the transport error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Client reads the agent's HTTP API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}

// New returns a client for the agent at address, with no token and the
// system's roots for an https:// address. An address without a scheme
// ("127.0.0.1:4650") is taken as http, as NOMAD_ADDR is by habit.
func New(address string) (*Client, error) {
	return NewWithConfig(Config{Address: address})
}

// NewWithConfig returns a client configured by cfg.
func NewWithConfig(cfg Config) (*Client, error) {
	base, err := parseAddress(cfg.Address)
	if err != nil {
		return nil, err
	}
	tlsConf, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConf
	return &Client{base: base, token: cfg.Token, http: &http.Client{Timeout: DefaultTimeout, Transport: t}}, nil
}

// parseAddress checks an agent address and returns it as a base URL.
func parseAddress(address string) (*url.URL, error) {
	if address == "" {
		address = DefaultAddress
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("invalid agent address %q: %w", address, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid agent address %q: scheme must be http or https", address)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid agent address %q: no host", address)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// Address returns the agent address the client talks to.
func (c *Client) Address() string { return c.base.String() }

// AgentHealth reads GET /v1/health and returns its body whether the agent
// answers 200 (ok) or 503 (degraded): a caller that shows the agent's state
// (leader or follower, and which check fails) wants the body either way.
func (c *Client) AgentHealth(ctx context.Context) (*Health, error) {
	var out Health
	if err := c.get(ctx, "/v1/health", nil, &out, http.StatusServiceUnavailable); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSets reads GET /v1/statefulsets. A namespace other than "" or "*" is
// sent as ?namespace= and also filtered here, so the answer is right
// whether or not the agent filters.
func (c *Client) ListSets(ctx context.Context, namespace string) (*SetList, error) {
	q := url.Values{}
	if namespace != "" && namespace != "*" {
		q.Set("namespace", namespace)
	}
	var out SetList
	if err := c.get(ctx, "/v1/statefulsets", q, &out); err != nil {
		return nil, err
	}
	if namespace != "" && namespace != "*" {
		kept := out.Sets[:0]
		for _, s := range out.Sets {
			if s.Namespace == namespace {
				kept = append(kept, s)
			}
		}
		out.Sets = kept
	}
	return &out, nil
}

// GetSet reads GET /v1/statefulset/<namespace>/<name>.
func (c *Client) GetSet(ctx context.Context, namespace, name string) (*SetDetail, error) {
	return c.getSet(ctx, namespace, name, nil)
}

// GetSetRevision reads GET /v1/statefulset/<namespace>/<name>?revision=<n>:
// the set's detail with the Template of revision number n filled in.
func (c *Client) GetSetRevision(ctx context.Context, namespace, name string, number int64) (*SetDetail, error) {
	q := url.Values{}
	q.Set("revision", strconv.FormatInt(number, 10))
	return c.getSet(ctx, namespace, name, q)
}

func (c *Client) getSet(ctx context.Context, namespace, name string, q url.Values) (*SetDetail, error) {
	if namespace == "" {
		namespace = "default"
	}
	path := "/v1/statefulset/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	var out SetDetail
	if err := c.get(ctx, path, q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// get does one GET and decodes a JSON body into out. An answer other than
// 200, or than one of the statuses in also (whose bodies carry the same
// JSON), is a *StatusError.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any, also ...int) error {
	// The path segments are already escaped by the caller, so the URL is
	// built as a string: url.URL would escape them a second time.
	target := c.base.String() + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", target, err)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set(TokenHeader, c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// A cancelled context is the caller's decision, not an outage.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &UnreachableError{Address: c.Address(), Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && !slices.Contains(also, resp.StatusCode) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &StatusError{Method: req.Method, URL: target, Code: resp.StatusCode, Body: errorText(body)}
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the agent's answer to GET %s: %w", target, err)
	}
	return nil
}

// errorText extracts the message of a JSON error body ({"error": "..."}),
// which is how the agent explains a failure, and falls back to the raw body.
func errorText(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(body)
}

// unwrapURLError drops the "Get \"http://…\":" prefix of *url.Error, which
// UnreachableError already says in plainer words.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

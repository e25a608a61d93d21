package nomad

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Authorizer asks Nomad what a caller's ACL token may do, for the agent's
// HTTP API (agent.Authorizer). It asks every question with the caller's
// token over the daemon's own connection to Nomad, and lets Nomad decide:
// no policy is parsed here, so what a token may read is what Nomad says,
// management tokens, workload identities and namespace globs included.
//
// How Nomad reports ACLs being off: with `acl { enabled = false }`, Nomad
// 1.10 answers its ACL list endpoints (/v1/acl/policies, /v1/acl/tokens, …)
// with 400 "ACL support disabled", whatever the token; /v1/acl/token/self,
// on the other hand, answers 200 with a placeholder token (AccessorID
// "acls-disabled"), so it cannot tell. ACLsEnabled therefore lists
// /v1/acl/policies with the daemon's token: "ACL support disabled" means
// off; 200 (the token's own policies), or Nomad's ACL system refusing or
// failing to resolve the daemon's own token (403, or, for a workload
// identity, which the Task API socket passes, 500 "acl token lookup
// failed") means that it is on. A transport error or another answer (500
// "No cluster leader") decides nothing and is returned.
type Authorizer struct {
	c *api.Client
}

// NewAuthorizer returns an Authorizer over the daemon's Nomad client.
func NewAuthorizer(c *api.Client) *Authorizer { return &Authorizer{c: c} }

// errNoCallerToken refuses a question without a caller's token, which
// would otherwise be asked with the daemon's.
var errNoCallerToken = fmt.Errorf("no token was given: %w", backend.ErrPermissionDenied)

// aclsDisabled is what Nomad answers on its ACL endpoints when ACLs are off.
const aclsDisabled = "ACL support disabled"

// ACLsEnabled implements agent.Authorizer.
func (a *Authorizer) ACLsEnabled(ctx context.Context) (bool, error) {
	_, _, err := a.c.ACLPolicies().List((&api.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err == nil {
		return true, nil
	}
	if strings.Contains(err.Error(), aclsDisabled) {
		return false, nil
	}
	// The ACL system refused or failed to resolve the daemon's own token:
	// it is on. A workload identity (the Task API socket) is answered 500
	// "acl token lookup failed: index error: UUID must be 36 characters".
	if _, ok := refusal(err); ok {
		return true, nil
	}
	return false, fmt.Errorf("GET /v1/acl/policies: %w", err)
}

// ReadJob implements agent.Authorizer: it reads jobID's summary in
// namespace with token. Nomad checks read-job in the namespace before it
// looks the job up, so a 404 is an answer that the token may read there.
func (a *Authorizer) ReadJob(ctx context.Context, token, namespace, jobID string) error {
	if token == "" {
		// The api client would send the daemon's own token instead.
		return errNoCallerToken
	}
	q := (&api.QueryOptions{Namespace: namespace, AuthToken: token, AllowStale: true}).WithContext(ctx)
	_, _, err := a.c.Jobs().Summary(jobID, q)
	if err == nil || IsNotFound(err) {
		return nil
	}
	if reason, ok := refusal(err); ok {
		return fmt.Errorf("refused by Nomad, which answered %s: %w", reason, backend.ErrPermissionDenied)
	}
	return fmt.Errorf("reading the summary of job %q in namespace %q with the caller's token: %w", jobID, namespace, err)
}

// Token implements agent.Authorizer: it reads /v1/acl/token/self with
// token.
func (a *Authorizer) Token(ctx context.Context, token string) (bool, error) {
	if token == "" {
		return false, errNoCallerToken
	}
	q := (&api.QueryOptions{AuthToken: token, AllowStale: true}).WithContext(ctx)
	self, _, err := a.c.ACLTokens().Self(q)
	if err == nil {
		return self.Type == "management", nil
	}
	if reason, ok := refusal(err); ok {
		return false, fmt.Errorf("refused by Nomad, which answered %s: %w", reason, backend.ErrPermissionDenied)
	}
	return false, fmt.Errorf("reading the caller's token (GET /v1/acl/token/self): %w", err)
}

// refusal reports whether err is Nomad refusing a token, and Nomad's words
// for it, which never hold the token: a 403 ("Permission denied", also
// for a token Nomad does not know), or another 4xx or 500 about the token
// itself (Nomad 1.10 takes a secret that is no UUID for a workload
// identity's JWT, and answers 500 "failed to parse signed token" on
// /v1/acl/token/self).
func refusal(err error) (string, bool) {
	var ue api.UnexpectedResponseError
	if !errors.As(err, &ue) {
		return "", false
	}
	body := strings.TrimSpace(ue.Body())
	switch code := ue.StatusCode(); {
	case code == http.StatusForbidden:
	case code >= 400 && code <= 500 && strings.Contains(strings.ToLower(body), "token"):
	default:
		return "", false
	}
	if body == "" {
		body = http.StatusText(ue.StatusCode())
	}
	return fmt.Sprintf("%d %q", ue.StatusCode(), body), true
}

package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-statefulset/nomad-statefulset/backend"
)

// Authorizer asks Nomad what a caller's Nomad ACL token may do, so that the
// HTTP API lets a caller read what Nomad would (DESIGN §4). Every question
// but ACLsEnabled is asked with the caller's token, never the daemon's, and
// Nomad answers it: the agent keeps no policy of its own. backend/nomad
// implements it; the agent never sees Nomad's API.
//
// A refusal is an error that wraps backend.ErrPermissionDenied and carries
// Nomad's reason; any other error means Nomad could not be asked.
type Authorizer interface {
	// ACLsEnabled reports whether Nomad enforces ACLs.
	ACLsEnabled(ctx context.Context) (bool, error)
	// ReadJob returns nil when token may read-job in namespace: Nomad is
	// asked to read the job jobID with token, and Nomad checks read-job in
	// the namespace before it looks the job up, so a missing job is no
	// refusal.
	ReadJob(ctx context.Context, token, namespace, jobID string) error
	// Token returns nil when Nomad knows token, and whether it is a
	// management token.
	Token(ctx context.Context, token string) (management bool, err error)
}

// authzTTL is how long an answer of Nomad about one token is reused: a
// `status` loop or a Prometheus scrape then asks Nomad once every 30 s,
// and a revoked token or a removed policy stops working within 30 s.
const authzTTL = 30 * time.Second

// authzCacheMax bounds the answers kept, so that callers sending ever new
// tokens cannot grow the agent's memory; when full, expired answers go,
// then all of them.
const authzCacheMax = 4096

// tokenHeader is where Nomad, and so this API, takes a caller's token.
const tokenHeader = "X-Nomad-Token"

// decision is one cached answer of Nomad.
type decision struct {
	err        error // nil, or wraps backend.ErrPermissionDenied
	management bool
	expires    time.Time
}

// guard answers the questions the HTTP handlers ask about a request's
// token, from Nomad through an Authorizer, caching the answers for
// authzTTL. The cache is keyed by a hash of the token, which is never
// kept, logged or returned as it came.
type guard struct {
	authz Authorizer // nil: Nomad has no ACLs
	log   hclog.Logger
	clock func() time.Time

	mu      sync.Mutex
	answers map[string]decision
	// acls is the last answer of ACLsEnabled, aclsAt when it came; aclsKnown
	// once one came.
	acls, aclsKnown bool
	aclsAt          time.Time
}

func newGuard(authz Authorizer, log hclog.Logger, clock func() time.Time) *guard {
	return &guard{authz: authz, log: log, clock: clock, answers: map[string]decision{}}
}

// errNoToken is a request without a token while Nomad's ACLs are on.
var errNoToken = fmt.Errorf("a Nomad ACL token is needed, as Nomad's ACLs are on: send it in the %s header (the CLI sends NOMAD_TOKEN): %w", tokenHeader, backend.ErrPermissionDenied)

// requestToken returns the caller's token: X-Nomad-Token, or an
// Authorization bearer token, as Nomad reads them.
func requestToken(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get(tokenHeader)); t != "" {
		return t
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// aclsOn reports whether Nomad's ACLs are on, asking Nomad at most once
// per authzTTL. When Nomad cannot be asked, the last answer holds (ACLs
// change only with a restart of Nomad's servers); with no answer yet the
// request fails, closed.
func (g *guard) aclsOn(ctx context.Context) (bool, error) {
	if g.authz == nil {
		return false, nil
	}
	now := g.clock()
	g.mu.Lock()
	if g.aclsKnown && now.Sub(g.aclsAt) < authzTTL {
		on := g.acls
		g.mu.Unlock()
		return on, nil
	}
	g.mu.Unlock()
	on, err := g.authz.ACLsEnabled(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if g.aclsKnown {
			g.log.Warn("cannot ask Nomad whether its ACLs are on; keeping the last answer", "acls_enabled", g.acls, "error", err)
			return g.acls, nil
		}
		return false, fmt.Errorf("asking Nomad whether its ACLs are on: %w", err)
	}
	if !g.aclsKnown || g.acls != on {
		g.log.Info("Nomad's ACLs decide what the HTTP API shows", "acls_enabled", on)
	}
	g.acls, g.aclsKnown, g.aclsAt = on, true, now
	return on, nil
}

// cached returns the answer stored under key, or asks for it with ask and
// stores it. Only Nomad's answers (nil or a refusal) are stored; an error
// asking is returned and asked again next time.
func (g *guard) cached(key string, ask func() (bool, error)) decision {
	now := g.clock()
	g.mu.Lock()
	d, ok := g.answers[key]
	g.mu.Unlock()
	if ok && now.Before(d.expires) {
		return d
	}
	mgmt, err := ask()
	d = decision{err: err, management: mgmt, expires: now.Add(authzTTL)}
	if err != nil && !errors.Is(err, backend.ErrPermissionDenied) {
		return d
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.answers) >= authzCacheMax {
		for k, old := range g.answers {
			if !now.Before(old.expires) {
				delete(g.answers, k)
			}
		}
		if len(g.answers) >= authzCacheMax {
			g.answers = map[string]decision{}
		}
	}
	g.answers[key] = d
	return d
}

// tokenKey is the cache key of a question about token: a hash, so that the
// map holds no token.
func tokenKey(kind, token, namespace string) string {
	sum := sha256.Sum256([]byte(token))
	return fmt.Sprintf("%s\x00%x\x00%s", kind, sum, namespace)
}

// readJob returns nil when token may read-job in namespace (jobID is the
// job Nomad is asked to read), a refusal wrapping
// backend.ErrPermissionDenied, or why Nomad could not be asked.
func (g *guard) readJob(ctx context.Context, token, namespace, jobID string) error {
	if token == "" {
		return errNoToken
	}
	d := g.cached(tokenKey("read-job", token, namespace), func() (bool, error) {
		return false, g.authz.ReadJob(ctx, token, namespace, jobID)
	})
	if d.err != nil && errors.Is(d.err, backend.ErrPermissionDenied) {
		return fmt.Errorf("the token needs read-job in namespace %q: %w", namespace, d.err)
	}
	if d.err != nil {
		return fmt.Errorf("asking Nomad whether the token may read-job in namespace %q: %w", namespace, d.err)
	}
	return nil
}

// known returns nil when Nomad knows token (and, with management set, when
// it is a management token), a refusal, or why Nomad could not be asked.
func (g *guard) known(ctx context.Context, token string, management bool) error {
	if token == "" {
		return errNoToken
	}
	d := g.cached(tokenKey("token", token, ""), func() (bool, error) {
		return g.authz.Token(ctx, token)
	})
	switch {
	case d.err != nil && errors.Is(d.err, backend.ErrPermissionDenied):
		return fmt.Errorf("the token is refused by Nomad: %w", d.err)
	case d.err != nil:
		return fmt.Errorf("asking Nomad about the token: %w", d.err)
	case management && !d.management:
		return fmt.Errorf("this endpoint needs a Nomad management token: %w", backend.ErrPermissionDenied)
	}
	return nil
}

// writeAuthzError answers a request the guard refused (403) or could not
// decide on (503).
func writeAuthzError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, backend.ErrPermissionDenied) {
		code = http.StatusForbidden
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

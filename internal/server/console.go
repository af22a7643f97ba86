package server

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/console"
	"github.com/gpuaas/gpuaas/internal/gateway"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
)

// isPlatformToken says which bearer tokens the gateway keeps from apps: any
// token the platform signed (keyfunc finds its key), expired or not, and any
// that only claims to be the platform's by its issuer and audience. By the
// signature alone, a token of a key this replica has not loaded yet (another
// replica signs with it just after a rotate) or no longer trusts (retired,
// while lagging replicas still take it) would reach the app, which could
// play it back to the API.
func isPlatformToken(keyfunc jwt.Keyfunc) func(context.Context, string) bool {
	parser := jwt.NewParser(jwt.WithoutClaimsValidation(), jwt.WithValidMethods([]string{"EdDSA"}))
	unverified := jwt.NewParser()
	return func(_ context.Context, tok string) bool {
		if _, err := parser.Parse(tok, keyfunc); err == nil {
			return true
		}
		var claims jwt.RegisteredClaims
		if _, _, err := unverified.ParseUnverified(tok, &claims); err != nil {
			return false
		}
		return claims.Issuer == iam.TokenIssuer && slices.Contains(claims.Audience, iam.TokenAudience)
	}
}

// webParts builds the web console and the UI gateway around the API: the
// gateway takes requests for instance origins, the API its own routes, and
// the console every other path. masterKey derives the gateway's signing key,
// so every replica signs and checks app tokens alike.
func (a *App) webParts(masterKey []byte) error {
	cfg := a.Config
	a.gateway = gateway.New(gateway.Config{
		Domain: cfg.AppsDomain, PathMode: cfg.AppsPathMode, TokenTTL: cfg.AppTokenTTL, Key: subkey(masterKey, "gpuaas/ui-gateway/app-token/v1"),
		PublicURL:       func() string { return a.Config.PublicURL },
		AppsPort:        func() string { return a.appsPort },
		IsPlatformToken: isPlatformToken(a.Tokens.Ring.Keyfunc),
		StripCookies:    console.Cookies,
		ReadTimeout:     cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		Backend: a.Instances, Logger: a.Logger, Now: a.now, Wake: a.Wake(),
	})
	if a.gateway.Enabled() {
		a.API.UIOpenURL = a.gateway.OpenURL
	}
	q := a.DB.Queries()
	con, err := console.New(console.Config{
		// The console calls the API in process, through the very handler
		// the server serves (built once).
		API:      http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.API.Handler().ServeHTTP(w, r) }),
		Sessions: q,
		Mint: func(ctx context.Context, userID string) (string, time.Time, error) {
			u, err := q.GetUser(ctx, userID)
			if err != nil {
				return "", time.Time{}, err
			}
			iss, err := a.Tokens.Issue(principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email}, "")
			return iss.AccessToken, a.now().Add(time.Duration(iss.ExpiresIn) * time.Second), err
		},
		Account: func(ctx context.Context, userID string) (iam.User, error) { return q.GetUser(ctx, userID) },
		Wake:    a.Wake(),
		Grants: func(ctx context.Context, userID string) (*iam.Grants, error) {
			return iam.LoadGrants(ctx, q, principal.Principal{Type: principal.User, ID: userID})
		},
		ProjectOf: func(ctx context.Context, instanceID string) (string, error) {
			inst, err := q.GetAppInstanceByID(ctx, instanceID)
			return inst.ProjectID, err
		},
		AttachedTo: func(ctx context.Context, instanceID string) ([]iam.Scope, error) {
			atts, err := q.ListInstanceAttachments(ctx, instanceID)
			out := make([]iam.Scope, len(atts))
			for i, at := range atts {
				out[i] = iam.Scope{OrgID: at.OrgID, ProjectID: at.ProjectID}
			}
			return out, err
		},
		StreamHead: func(ctx context.Context) (int64, error) {
			_, newest, err := q.EventBounds(ctx)
			return newest, err
		},
		PublicURL:   func() string { return a.Config.PublicURL },
		IdleTimeout: cfg.ConsoleIdleTimeout, MaxAge: cfg.ConsoleMaxAge, Logger: a.Logger, Now: a.now,
	})
	if err != nil {
		return err
	}
	a.API.Fallback = con
	return nil
}

// uiBasePath: in path mode, the path each instance's UI is served under,
// which its workload is told (GPUAAS_UI_BASE_PATH).
func uiBasePath(cfg config.Config) func(string) string {
	if cfg.AppsDomain == "" || !cfg.AppsPathMode {
		return nil
	}
	return gateway.PathBase
}

// handler is what the listener serves.
func (a *App) handler() http.Handler { return a.gateway.Wrap(a.API.Handler()) }

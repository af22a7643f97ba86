package serviceaccounts_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// benchSA starts a server and creates one service account in the dev project.
func benchSA(b *testing.B, s *servertest.Server) client.KeyFile {
	b.Helper()
	r := s.Admin().Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts", map[string]any{"name": "bench", "slug": "bench"})
	r.Want(b, 201)
	return keyFileOf(r)
}

// BenchmarkTokenExchange: sign an assertion (client side, Ed25519) and
// exchange it in the service: parse, key and account reads, signature
// check, the single-use jti insert, and minting the access token.
func BenchmarkTokenExchange(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		s := servertest.Start(b, d)
		kf := benchSA(b, s)
		ctx := context.Background()
		for b.Loop() {
			a, err := client.SignAssertion(kf, s.URL+tokenPath, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.App.API.SA.Exchange(ctx, serviceaccounts.ExchangeInput{Assertion: a}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAuthenticatedRequest: the per-request cost of a service-account
// token. "check" is Tokens.Authenticate alone (JWT verify + the account/key
// query); "http" is a whole GET /api/v1/projects/{id} with the token
// (authentication, grants, handler) over loopback HTTP.
func BenchmarkAuthenticatedRequest(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		s := servertest.Start(b, d)
		kf := benchSA(b, s)
		c := client.New(s.URL, "")
		tok, err := c.ServiceAccountToken(context.Background(), kf)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("check", func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.App.Tokens.Authenticate(ctx, tok.AccessToken); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("http", func(b *testing.B) {
			hc := &http.Client{}
			defer hc.CloseIdleConnections()
			for b.Loop() {
				req, _ := http.NewRequest("GET", s.URL+"/api/v1/projects/"+s.Creds.ProjectID, nil)
				req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	})
}

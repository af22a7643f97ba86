package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Benchmarks go through real HTTP with a plain client (no contract checks)
// so they measure the server: auth, policy, transaction, audit, encoding.

func rawDo(b *testing.B, c *http.Client, method, url, token string, body []byte) []byte {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		b.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, out)
	}
	return out
}

// BenchmarkAuthenticatedWrite: create a project (token check, policy,
// one transaction with its audit row).
func BenchmarkAuthenticatedWrite(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		s := servertest.Start(b, d)
		tok := s.Admin().Token
		hc := &http.Client{}
		url := s.URL + "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rawDo(b, hc, "POST", url, tok, []byte(fmt.Sprintf(`{"slug":"bench-%d","name":"Bench"}`, i)))
		}
	})
}

// BenchmarkList10k: read all 10,000 projects of an org, 500 per page.
func BenchmarkList10k(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		s := servertest.Start(b, d)
		tok := s.Admin().Token
		ctx := context.Background()
		err := s.DB.InTx(ctx, func(q *store.Queries) error {
			for i := 0; i < 10_000; i++ {
				if err := q.CreateProject(ctx, iam.Project{ID: iam.NewID(), OrgID: s.Creds.OrgID, Slug: fmt.Sprintf("p-%05d", i), Name: "P", CreatedAt: time.Now()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		hc := &http.Client{}
		base := s.URL + "/api/v1/orgs/" + s.Creds.OrgID + "/projects?limit=500"
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			n, cursor := 0, ""
			for {
				url := base
				if cursor != "" {
					url += "&cursor=" + cursor
				}
				var page struct {
					Items      []json.RawMessage `json:"items"`
					NextCursor string            `json:"next_cursor"`
				}
				if err := json.Unmarshal(rawDo(b, hc, "GET", url, tok, nil), &page); err != nil {
					b.Fatal(err)
				}
				n += len(page.Items)
				if page.NextCursor == "" {
					break
				}
				cursor = page.NextCursor
			}
			if n != 10_001 { // plus the seeded dev project
				b.Fatalf("listed %d rows", n)
			}
		}
	})
}

package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A rotation that revokes a service account's keys at once (grace 0) ends
// the open event streams of the tokens minted with them at once, as a
// disable does — even a stream whose type filter lets no iam.* event
// through to make it re-check. The periodic re-check is set to its longest
// (5 s): the stream must end well within it.
//
// Serial (no t.Parallel): it bounds how late the stream ends (3 s), which
// other tests' load would stretch.
func TestEventStreamEndsWhenItsServiceAccountKeyIsRevoked(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d, func(c *config.Config) { c.Events.Reauthorize = 5 * time.Second })
		admin := s.Admin()
		proj := s.Creds.ProjectID
		r := admin.Do("POST", "/api/v1/projects/"+proj+"/service-accounts", map[string]any{"name": "reader", "slug": "reader",
			"roles": []string{"project_viewer"}}).Want(t, 201)
		kf := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: r.String("id"), ProjectID: proj,
			KeyID: r.String("key_id"), PrivateKeyPEM: r.String("private_key_pem"), TokenURL: r.String("token_url")}
		sa := s.AsServiceAccount(kf)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ended := openStream(t, ctx, s, "sse", "/api/v1/projects/"+proj+"/events?type=apps.instance.", sa.Token)

		time.Sleep(200 * time.Millisecond) // the stream is following
		from := time.Now()
		admin.Do("POST", "/api/v1/projects/"+proj+"/service-accounts/"+kf.ServiceAccountID+"/rotate-key",
			map[string]any{"grace_period_seconds": 0}).Want(t, 200)
		end := <-ended
		if !end.closed || end.code != events.ReasonTokenRevoked {
			t.Fatalf("stream ended with code %q (closed by the server: %v, %v), want %q", end.code, end.closed, end.err, events.ReasonTokenRevoked)
		}
		if d := end.at.Sub(from); d > 3*time.Second {
			t.Fatalf("stream ended %v after the key was revoked, want within 3s", d)
		}
	})
}

package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/httpapi"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// One caller holds at most MaxStreamsPerPrincipal event streams open on a
// server, SSE and WebSocket together: the next is refused with a 429 to act
// on, another caller is not, and a closed stream frees its place.
func TestEventStreamsPerCaller(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	proj := s.Creds.ProjectID
	uid, viewer := s.NewUser(admin, "viewer-"+uuid.NewString()[:8]+"@example.com")
	admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": uid, "role": "project_viewer"}).Want(t, 201)
	events := "/api/v1/projects/" + proj + "/events"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, firstCancel := context.WithCancel(ctx)
	openStream(t, first, s, "sse", events, viewer.Token)
	for i := 1; i < httpapi.MaxStreamsPerPrincipal; i++ {
		transport := "sse"
		if i%2 == 0 {
			transport = "ws"
		}
		openStream(t, ctx, s, transport, events, viewer.Token)
	}
	if r := viewer.Do("GET", events+"/stream", nil); r.Status != http.StatusTooManyRequests || r.ErrorCode() != "too_many_streams" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("SSE stream %d of one caller: %d %s %v", httpapi.MaxStreamsPerPrincipal+1, r.Status, r.Body, r.Header)
	}
	if c, resp, err := wsDial(ctx, s, events+"/ws", viewer.Token, "", nil); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("WebSocket stream %d of one caller: %v %v", httpapi.MaxStreamsPerPrincipal+1, resp, err)
	}
	// Another caller is not held back by the viewer's streams.
	openStream(t, ctx, s, "sse", events, admin.Token)
	// A closed stream frees its place.
	firstCancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+events+"/stream", nil)
		req.Header.Set("Authorization", "Bearer "+viewer.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after a stream closed: %d", resp.StatusCode)
		}
	}
}

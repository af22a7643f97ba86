package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// wsDial opens an event WebSocket the way a browser does: the token as the
// subprotocol bearer.<token>, Origin set to the server itself (or origin).
func wsDial(ctx context.Context, s *servertest.Server, path, token, origin string, hc *http.Client) (*websocket.Conn, *http.Response, error) {
	if origin == "" {
		origin = s.URL
	}
	h := http.Header{}
	h.Set("Origin", origin)
	protos := []string{events.WebSocketProtocol}
	if token != "" {
		protos = append(protos, events.WebSocketBearerPrefix+token)
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+path,
		&websocket.DialOptions{HTTPHeader: h, Subprotocols: protos, HTTPClient: hc})
}

// wsRead reads n event envelopes.
func wsRead(t *testing.T, ctx context.Context, c *websocket.Conn, n int) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	for len(out) < n {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("websocket: %d of %d events: %v", len(out), n, err)
		}
		var e events.Envelope
		if err := json.Unmarshal(b, &e); err != nil || e.ID == "" {
			t.Fatalf("websocket message is not an event: %s", b)
		}
		out = append(out, e)
	}
	return out
}

// The WebSocket form of the stream: same IAM, exact resume by
// last_event_id, tenant isolation, Origin check, and cursor_expired as an
// error message and close code 4410 rather than a silent skip.
func TestEventsWebSocket(t *testing.T) {
	t.Parallel()
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Parallel()
		f := newTenancy(t, db.Dialect())
		s := f.s
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		createSAs(t, f.admin, f.projA, 3)
		createSAs(t, f.admin, f.projB, 2)
		pathA := "/api/v1/projects/" + f.projA + "/events/ws"

		c, resp, err := wsDial(ctx, s, pathA, f.admin.Token, "", nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if resp.Header.Get("Sec-WebSocket-Protocol") != events.WebSocketProtocol {
			t.Fatalf("negotiated %q", resp.Header.Get("Sec-WebSocket-Protocol"))
		}
		got := wsRead(t, ctx, c, 3)
		for i, e := range got {
			if e.Type != "iam.service_account.created" || e.ProjectID != f.projA || (i > 0 && e.Sequence <= got[i-1].Sequence) {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		// Live: a new event arrives on the open socket.
		createSAs(t, f.admin, f.projA, 1)
		live := wsRead(t, ctx, c, 1)[0]
		_ = c.Close(websocket.StatusNormalClosure, "")

		// Resume after the first, by sequence and by event id: exactly the rest.
		for _, last := range []string{strconv.FormatInt(got[0].Sequence, 10), got[0].ID} {
			c, _, err := wsDial(ctx, s, pathA+"?last_event_id="+last, f.admin.Token, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			rest := wsRead(t, ctx, c, 3)
			if rest[0].ID != got[1].ID || rest[1].ID != got[2].ID || rest[2].ID != live.ID {
				t.Fatalf("resume after %s: %v", last, rest)
			}
			_ = c.Close(websocket.StatusNormalClosure, "")
		}

		// Authorization header works too (non-browser clients).
		h := http.Header{"Authorization": {"Bearer " + f.admin.Token}}
		if c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+pathA,
			&websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{events.WebSocketProtocol}}); err != nil {
			t.Fatalf("dial with Authorization: %v", err)
		} else {
			wsRead(t, ctx, c, 1)
			_ = c.CloseNow()
		}

		// Refusals happen before the upgrade.
		for _, tc := range []struct {
			name, path, token, origin string
			status                    int
		}{
			{"no token", pathA, "", "", 401},
			{"bad token", pathA, "not-a-token", "", 401},
			{"foreign origin", pathA, f.admin.Token, "https://evil.example", 403},
		} {
			_, resp, err := wsDial(ctx, s, tc.path, tc.token, tc.origin, nil)
			if err == nil || resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("%s: err %v, response %+v", tc.name, err, resp)
			}
		}
		f.admin.Do("GET", pathA, nil).Want(t, 400) // not an upgrade

		// Tenancy: a viewer of B cannot open A's socket (like a missing
		// project) and receives only B's events on B's.
		uid, viewerB := s.NewUser(f.admin, "ws-viewer-b@example.com")
		f.admin.Do("POST", "/api/v1/projects/"+f.projB+"/members", map[string]string{"user_id": uid, "role": "project_viewer"}).Want(t, 201)
		for _, p := range []string{pathA, "/api/v1/orgs/" + f.orgA + "/events/ws", "/api/v1/admin/events/ws"} {
			if _, resp, err := wsDial(ctx, s, p, viewerB.Token, "", nil); err == nil || resp == nil || (resp.StatusCode != 404 && resp.StatusCode != 403) {
				t.Fatalf("viewer of B opened %s: %v %+v", p, err, resp)
			}
		}
		cb, _, err := wsDial(ctx, s, "/api/v1/projects/"+f.projB+"/events/ws", viewerB.Token, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range wsRead(t, ctx, cb, 2) {
			if e.ProjectID != f.projB {
				t.Fatalf("viewer of B received %+v", e)
			}
		}
		createSAs(t, f.admin, f.projA, 2) // A's events must not arrive on B's socket
		createSAs(t, f.admin, f.projB, 1)
		if e := wsRead(t, ctx, cb, 1)[0]; e.ProjectID != f.projB {
			t.Fatalf("viewer of B received %+v", e)
		}
		_ = cb.CloseNow()

		// Past retention: one error message, then close 4410. The only
		// retained event is B's, so nothing is named (TestEventResumeStaysInScope
		// has the answer naming the scope's oldest event).
		s.SettleEvents()
		if _, err := s.DB.Queries().PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		c, _, err = wsDial(ctx, s, pathA+"?last_event_id="+strconv.FormatInt(got[0].Sequence, 10), f.admin.Token, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var msg struct {
			Error struct {
				Code    string         `json:"code"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &msg); err != nil || msg.Error.Code != "cursor_expired" || len(msg.Error.Details) != 0 {
			t.Fatalf("expired resume: %s", b)
		}
		_, _, err = c.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != events.CloseCursorExpired || ce.Reason != "cursor_expired" {
			t.Fatalf("expired resume closed with %v", err)
		}
	})
}

// floodEvents commits n large events of project A in one transaction
// (several MB: more than the socket buffers hold).
func floodEvents(t *testing.T, s *servertest.Server, n int) {
	t.Helper()
	ctx := principal.With(context.Background(), principal.SystemActor)
	pad := strings.Repeat("x", 3000)
	err := s.DB.Mutate(ctx, func(tx *store.Tx) error {
		for i := 0; i < n; i++ {
			data := map[string]any{"entitlement_id": "0190a0c0-0000-7000-8000-000000000000", "app_slug": "flood",
				"enabled": true, "policy_overrides": map[string]any{}}
			if err := tx.Emit(store.Event{Type: "apps.entitlement.updated", Subject: fmt.Sprintf("flood/%d/%s", i, pad),
				OrgID: s.Creds.OrgID, ProjectID: s.Creds.ProjectID}, data); err != nil {
				return err
			}
		}
		return tx.Audit(store.AuditEvent{Action: "test.flood", ResourceType: "test", OrgID: s.Creds.OrgID, ProjectID: s.Creds.ProjectID}, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// smallBufferDialer keeps the client's receive buffer small, so a reader
// that stops reading blocks the server within a few MB.
func smallBufferDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10) })
		return errors.Join(err, serr)
	}}
}

const floodN = 2000

func slowServer(t *testing.T, d store.Dialect) *servertest.Server {
	return servertest.Start(t, d, func(c *config.Config) { c.Events.WriteTimeout = 300 * time.Millisecond })
}

// A consumer that stops reading is disconnected after the write timeout
// instead of holding the server, and resumes exactly from its last id.
func TestEventStreamDisconnectsSlowConsumer(t *testing.T) {
	t.Parallel()
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Parallel()
		s := slowServer(t, db.Dialect())
		admin := s.Admin()
		floodEvents(t, s, floodN)
		s.SettleEvents()

		t.Run("sse", func(t *testing.T) {
			conn, err := smallBufferDialer().Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /api/v1/projects/%s/events/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", s.Creds.ProjectID, admin.Token)
			waitSlowDisconnect(t, s)
			// Reading now drains what was buffered, then the stream ends
			// before the last event.
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			last, n := int64(0), 0
			sc := bufio.NewScanner(conn)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					last, _ = strconv.ParseInt(v, 10, 64)
					n++
				}
			}
			if n == 0 || last >= newest(t, s) {
				t.Fatalf("slow SSE consumer received %d events (to %d of %d) before the disconnect (%v)", n, last, newest(t, s), sc.Err())
			}
			resumeRest(t, s, admin.Token, last)
		})
		t.Run("websocket", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			hc := &http.Client{Transport: &http.Transport{DialContext: smallBufferDialer().DialContext}}
			c, _, err := wsDial(ctx, s, "/api/v1/projects/"+s.Creds.ProjectID+"/events/ws", admin.Token, "", hc)
			if err != nil {
				t.Fatal(err)
			}
			c.SetReadLimit(1 << 20)
			waitSlowDisconnect(t, s)
			last, n := int64(0), 0
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					break
				}
				var e events.Envelope
				if json.Unmarshal(b, &e) != nil {
					t.Fatalf("not an event: %.200s", b)
				}
				last, n = e.Sequence, n+1
			}
			if n == 0 || last >= newest(t, s) {
				t.Fatalf("slow WebSocket consumer received %d events (to %d of %d) before the disconnect", n, last, newest(t, s))
			}
			resumeRest(t, s, admin.Token, last)
		})
	})
}

// waitSlowDisconnect waits until the server has logged one more slow
// consumer disconnect.
func waitSlowDisconnect(t *testing.T, s *servertest.Server) {
	t.Helper()
	before := strings.Count(s.LogText(), events.ErrSlowConsumer.Error())
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(s.LogText(), events.ErrSlowConsumer.Error()) == before {
		if time.Now().After(deadline) {
			var lines []string
			for _, l := range strings.Split(s.LogText(), "\n") {
				if strings.Contains(l, "stream") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("the server did not disconnect a consumer that stopped reading; stream logs:\n%s", strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newest(t *testing.T, s *servertest.Server) int64 {
	_, n, err := s.DB.Queries().EventBounds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// resumeRest resumes after `last` over SSE and checks that exactly the
// remaining events arrive, in order.
func resumeRest(t *testing.T, s *servertest.Server, token string, last int64) {
	t.Helper()
	rest := collect(t, client.New(s.URL, token), s.Creds.ProjectID, strconv.FormatInt(last, 10), int(newest(t, s)-last))
	for i, e := range rest {
		if e.Sequence != last+int64(i)+1 {
			t.Fatalf("resume after %d: event %d has sequence %d", last, i, e.Sequence)
		}
	}
}

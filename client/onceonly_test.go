package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// A request that spends what it sends (a wrapping token, a join token, an
// assertion) or signs in is sent once: when its connection dies after the
// server read it, the caller gets the error. With the idempotency key Do
// gives every POST, net/http sent it again by itself on a new connection,
// and the caller saw only the repeat's answer (for an unwrap: 409, token
// already used, which the node agent reports as refused credentials).
func TestRequestsThatSpendATokenAreSentOnce(t *testing.T) {
	ctx := context.Background()
	for name, call := range map[string]func(c *Client) error{
		"unwrap":    func(c *Client) error { _, err := c.Unwrap(ctx, "wrap"); return err },
		"login":     func(c *Client) error { _, err := c.Login(ctx, "a@example.com", "pw"); return err },
		"join":      func(c *Client) error { _, err := c.JoinNode(ctx, nodeapi.JoinRequest{JoinToken: "join"}); return err },
		"nodetoken": func(c *Client) error { _, err := c.NodeToken(ctx, "assertion"); return err },
		"exchange":  func(c *Client) error { _, err := c.ExchangeAssertion(ctx, "assertion"); return err },
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			posts := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet { // warms a keep-alive connection
					_, _ = io.WriteString(w, `{}`)
					return
				}
				_, _ = io.ReadAll(r.Body)
				mu.Lock()
				posts++
				first := posts == 1
				mu.Unlock()
				if first { // read, then the connection dies unanswered
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = conn.Close()
					}
					return
				}
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, `{"error":{"code":"wrapping_token_invalid","message":"used","correlation_id":"c"}}`)
			}))
			defer srv.Close()
			c := New(srv.URL, "tok")
			if err := c.Do(ctx, http.MethodGet, "/warm", nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			err := call(c)
			mu.Lock()
			defer mu.Unlock()
			if posts != 1 {
				t.Fatalf("the server was sent the request %d times (the call returned %v); want once, the dead connection's error to the caller", posts, err)
			}
			if err == nil {
				t.Fatal("a request whose connection died unanswered returned no error")
			}
		})
	}
}

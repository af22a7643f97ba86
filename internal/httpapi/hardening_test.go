package httpapi_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// Unknown routes and wrong methods answered concurrently must not share
// state between requests (run with -race).
func TestConcurrentUnmatchedRoutes(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, "sqlite")
	c := s.Anonymous()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				c.Do("GET", "/api/v1/nothing-here", nil).Want(t, http.StatusNotFound)
			} else {
				c.Do("PATCH", "/api/v1/me", nil).Want(t, http.StatusMethodNotAllowed)
			}
		}()
	}
	wg.Wait()
}

// A cursor this server did not issue is refused on every list, audit events
// included, instead of answering an empty or a full page.
func TestBadCursorIsRefusedEverywhere(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		for _, path := range []string{
			"/api/v1/audit-events",
			"/api/v1/orgs",
			"/api/v1/orgs/" + s.Creds.OrgID + "/projects",
			"/api/v1/orgs/" + s.Creds.OrgID + "/members",
		} {
			for _, cur := range []string{"abc", "zzzzzzzz", "%25%25", "MDAwMDAwMDAtMDAwMC0wMDAwLTAwMDAtMDAwMDAwMDAwMDAwMA"} {
				r := admin.Do("GET", path+"?cursor="+cur, nil).Want(t, http.StatusBadRequest)
				if r.ErrorCode() != "invalid_cursor" {
					t.Fatalf("%s cursor %q: %s", path, cur, r.Body)
				}
			}
		}
	})
}

// NUL and invalid UTF-8 are refused at the edge with 400 invalid_encoding
// on both dialects, wherever they arrive: body, path, header, query, login.
func TestInvalidEncodingIsRefusedAtTheEdge(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		projects := "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
		before := auditCount(t, s)
		cases := []struct {
			name         string
			c            *servertest.Client
			method, path string
			body         any
			headers      []string
		}{
			{"body NUL escape", admin, "POST", projects, []byte(`{"slug":"abc","name":"a\u0000b"}`), nil},
			{"body NUL in key", admin, "POST", projects, []byte(`{"slug":"abc","name":"a","\u0000":1}`), nil},
			{"body invalid utf8", admin, "POST", projects, []byte("{\"slug\":\"abc\",\"name\":\"\xff\xfe\"}"), nil},
			{"path NUL", admin, "GET", "/api/v1/projects/%00", nil, nil},
			{"path invalid utf8", admin, "GET", "/api/v1/projects/%FF%FE", nil, nil},
			{"anonymous path NUL", s.Anonymous(), "GET", "/api/v1/orgs/%00/projects", nil, nil},
			{"idempotency key", admin, "POST", projects, map[string]string{"slug": "abc", "name": "A"}, []string{"X-Idempotency-Key", "k\xff\xfe"}},
			{"query NUL", admin, "GET", "/api/v1/audit-events?action=%00", nil, nil},
			{"query invalid utf8", admin, "GET", "/api/v1/audit-events?resource_id=%FF", nil, nil},
			{"login email NUL", s.Anonymous(), "POST", "/api/v1/auth/login", []byte(`{"email":"admin\u0000@example.com","password":"x"}`), nil},
			{"login email invalid utf8", s.Anonymous(), "POST", "/api/v1/auth/login", []byte("{\"email\":\"\xc3\x28@example.com\",\"password\":\"x\"}"), nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := tc.c.Do(tc.method, tc.path, tc.body, tc.headers...).Want(t, http.StatusBadRequest)
				if r.ErrorCode() != "invalid_encoding" {
					t.Fatalf("code %q: %s", r.ErrorCode(), r.Body)
				}
			})
		}
		if n := auditCount(t, s); n != before {
			t.Fatalf("refused requests wrote %d audit rows", n-before)
		}
	})
}

// A body trickled a byte at a time is cut by the server's read timeout: the
// connection is closed well before the client's own give-up bound.
func TestSlowlorisBodyIsCut(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, "sqlite", func(c *config.Config) { c.ReadTimeout = 500 * time.Millisecond })
	token := s.Admin().Token
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/orgs/%s/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", s.Creds.OrgID, token)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the attacker: one byte at a time until the server hangs up
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	// Without a read timeout the trickle keeps the request alive forever;
	// 20 s is only the test's own bound, 40 times the configured timeout.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a trickled request open past its read timeout")
	}
}

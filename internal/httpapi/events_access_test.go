package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// streamEnd is how an event stream ended.
type streamEnd struct {
	code      string // the error code of the last message (SSE event: error, or the WebSocket {"error"} message)
	closeCode websocket.StatusCode
	reason    string // the WebSocket close reason
	closed    bool   // the server ended the stream (EOF / close frame)
	at        time.Time
	err       error
}

// openStream opens path (…/events, with a query or none) as SSE
// (…/stream) or WebSocket (…/ws) with token, and reports on the channel
// how it ended.
func openStream(t *testing.T, ctx context.Context, s *servertest.Server, transport, path, token string) <-chan streamEnd {
	t.Helper()
	ch := make(chan streamEnd, 1)
	path, query, _ := strings.Cut(path, "?")
	if query != "" {
		query = "?" + query
	}
	if transport == "ws" {
		c, _, err := wsDial(ctx, s, path+"/ws"+query, token, "", nil)
		if err != nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		go func() {
			defer c.CloseNow()
			var end streamEnd
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					var ce websocket.CloseError
					end.closed = errors.As(err, &ce)
					end.closeCode, end.reason, end.at, end.err = ce.Code, ce.Reason, time.Now(), err
					ch <- end
					return
				}
				end.code = errorCode(b)
			}
		}()
		return ch
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+path+"/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("open %s: %v %v", path, resp, err)
	}
	go func() {
		defer resp.Body.Close()
		var end streamEnd
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		typ := ""
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				typ = line[len("event: "):]
			case strings.HasPrefix(line, "data: ") && typ == "error":
				end.code = errorCode([]byte(line[len("data: "):]))
			case line == "":
				typ = ""
			}
		}
		end.closed, end.at, end.err = sc.Err() == nil, time.Now(), sc.Err()
		ch <- end
	}()
	return ch
}

func errorCode(b []byte) string {
	var m struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Error.Code
}

// tokenExpiry reads the exp claim of an access token.
func tokenExpiry(t *testing.T, tok string) time.Time {
	t.Helper()
	parts := strings.Split(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		Exp int64 `json:"exp"`
	}
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Exp == 0 {
		t.Fatalf("token claims: %v", err)
	}
	return time.Unix(c.Exp, 0)
}

// Open event streams end within seconds once their reader's access ends —
// token expiry, role binding removed, removal from the org, user disabled,
// service account disabled or deleted — on SSE (an error event, then the
// end of the stream) and WebSocket (an error message, then a 44xx close
// naming the reason), at project, org and platform level. The periodic
// re-check is set to its longest (5s): the changes made through this
// replica must end the stream at once, well within it.
//
// Serial (no t.Parallel): it bounds how late the stream ends (3 s), which
// other tests' load would stretch.
func TestEventStreamsEndWhenAccessEnds(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		s := servertest.Start(t, db.Dialect(), func(c *config.Config) { c.Events.Reauthorize = 5 * time.Second })
		admin := s.Admin()
		proj, org := s.Creds.ProjectID, s.Creds.OrgID
		projPath, orgPath := "/api/v1/projects/"+proj+"/events", "/api/v1/orgs/"+org+"/events"
		createSAs(t, admin, proj, 1) // something to stream
		adminID := admin.Do("GET", "/api/v1/me", nil).Want(t, 200).String("id")
		shortTokens := iam.NewTokens(store.IAM(s.DB).Read(), s.App.Tokens.Ring, 3*time.Second, time.Minute, nil)

		member := func(scopePath, role string) (userID, bindingID, token string) {
			uid, c := s.NewUser(admin, "reader-"+uuid.NewString()[:8]+"@example.com")
			b := admin.Do("POST", scopePath+"/members", map[string]string{"user_id": uid, "role": role}).Want(t, 201).String("id")
			return uid, b, c.Token
		}
		serviceAccount := func() (id, token string) {
			r := admin.Do("POST", "/api/v1/projects/"+proj+"/service-accounts", map[string]any{"name": "reader",
				"slug": "reader-" + uuid.NewString()[:8], "roles": []string{"project_viewer"}}).Want(t, 201)
			kf := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: r.String("id"), ProjectID: proj,
				KeyID: r.String("key_id"), PrivateKeyPEM: r.String("private_key_pem"), TokenURL: r.String("token_url")}
			a, err := client.SignAssertion(kf, kf.TokenURL, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			tok := s.Anonymous().Do("POST", "/api/v1/auth/service-account/token",
				map[string]string{"grant_type": client.GrantTypeJWTBearer, "assertion": a}).Want(t, 200).String("access_token")
			return r.String("id"), tok
		}

		type tc struct {
			name, path, token, want string
			change                  func() // nil: the token expires
		}
		cases := func() []tc {
			var out []tc
			// Token expiry (platform stream of the platform admin): ends at
			// exp. Its token is issued when its subtest opens the stream:
			// issued here, its 3 s could pass while the other cases are set
			// up, and the stream would open already expired (the token
			// check allows 5 s of clock skew) and end at once.
			out = append(out, tc{name: "token expired", path: "/api/v1/admin/events", want: events.ReasonTokenExpired})
			_, b, tok := member("/api/v1/projects/"+proj, "project_viewer")
			out = append(out, tc{"role binding removed", projPath, tok, events.ReasonAccessRevoked, func() {
				admin.Do("DELETE", "/api/v1/projects/"+proj+"/members/"+b, nil).Want(t, 204)
			}})
			_, ob, otok := member("/api/v1/orgs/"+org, "org_admin")
			out = append(out, tc{"removed from the org", orgPath, otok, events.ReasonAccessRevoked, func() {
				admin.Do("DELETE", "/api/v1/orgs/"+org+"/members/"+ob, nil).Want(t, 204)
			}})
			uid, _, utok := member("/api/v1/projects/"+proj, "project_viewer")
			out = append(out, tc{"user disabled", projPath, utok, events.ReasonAccountDisabled, func() {
				admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
			}})
			said, satok := serviceAccount()
			out = append(out, tc{"service account disabled", projPath, satok, events.ReasonAccountDisabled, func() {
				admin.Do("POST", "/api/v1/projects/"+proj+"/service-accounts/"+said+"/disable", nil).Want(t, 200)
			}})
			sdid, sdtok := serviceAccount()
			out = append(out, tc{"service account deleted", projPath, sdtok, events.ReasonAccountDeleted, func() {
				admin.Do("DELETE", "/api/v1/projects/"+proj+"/service-accounts/"+sdid, nil).Want(t, 204)
			}})
			return out
		}

		for _, transport := range []string{"sse", "ws"} {
			for _, c := range cases() {
				t.Run(transport+"/"+c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					if c.change == nil {
						short, err := shortTokens.Issue(principal.Principal{Type: principal.User, ID: adminID, Email: s.Creds.AdminEmail}, "")
						if err != nil {
							t.Fatal(err)
						}
						c.token = short.AccessToken
					}
					ended := openStream(t, ctx, s, transport, c.path, c.token)
					from := tokenExpiry(t, c.token)
					if c.change != nil {
						time.Sleep(200 * time.Millisecond) // the stream is following
						from = time.Now()
						c.change()
					}
					end := <-ended
					if !end.closed || end.code != c.want {
						t.Fatalf("stream ended with code %q (closed by the server: %v, %v), want %q", end.code, end.closed, end.err, c.want)
					}
					if d := end.at.Sub(from); d < -100*time.Millisecond || d > 3*time.Second {
						t.Fatalf("stream ended %v after the change (or expiry), want within 3s", d)
					}
					if transport == "ws" {
						wantCode := events.CloseUnauthenticated
						if c.want == events.ReasonAccessRevoked {
							wantCode = events.CloseAccessRevoked
						}
						if end.closeCode != wantCode || end.reason != c.want {
							t.Fatalf("close %d %q, want %d %q", end.closeCode, end.reason, wantCode, c.want)
						}
					}
				})
			}
		}
	})
}

// A change made where this replica does not see it (another replica, or
// the database directly) ends the stream at the next periodic re-check;
// the Go client returns the reason as an *APIError instead of reconnecting.
//
// Serial (no t.Parallel): it bounds how late the re-check ends the stream
// (2 s), which other tests' load would stretch.
func TestEventStreamsRecheckPeriodically(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		s := servertest.Start(t, db.Dialect(), func(c *config.Config) { c.Events.Reauthorize = 300 * time.Millisecond })
		admin := s.Admin()
		proj := s.Creds.ProjectID
		for _, transport := range []string{"sse", "ws", "client"} {
			t.Run(transport, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				uid, c := s.NewUser(admin, "reader-"+uuid.NewString()[:8]+"@example.com")
				b := admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": uid, "role": "project_viewer"}).Want(t, 201).String("id")
				var ended <-chan streamEnd
				clientErr := make(chan error, 1)
				if transport == "client" {
					go func() {
						clientErr <- client.New(s.URL, c.Token).StreamEvents(ctx, proj, "", func(client.Event) error { return nil })
					}()
				} else {
					ended = openStream(t, ctx, s, transport, "/api/v1/projects/"+proj+"/events", c.Token)
				}
				time.Sleep(200 * time.Millisecond)
				// Another replica removed the binding: no local notice.
				sys := principal.With(ctx, principal.SystemActor)
				if err := s.DB.Mutate(sys, func(tx *store.Tx) error {
					if err := tx.DeleteRoleBinding(sys, b); err != nil {
						return err
					}
					return tx.Audit(store.AuditEvent{Action: "role_binding.delete", ResourceType: "role_binding", ResourceID: b}, nil, nil)
				}); err != nil {
					t.Fatal(err)
				}
				from := time.Now()
				if transport == "client" {
					var api *client.APIError
					if err := <-clientErr; !errors.As(err, &api) || api.Code != events.ReasonAccessRevoked || api.Status != http.StatusForbidden {
						t.Fatalf("client stream returned %v, want access_revoked (403)", err)
					}
				} else if end := <-ended; !end.closed || end.code != events.ReasonAccessRevoked {
					t.Fatalf("stream ended with %q (%v)", end.code, end.err)
				}
				if d := time.Since(from); d > 2*time.Second {
					t.Fatalf("stream ended %v after the change, want within the 300ms re-check (+ slack)", d)
				}
			})
		}
	})
}

// A resume point never reveals another tenant's events: a 410 names only
// the oldest event retained in the caller's scope, and an event id of
// another tenant is refused exactly like an id that does not exist, its
// position never echoed — on the project and org streams, over SSE and
// WebSocket.
func TestEventResumeStaysInScope(t *testing.T) {
	t.Parallel()
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Parallel()
		f := newTenancy(t, db.Dialect())
		s := f.s
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list := func(path string) []map[string]any {
			return f.admin.Do("GET", path+"?type=iam.service_account.", nil).Want(t, 200).Items()
		}
		projA, orgA := "/api/v1/projects/"+f.projA+"/events", "/api/v1/orgs/"+f.orgA+"/events"

		// A1 and A1' (to be pruned: resuming after A1 misses A1'), then B's
		// events (the platform's oldest after pruning), then A2.
		createSAs(t, f.admin, f.projA, 2)
		s.SettleEvents()
		a1 := list(projA)[0]
		time.Sleep(20 * time.Millisecond)
		cutoff := time.Now()
		time.Sleep(20 * time.Millisecond)
		createSAs(t, f.admin, f.projB, 2)
		createSAs(t, f.admin, f.projA, 1)
		s.SettleEvents()
		if _, err := s.DB.Queries().PruneEvents(ctx, cutoff); err != nil {
			t.Fatal(err)
		}
		a2, b1 := list(projA)[0], list("/api/v1/projects/" + f.projB + "/events")[0]
		if a2["id"] == a1["id"] {
			t.Fatal("A1 was not pruned")
		}
		oldest, _, err := s.DB.Queries().EventBounds(ctx)
		if err != nil || float64(oldest) != b1["sequence"] {
			t.Fatalf("the platform's oldest event is %d, want B's %v (%v)", oldest, b1["sequence"], err)
		}

		for _, path := range []string{projA, orgA} {
			// Past retention: the 410 names A2, the scope's oldest.
			r := f.admin.Do("GET", path+"/stream", nil, "Last-Event-ID", seqOf(a1["sequence"])).Want(t, 410)
			d, _ := r.JSON["error"].(map[string]any)["details"].(map[string]any)
			if r.ErrorCode() != "cursor_expired" || d["oldest_event_id"] != a2["id"] || d["oldest_sequence"] != a2["sequence"] {
				t.Fatalf("%s: expired resume named %s, want A2 %v", path, r.Body, a2["id"])
			}
			// B's event id is answered like a made-up one.
			madeUp := f.admin.Do("GET", path+"/stream", nil, "Last-Event-ID", uuid.NewString()).Want(t, 410)
			for _, h := range []struct{ header, query string }{{b1["id"].(string), ""}, {"", b1["id"].(string)}} {
				p := path + "/stream"
				if h.query != "" {
					p += "?last_event_id=" + h.query
				}
				var r *servertest.Response
				if h.header != "" {
					r = f.admin.Do("GET", p, nil, "Last-Event-ID", h.header).Want(t, 410)
				} else {
					r = f.admin.Do("GET", p, nil).Want(t, 410)
				}
				if !sameError(r, madeUp) {
					t.Fatalf("%s: foreign id answered %s, a made-up one %s", path, r.Body, madeUp.Body)
				}
			}
			// WebSocket: the same error message and close for both.
			var msgs []string
			for _, id := range []string{b1["id"].(string), uuid.NewString()} {
				c, _, err := wsDial(ctx, s, path+"/ws?last_event_id="+id, f.admin.Token, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				_, b, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var m struct {
					Error struct {
						Code, Message string
						Details       map[string]any
					}
				}
				if err := json.Unmarshal(b, &m); err != nil || m.Error.Code != "cursor_expired" || m.Error.Details["oldest_event_id"] != a2["id"] {
					t.Fatalf("%s ws resume from %s: %s", path, id, b)
				}
				_, _, err = c.Read(ctx)
				var ce websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != events.CloseCursorExpired {
					t.Fatalf("%s ws resume from %s closed with %v", path, id, err)
				}
				msgs = append(msgs, m.Error.Message+" "+ce.Reason)
			}
			if msgs[0] != msgs[1] {
				t.Fatalf("%s ws: foreign id %q, made-up id %q", path, msgs[0], msgs[1])
			}
		}
	})
}

func seqOf(v any) string { f, _ := v.(float64); return strconv.FormatInt(int64(f), 10) }

// sameError reports whether two error answers match but for the
// correlation id.
func sameError(a, b *servertest.Response) bool {
	ea, _ := a.JSON["error"].(map[string]any)
	eb, _ := b.JSON["error"].(map[string]any)
	if a.Status != b.Status || ea == nil || eb == nil {
		return false
	}
	ja, _ := json.Marshal(map[string]any{"c": ea["code"], "m": ea["message"], "d": ea["details"]})
	jb, _ := json.Marshal(map[string]any{"c": eb["code"], "m": eb["message"], "d": eb["details"]})
	return string(ja) == string(jb)
}

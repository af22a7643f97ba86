package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// FuzzRequestEncoding sends arbitrary text through every place a request
// carries it (body string, path segment, query value, idempotency header)
// to a real server on each dialect: never a 5xx.
func FuzzRequestEncoding(f *testing.F) {
	for _, s := range []string{"ok", "", "\x00", "a\x00b", "\xff\xfe", "\xc3\x28", "\u200b", "\u202e", "%00", "%FF", "🙂"} {
		f.Add(s)
	}
	type target struct {
		s     *servertest.Server
		token string
	}
	var targets []target
	for _, d := range storetest.Dialects {
		s := servertest.Start(f, d)
		targets = append(targets, target{s, s.Admin().Token})
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, tg := range targets {
			org := tg.s.Creds.OrgID
			name, _ := json.Marshal(text) // invalid UTF-8 becomes U+FFFD here...
			raw := append([]byte(`{"slug":"fz","name":"`), text...)
			raw = append(raw, `"}`...) // ...and is sent raw here
			reqs := []*http.Request{
				mk(t, "POST", tg.s.URL+"/api/v1/orgs/"+org+"/projects", append(append([]byte(`{"slug":"fz","name":`), name...), '}')),
				mk(t, "POST", tg.s.URL+"/api/v1/orgs/"+org+"/projects", raw),
				mk(t, "GET", tg.s.URL+"/api/v1/projects/"+url.PathEscape(text), nil),
				mk(t, "GET", tg.s.URL+"/api/v1/audit-events?action="+url.QueryEscape(text), nil),
				mk(t, "POST", tg.s.URL+"/api/v1/auth/login", append(append([]byte(`{"password":"x","email":`), name...), '}')),
			}
			reqs[0].Header.Set("X-Idempotency-Key", text)
			for _, r := range reqs {
				if r.URL.Path != "/api/v1/auth/login" {
					r.Header.Set("Authorization", "Bearer "+tg.token)
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					continue // the client refused to send it (e.g. NUL in a header)
				}
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					t.Fatalf("%s %s (%q) on %s: %d", r.Method, r.URL, text, tg.s.DB.Dialect(), resp.StatusCode)
				}
			}
		}
	})
}

func mk(t *testing.T, method, u string, body []byte) *http.Request {
	var r *http.Request
	var err error
	if body == nil {
		r, err = http.NewRequest(method, u, nil)
	} else {
		r, err = http.NewRequest(method, u, bytes.NewReader(body))
		if err == nil {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		t.Skip(err)
	}
	return r
}

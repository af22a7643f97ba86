package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// countingReader counts what is read of a request's body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// An anonymous POST /login (or any request to the console) carries at
// most maxBodyBytes: one past it is refused with 413 and no more of it is
// read than the cap and the one byte that tells it is over; a multipart
// body, which the console's forms never send, is refused with 415 unread.
// The API's routes cap their bodies in its middleware; the console, served
// from the API's fallback, caps its own.
func TestConsoleCapsRequestBodies(t *testing.T) {
	c, _, _, _ := openAppConsole(t, "https://console.example")
	const token = "a-login-csrf-token-of-at-least-32-bytes"
	huge := "csrf_token=" + token + "&email=a%40example.com&password=pw&next=%2F&pad=" + strings.Repeat("a", 4<<20)
	post := func(body *countingReader, length int64, contentType string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "https://console.example/login", body)
		req.ContentLength = length
		req.Header.Set("Content-Type", contentType)
		req.AddCookie(&http.Cookie{Name: "__Host-gpuaas_login_csrf", Value: token})
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		name   string
		length int64
	}{{"its length told", int64(len(huge))}, {"its length untold (chunked)", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingReader{r: strings.NewReader(huge)}
			rec := post(body, tc.length, "application/x-www-form-urlencoded")
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "KiB") {
				t.Errorf("a %d-byte sign-in: %d, want 413 and a page saying why\n%s", len(huge), rec.Code, rec.Body)
			}
			if body.n > maxBodyBytes+1 {
				t.Errorf("the console read %d bytes of the body; the cap is %d", body.n, maxBodyBytes)
			}
			if rec.Header().Get("Set-Cookie") != "" {
				t.Errorf("a refused sign-in set a cookie: %q", rec.Header().Values("Set-Cookie"))
			}
		})
	}
	t.Run("multipart", func(t *testing.T) {
		for _, ct := range []string{"multipart/form-data; boundary=x", "Multipart/Form-Data; boundary=x", "multipart/mixed; boundary=x"} {
			mp := "--x\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n" + strings.Repeat("a", 1<<20) + "\r\n--x--\r\n"
			body := &countingReader{r: strings.NewReader(mp)}
			rec := post(body, -1, ct)
			if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), "multipart/form-data") {
				t.Errorf("a %s sign-in: %d, want 415 and a page saying why\n%s", ct, rec.Code, rec.Body)
			}
			if body.n != 0 {
				t.Errorf("a %s sign-in: the console read %d bytes of it", ct, body.n)
			}
		}
	})
	// A form up to the cap goes through: the sign-in works.
	t.Run("a form at the cap", func(t *testing.T) {
		c, _, _, _ := openAppConsole(t, "https://console.example")
		withLogin(c)
		form := url.Values{"csrf_token": {token}, "email": {"a@example.com"}, "password": {"pw"}, "next": {"/workloads"}}.Encode() + "&pad="
		form += strings.Repeat("a", maxBodyBytes-len(form))
		req := httptest.NewRequest("POST", "https://console.example/login", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "__Host-gpuaas_login_csrf", Value: token})
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/workloads" {
			t.Errorf("a %d-byte sign-in: %d %q, want it signed in", len(form), rec.Code, rec.Header().Get("Location"))
		}
	})
}

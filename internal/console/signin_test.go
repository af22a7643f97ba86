package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A sign-in in a browser that still holds a live session ends that
// session on the server, for the same person as for another: its cookie,
// copied before or left behind, opens nothing after. A sign-in that fails
// ends it too (the browser's holder meant to be someone else).
func TestSignInEndsTheBrowsersPreviousSession(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		admin := s.Admin()
		const email, pw = "erin@example.com", "a-long-password-for-erin"
		admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": pw}).Want(t, http.StatusCreated)
		signedIn := func(session *http.Cookie) bool {
			code, _ := status(t, s, "/projects", session)
			return code == http.StatusOK
		}

		first := signIn(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword)
		if !signedIn(first) {
			t.Fatal("the first session does not serve /projects")
		}
		// The same person again, in the same browser.
		second := signInOver(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword, first)
		if second == nil || !signedIn(second) {
			t.Fatal("the second sign-in gave no working session")
		}
		if signedIn(first) {
			t.Error("the session before a sign-in of the same person still serves /projects")
		}
		// Another person, in the same browser.
		third := signInOver(t, s, email, pw, second)
		if third == nil || !signedIn(third) {
			t.Fatal("another person's sign-in gave no working session")
		}
		if signedIn(second) {
			t.Error("the session before another person's sign-in still serves /projects")
		}
		// A sign-in that fails ends the browser's session all the same.
		if got := signInOver(t, s, email, "a-wrong-password", third); got != nil {
			t.Fatal("a wrong password gave a session")
		}
		if signedIn(third) {
			t.Error("the session before a failed sign-in still serves /projects")
		}
	})
}

// signInOver signs in through the console's form in a browser that holds
// the session cookie old; it returns the new session cookie, or nil when
// the sign-in set none.
func signInOver(tb testing.TB, s *servertest.Server, email, password string, old *http.Cookie) *http.Cookie {
	tb.Helper()
	resp, err := http.Get(s.URL + "/login") // the form and its CSRF cookie (signed in, /login would redirect)
	if err != nil {
		tb.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cookies := append(resp.Cookies(), old)
	out := postForm(tb, s, "/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {csrfOf(tb, string(page))},
		"next": {"/"}}, cookies...)
	for _, c := range out.Cookies() {
		if strings.HasSuffix(c.Name, "gpuaas_session") && c.MaxAge >= 0 && c.Value != "" {
			return c
		}
	}
	return nil
}

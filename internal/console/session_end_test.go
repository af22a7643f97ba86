package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Signing out ends the session's open event stream too: the API's stream
// checks the token the console minted for the session, and that token
// outlives the sign-out.
func TestSignOutEndsTheSessionsEventStream(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	session := consoleSession(t, s)
	csrf := csrfOf(t, fetch(t, s.URL+"/projects", session))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/events/stream?project="+s.Creds.ProjectID, nil)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	ended := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		ended <- time.Now()
	}()

	if out := postForm(t, s, "/logout", url.Values{"csrf_token": {csrf}}, session); out.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", out.StatusCode)
	}
	signedOut := time.Now()
	select {
	case at := <-ended:
		t.Logf("the stream ended %v after the sign-out", at.Sub(signedOut).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream was still open 10 s after its session was signed out")
	}
	// The page's script, not the person, reopens it: signed out, it is
	// told so (401), not sent to a sign-in page it cannot show.
	if code, loc := status(t, s, "/events/stream?project="+s.Creds.ProjectID, session); code != http.StatusUnauthorized {
		t.Errorf("the signed-out session reopened the stream: %d %s", code, loc)
	}
}

// A disabled account's console sessions end, and re-enabling the account
// revives none of them (as none of its tokens): the person signs in again.
func TestDisablingAnAccountEndsItsConsoleSessions(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	const email, pw = "dana@example.com", "a-long-password-for-dana"
	id := admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": pw}).Want(t, http.StatusCreated).String("id")
	session := signIn(t, s, email, pw)
	if code, _ := status(t, s, "/projects", session); code != http.StatusOK {
		t.Fatalf("signed in: /projects %d", code)
	}

	admin.Do("POST", "/api/v1/users/"+id+"/disable", nil).Want(t, http.StatusOK)
	if code, loc := status(t, s, "/projects", session); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Errorf("disabled: /projects %d %q, want the sign-in page", code, loc)
	}
	admin.Do("POST", "/api/v1/users/"+id+"/enable", nil).Want(t, http.StatusOK)
	if code, loc := status(t, s, "/projects", session); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Errorf("re-enabled: the session from before the disable answers /projects %d %q, want the sign-in page", code, loc)
	}
	if code, _ := status(t, s, "/projects", signIn(t, s, email, pw)); code != http.StatusOK {
		t.Errorf("a new sign-in after re-enabling: /projects %d", code)
	}
}

// A project past the switcher's first page (an org's 101st) is worked in
// like any other once chosen: chosen by its id, it stays chosen.
func TestAProjectPastTheSwitchersPageCanBeWorkedIn(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	var last string
	for i := range 100 {
		last = admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": fmt.Sprintf("team-%03d", i),
			"name": fmt.Sprintf("Team %03d", i)}).Want(t, http.StatusCreated).String("id")
	}
	session := consoleSession(t, s)
	page := fetch(t, s.URL+"/projects", session)
	if strings.Contains(page, last) {
		t.Fatalf("the 101st project is in the switcher: the test needs one past its page")
	}
	if !strings.Contains(page, `name="project_id" required`) {
		t.Errorf("the projects page has no way to choose a project past its list")
	}
	form := url.Values{"project_id": {last}, "csrf_token": {csrfOf(t, page)}, "next": {"/workloads"}}
	if resp := postForm(t, s, "/projects/select", form, session); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("select: %d", resp.StatusCode)
	}
	if code, loc := status(t, s, "/workloads", session); code != http.StatusOK {
		t.Fatalf("/workloads in the 101st project: %d → %q", code, loc)
	}
	if body := fetch(t, s.URL+"/workloads", session); !strings.Contains(body, "team-099") {
		t.Errorf("the instance list does not name the project it is in (team-099)")
	}
}

package console_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// consoleSession signs in through the console's form as the admin and
// selects the dev project; it returns the session cookie.
func consoleSession(tb testing.TB, s *servertest.Server) *http.Cookie {
	tb.Helper()
	return sessionIn(tb, s, s.Creds.AdminEmail, s.Creds.AdminPassword, s.Creds.ProjectID)
}

// sessionIn signs in through the console's form and selects project; it
// returns the session cookie.
func sessionIn(tb testing.TB, s *servertest.Server, email, password, project string) *http.Cookie {
	tb.Helper()
	session := signIn(tb, s, email, password)
	csrf := csrfOf(tb, fetch(tb, s.URL+"/projects", session))
	form := url.Values{"project_id": {project}, "csrf_token": {csrf}, "next": {"/workloads"}}
	if resp := postForm(tb, s, "/projects/select", form, session); resp.StatusCode != http.StatusSeeOther {
		tb.Fatalf("select project: %d", resp.StatusCode)
	}
	return session
}

// signIn signs in through the console's form; it returns the session
// cookie.
func signIn(tb testing.TB, s *servertest.Server, email, password string) *http.Cookie {
	tb.Helper()
	resp, err := http.Get(s.URL + "/login") // the form, and its CSRF cookie
	if err != nil {
		tb.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp = postForm(tb, s, "/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {csrfOf(tb, string(page))},
		"next": {"/"}}, resp.Cookies()...)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "gpuaas_session" {
			session = c
		}
	}
	if session == nil {
		tb.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return session
}

// fetch is the page at u with session, which must answer 200.
func fetch(tb testing.TB, u string, session *http.Cookie) string {
	tb.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}

// seedInstances writes n running instances into the dev project.
func seedInstances(tb testing.TB, s *servertest.Server, n int) []string {
	tb.Helper()
	p, err := s.DB.Queries().GetProject(context.Background(), s.Creds.ProjectID)
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	now := time.Now().UTC()
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		if err := s.DB.Queries().InsertAppInstance(context.Background(), instances.AppInstance{ID: ids[i], OrgID: p.OrgID, ProjectID: p.ID,
			AppSlug: "bench-app", DisplayName: fmt.Sprintf("bench-%04d", i), Version: "1.0.0", Status: "running",
			OperatingMode: "tenant_dedicated", ControlPlaneScope: "project", RuntimeBackend: "launchable_oci",
			TenantBoundaryMode: "project_isolated", Effective: []byte(`{"resources":{"gpu_count":1}}`), CreatedBy: "user:bench",
			CreatedAt: now, UpdatedAt: now}); err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[(len(d)*99)/100]
}

// BenchmarkConsolePages: the instance list and an instance page of a
// project with 1,000 instances, on SQLite, measured from the client on
// loopback (an upper bound of the server's time).
//
//	go test ./internal/console -run '^$' -bench BenchmarkConsolePages -benchtime 300x
func BenchmarkConsolePages(b *testing.B) {
	s := servertest.Start(b, store.SQLite)
	ids := seedInstances(b, s, 1000)
	session := consoleSession(b, s)
	for _, bc := range []struct{ name, path, want string }{
		{"instance-list", "/workloads", "bench-0049"},
		{"instance-page", "/workloads/instance/" + ids[500], "bench-0500"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if body := fetch(b, s.URL+bc.path, session); !strings.Contains(body, bc.want) {
				b.Fatalf("%s does not show %s", bc.path, bc.want)
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				fetch(b, s.URL+bc.path, session)
				lat = append(lat, time.Since(start))
			}
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkConsoleStateChange: from the commit of an instance's state
// change to an open instance page having its new state: the event on the
// page's stream plus the fragment the page fetches to re-render.
//
//	go test ./internal/console -run '^$' -bench BenchmarkConsoleStateChange -benchtime 200x
func BenchmarkConsoleStateChange(b *testing.B) {
	s := servertest.Start(b, store.SQLite)
	ids := seedInstances(b, s, 1)
	session := consoleSession(b, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/events/stream", nil)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				events <- line
			}
		}
		close(events)
	}()
	p, _ := s.DB.Queries().GetProject(ctx, s.Creds.ProjectID)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		marker := fmt.Sprintf("change-%d", i)
		start := time.Now()
		err := s.DB.Mutate(ctx, func(tx *store.Tx) error {
			if err := tx.Emit(store.Event{Type: "apps.instance.running", Subject: "app-instances/" + ids[0], OrgID: p.OrgID,
				ProjectID: p.ID}, map[string]string{"app_instance_id": ids[0], "org_id": p.OrgID, "project_id": p.ID,
				"app_slug": "bench-app", "operating_mode": "tenant_dedicated", "control_plane_scope": "project",
				"runtime_backend": "launchable_oci", "correlation_id": marker, "status": "running", "version": "1.0.0"}); err != nil {
				return err
			}
			return tx.Audit(store.AuditEvent{Action: "bench.state_change", ResourceType: "app_instance", ResourceID: ids[0]}, nil, nil)
		})
		if err != nil {
			b.Fatal(err)
		}
		for ev := range events {
			if strings.Contains(ev, marker) {
				break
			}
		}
		fetch(b, s.URL+"/workloads/instance/"+ids[0]+"?fragment=1", session)
		lat = append(lat, time.Since(start))
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}

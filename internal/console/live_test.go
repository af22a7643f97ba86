package console_test

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A change that lands after a live page rendered and before its stream
// opened reaches the page: the page names the event position its state is
// as of, and its stream starts there. From "now" at the opening, the
// change was lost and the page stayed stale (the browser walk once waited
// two minutes on a decommissioned instance shown as decommissioning).
func TestLivePageMissesNothingBeforeItsStreamOpens(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	id := seedInstances(t, s, 1)[0]
	session := consoleSession(t, s)
	after := regexp.MustCompile(`<div id="live" data-after="(\d+)"`)

	for _, path := range []string{"/workloads", "/workloads/instance/" + id} {
		page := fetch(t, s.URL+path, session)
		m := after.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("%s: the live region names no event position:\n%s", path, page)
		}
		// The change, sequenced before the stream opens.
		marker := "between-render-and-stream-" + path
		emitRunning(t, s, id, marker)
		waitSequenced(t, s, m[1])

		for _, tc := range []struct {
			query string
			want  bool
		}{{"&after=" + m[1], true}, {"", false}} {
			got := streamHas(t, s, session, tc.query, marker, 3*time.Second)
			if got != tc.want {
				t.Errorf("%s: the stream opened with %q delivered the change: %t, want %t", path, tc.query, got, tc.want)
			}
		}
	}
}

// emitRunning commits an apps.instance.running event for the instance,
// with marker as its correlation id.
func emitRunning(t *testing.T, s *servertest.Server, id, marker string) {
	t.Helper()
	ctx := context.Background()
	p, err := s.DB.Queries().GetProject(ctx, s.Creds.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	err = s.DB.Mutate(ctx, func(tx *store.Tx) error {
		if err := tx.Emit(store.Event{Type: "apps.instance.running", Subject: "app-instances/" + id, OrgID: p.OrgID,
			ProjectID: p.ID}, map[string]string{"app_instance_id": id, "org_id": p.OrgID, "project_id": p.ID,
			"app_slug": "bench-app", "operating_mode": "tenant_dedicated", "control_plane_scope": "project",
			"runtime_backend": "launchable_oci", "correlation_id": marker, "status": "running", "version": "1.0.0"}); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "test.state_change", ResourceType: "app_instance", ResourceID: id}, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitSequenced waits until the event log's newest position is past pos.
func waitSequenced(t *testing.T, s *servertest.Server, pos string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, newest, err := s.DB.Queries().EventBounds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if p, _ := strconv.ParseInt(pos, 10, 64); newest > p {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event sequenced after %s in 10 s", pos)
		}
	}
}

// streamHas opens the console's event stream for the dev project (query
// appended) and reports whether an event carrying marker arrives within d.
func streamHas(t *testing.T, s *servertest.Server, session *http.Cookie, query, marker string, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/events/stream?project="+s.Creds.ProjectID+query, nil)
	req.AddCookie(session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %q: %d", query, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, marker) {
			return true
		}
	}
	return false
}

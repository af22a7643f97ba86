package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A time filter the store cannot hold (year 0, or a bound that an offset
// moves before year 1 or past 9999 in UTC) is a 400 invalid_time on every
// read that takes one — audit, events (list, stream, republish), billing — not a
// 500 from PostgreSQL (it refuses year 0) nor, on SQLite, a five-digit year
// compared as text out of order.
func TestTimeFiltersOutsideTheStoresRangeAreRefused(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		org, pid := s.Creds.OrgID, s.Creds.ProjectID
		bad := []string{"0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:00"}
		for _, b := range bad {
			v := url.QueryEscape(b)
			for _, path := range []string{
				"/api/v1/audit-events?org_id=" + org + "&since=" + v,
				"/api/v1/audit-events?org_id=" + org + "&until=" + v,
				"/api/v1/projects/" + pid + "/events?since=" + v,
				"/api/v1/orgs/" + org + "/events?until=" + v,
				"/api/v1/admin/events?since=" + v,
				"/api/v1/billing/usage?project_id=" + pid + "&from=" + v,
				"/api/v1/billing/usage?project_id=" + pid + "&to=" + v + "&format=csv",
				"/api/v1/billing/usage?project_id=" + pid + "&from=" + v + "&group_by=usage_source",
				"/api/v1/billing/ledger?project_id=" + pid + "&to=" + v,
				"/api/v1/billing/costs?project_id=" + pid + "&from=" + v,
			} {
				if r := admin.Do("GET", path, nil).Want(t, 400); r.ErrorCode() != "invalid_time" {
					t.Errorf("GET %s: code %q, want invalid_time", path, r.ErrorCode())
				}
			}
			if r := admin.Do("POST", "/api/v1/admin/events/republish", map[string]any{"since": b, "reason": "bounds"}).Want(t, 400); r.ErrorCode() != "invalid_time" {
				t.Errorf("republish since %s: code %q, want invalid_time", b, r.ErrorCode())
			}
			// A stream answers before it reads: the bound is refused
			// with a status, not a stream that opens and then ends.
			for _, path := range []string{
				"/api/v1/projects/" + pid + "/events/stream?since=" + v,
				"/api/v1/orgs/" + org + "/events/stream?until=" + v,
			} {
				if st := streamStatus(t, s, admin.Token, path); st != http.StatusBadRequest {
					t.Errorf("GET %s: status %d, want 400", path, st)
				}
			}
		}
		// The ends of the range are bounds like any other.
		for _, path := range []string{
			"/api/v1/audit-events?org_id=" + org + "&since=0001-01-01T00:00:00Z&until=9999-12-31T23:59:59Z",
			"/api/v1/projects/" + pid + "/events?since=0001-01-01T00:00:00Z&until=9999-12-31T23:59:59Z",
			"/api/v1/billing/usage?project_id=" + pid + "&from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z",
		} {
			admin.Do("GET", path, nil).Want(t, 200)
		}
		if n := len(admin.Do("GET", "/api/v1/audit-events?org_id="+org+"&until=9999-12-31T23:59:59Z", nil).Want(t, 200).Items()); n == 0 {
			t.Error("an until at the end of the range filtered every audit row out")
		}
	})
}

// streamStatus opens an event stream and returns its status without
// reading the stream.
func streamStatus(t *testing.T, s *servertest.Server, token, path string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// A price effective from a time the store cannot hold is refused as a
// field error: year 0 was a 500 on PostgreSQL, and SQLite stored a bound
// an offset carries into year 10000 as text that compares before every
// four-digit year.
func TestPriceEffectiveFromOutsideTheStoresRangeIsRefused(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		for _, b := range []string{"0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:00"} {
			r := admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "allocation", "sku": "bounds.1x",
				"unit_price_micros": 1000, "effective_from": b}).Want(t, 400)
			if !strings.Contains(string(r.Body), `"/effective_from"`) {
				t.Errorf("effective_from %s: the refusal does not name the field: %s", b, r.Body)
			}
		}
		admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "allocation", "sku": "bounds.1x",
			"unit_price_micros": 1000, "effective_from": "9999-12-31T00:00:00Z"}).Want(t, 201)
	})
}

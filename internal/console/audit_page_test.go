package console

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The audit log's next page keeps its filters: the query string goes into
// the link as it is (encoded once), not with its & and = encoded again.
func TestAuditNextPageKeepsItsFilters(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("GET", "/admin/audit?action=apps.instance.ui_open&outcome=denied", nil), 200, "audit", page{Data: auditData{
		Items: []auditRow{{ID: "a1", Action: "apps.instance.ui_open"}}, Next: "c2", Filters: map[string]string{"action": "apps.instance.ui_open"},
		Query: "action=apps.instance.ui_open&outcome=denied"}})
	if body := rec.Body.String(); !strings.Contains(body, `href="?action=apps.instance.ui_open&amp;outcome=denied&cursor=c2"`) {
		t.Errorf("the next page's link loses the filters:\n%s", body)
	}
}

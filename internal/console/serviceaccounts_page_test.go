package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/iam"
)

// An app instance's own service account is listed without the disable
// button the API would refuse (409 managed_by_platform); a project's other
// accounts keep theirs.
func TestServiceAccountsPageOffersNoDisableForAnInstancesOwn(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("GET", "/service-accounts", nil), http.StatusOK, "serviceaccounts", page{
		Session: &sessionView{CSRF: "t", Project: &client.Project{Slug: "web"}}, Data: saData{CanWrite: true, Items: []client.ServiceAccount{
			{ID: "sa-ci", Name: "ci", Status: "active", Roles: []string{iam.RoleAppOperator}},
			{ID: "sa-inst", Name: "app instance", Status: "active", Roles: []string{iam.RoleInstanceWorkload}},
		}}})
	body := rec.Body.String()
	if !strings.Contains(body, `action="/service-accounts/sa-ci/disable"`) {
		t.Errorf("the CI account has no disable button:\n%s", body)
	}
	if strings.Contains(body, `/service-accounts/sa-inst/`) || !strings.Contains(body, "managed by the platform") {
		t.Errorf("the instance's own account is offered a change, or not said to be the platform's:\n%s", body)
	}
}

package console_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The storage page shows each store's quota in force, where it comes from,
// what the project uses and whether it is over, in sizes a person reads. A
// platform admin sets the quotas with its form (CSRF, If-Match from the
// page); a form from before someone else's change is refused with a
// message saying so, and nothing changes. A project admin sees the figures
// and no form, and a post forged with their session is refused by the API.
func TestStoragePage(t *testing.T) {
	s := servertest.Start(t, store.SQLite) // the platform's flags: no quota
	admin := s.Admin()
	p := s.Creds.ProjectID
	quotaPath := "/api/v1/projects/" + p + "/storage/quota"

	// 1500 bytes of blobs, then a blob quota of 1 KiB below them.
	data := bytes.Repeat([]byte("q"), 1500)
	sum := sha256.Sum256(data)
	up := admin.Do("POST", "/api/v1/projects/"+p+"/app-artifacts/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.0",
		"artifact_name": "weights", "artifact_kind": "blob", "source_type": "artifact_store"}).Want(t, http.StatusCreated).String("upload_url")
	admin.Do("PUT", up+"?digest=sha256:"+hex.EncodeToString(sum[:]), data, "Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(data)-1, len(data))).
		Want(t, http.StatusCreated)
	admin.Do("PUT", quotaPath, map[string]any{"blob_quota_bytes": 1024}).Want(t, http.StatusOK)

	session := consoleSession(t, s)
	page := fetch(t, s.URL+"/storage", session)
	blobRow, regRow := storeRow(t, page, "blob_quota"), storeRow(t, page, "registry_quota")
	for _, want := range []string{"1 KiB", "this project's own", `title="1500 bytes">1.46 KiB`, "over quota", "committed, not registered 1.46 KiB"} {
		if !strings.Contains(blobRow, want) {
			t.Errorf("the blob row lacks %q:\n%s", want, blobRow)
		}
	}
	for _, want := range []string{"none", "the platform's default", ">0 B<"} {
		if !strings.Contains(regRow, want) {
			t.Errorf("the registry row lacks %q:\n%s", want, regRow)
		}
	}
	if strings.Contains(regRow, "over quota") {
		t.Errorf("the registry, with no quota, is shown over it:\n%s", regRow)
	}
	if !strings.Contains(fetch(t, s.URL+"/artifacts", session), `href="/storage"`) {
		t.Error("the project's navigation has no link to the storage page")
	}

	// The admin's form: the blob override as typed back, the registry's
	// empty (the platform's default); saving sets the registry's.
	if !strings.Contains(page, `name="blob_quota" value="1KiB"`) || !strings.Contains(page, `name="registry_quota" value=""`) {
		t.Fatalf("the form does not show the overrides:\n%s", page)
	}
	form := url.Values{"csrf_token": {csrfOf(t, page)}, "etag": {formValue(t, page, "etag")}, "blob_quota": {"1KiB"}, "registry_quota": {"10GiB"}}
	if resp := postForm(t, s, "/storage", form, session); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("saving the quotas: %d", resp.StatusCode)
	}
	wantOverrides(t, admin, p, 1024, 10<<30)

	// The same page's form again: the quotas changed since it was loaded.
	form.Set("registry_quota", "5GB")
	code, body := postFormBody(t, s, "/storage", form, session)
	if code != http.StatusPreconditionFailed || !strings.Contains(body, "Someone changed this project&#39;s storage quotas after this page was loaded, so your change was not saved") {
		t.Fatalf("a stale form: %d\n%s", code, body)
	}
	if !strings.Contains(storeRow(t, body, "registry_quota"), "10 GiB") {
		t.Errorf("the refusal does not show the quotas in force now:\n%s", body)
	}
	wantOverrides(t, admin, p, 1024, 10<<30)

	// A project admin: the figures, no form; a post forged with their own
	// session and CSRF token is refused by the API, and one without the
	// token by the console.
	uid := admin.Do("POST", "/api/v1/users", map[string]string{"email": "pa@example.com", "password": "a-long-password-pa"}).Want(t, http.StatusCreated).String("id")
	admin.Do("POST", "/api/v1/projects/"+p+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, http.StatusCreated)
	member := sessionIn(t, s, "pa@example.com", "a-long-password-pa", p)
	page = fetch(t, s.URL+"/storage", member)
	if !strings.Contains(storeRow(t, page, "registry_quota"), "10 GiB") || strings.Contains(page, `action="/storage"`) || strings.Contains(page, `name="etag"`) {
		t.Fatalf("a project admin's storage page (want figures and no form):\n%s", page)
	}
	forged := url.Values{"csrf_token": {csrfOf(t, page)}, "blob_quota": {"1PiB"}, "registry_quota": {"1PiB"}}
	if code, body := postFormBody(t, s, "/storage", forged, member); code != http.StatusForbidden {
		t.Fatalf("a project admin's forged post: %d\n%s", code, body)
	}
	forged.Del("csrf_token")
	if code, _ := postFormBody(t, s, "/storage", forged, member); code != http.StatusForbidden {
		t.Fatalf("a post without the CSRF token: %d", code)
	}
	wantOverrides(t, admin, p, 1024, 10<<30)
}

// storeRow is the storage page's table row of one store.
func storeRow(t *testing.T, page, field string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, `<tr id="store-`+field+`">`)
	row, _, _ := strings.Cut(rest, "</tr>")
	if !ok {
		t.Fatalf("no %s row:\n%s", field, page)
	}
	return row
}

// formValue is the value of the page's hidden field name.
func formValue(t *testing.T, page, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, `name="`+name+`" value="`)
	v, _, _ := strings.Cut(rest, `"`)
	if !ok || v == "" {
		t.Fatalf("no %s in the page:\n%s", name, page)
	}
	return strings.ReplaceAll(v, "&#34;", `"`)
}

// postFormBody posts form as a browser does; it returns the status and
// the page.
func postFormBody(t *testing.T, s *servertest.Server, path string, form url.Values, session *http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(session)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantOverrides checks the project's two overrides through the API.
func wantOverrides(t *testing.T, admin *servertest.Client, p string, blob, registry float64) {
	t.Helper()
	r := admin.Do("GET", "/api/v1/projects/"+p+"/storage", nil).Want(t, http.StatusOK)
	b, g := r.JSON["blobs"].(map[string]any), r.JSON["registry"].(map[string]any)
	if b["quota_bytes"] != blob || g["quota_bytes"] != registry {
		t.Fatalf("quotas %v and %v, want %v and %v", b["quota_bytes"], g["quota_bytes"], blob, registry)
	}
}

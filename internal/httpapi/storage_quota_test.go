package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A platform admin gives one project quotas of its own: that project's
// uploads and pushes are held to them, another project's are not; the
// project's members read their use, nobody else sets or sees it.
func TestProjectStorageQuotaOverride(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testProjectStorageQuotaOverride(t, d)
	})
}

func testProjectStorageQuotaOverride(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d) // the platform's flags: no quota
	admin := s.Admin()
	a := s.Creds.ProjectID
	b := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "other"}).Want(t, 201).String("id")
	storagePath := func(p string) string { return "/api/v1/projects/" + p + "/storage" }

	// Before any override: the platform's (no) quota.
	r := admin.Do("GET", storagePath(a), nil).Want(t, 200)
	wantQuota(t, r, "blobs", nil, "platform", 0)
	wantQuota(t, r, "registry", nil, "platform", 0)
	staleTag := r.Header.Get("ETag")

	// Without If-Match a PUT is made whatever the quotas are now.
	blobQ, regQ := int64(1000), int64(20_000)
	r = admin.Do("PUT", storagePath(a)+"/quota", map[string]any{"blob_quota_bytes": blobQ, "registry_quota_bytes": regQ}).Want(t, 200)
	wantQuota(t, r, "blobs", &blobQ, "project", 0)
	wantQuota(t, r, "registry", &regQ, "project", 0)
	wantStorageAudit(t, s, a, nil, map[string]any{"project_id": a, "blob_quota_bytes": float64(blobQ), "registry_quota_bytes": float64(regQ)})
	tag := r.Header.Get("ETag")
	if staleTag == "" || tag == "" || tag == staleTag || admin.Do("GET", storagePath(a), nil).Want(t, 200).Header.Get("ETag") != tag {
		t.Fatalf("ETag before the change %q, of the PUT %q: want two tags, the GET's after the PUT the PUT's", staleTag, tag)
	}

	// A change based on the read from before that PUT (If-Match: its
	// ETag) is refused, 412, and changes nothing; one based on the
	// current read goes through.
	audits := countStorageAudits(t, s, a)
	r = admin.Do("PUT", storagePath(a)+"/quota", map[string]any{"blob_quota_bytes": 5}, "If-Match", staleTag)
	if r.Status != 412 || r.ErrorCode() != "storage_quota_changed" ||
		!strings.Contains(string(r.Body), "changed since it was read") || r.JSON["error"].(map[string]any)["details"].(map[string]any)["etag"] != tag {
		t.Fatalf("PUT with a stale If-Match: %d %s", r.Status, r.Body)
	}
	r = admin.Do("GET", storagePath(a), nil).Want(t, 200)
	wantQuota(t, r, "blobs", &blobQ, "project", 0)
	wantQuota(t, r, "registry", &regQ, "project", 0)
	if n := countStorageAudits(t, s, a); n != audits {
		t.Fatalf("a refused change was audited: %d quota changes, want %d", n, audits)
	}
	r = admin.Do("PUT", storagePath(a)+"/quota", map[string]any{"blob_quota_bytes": blobQ, "registry_quota_bytes": regQ}, "If-Match", `"other", `+tag).Want(t, 200)
	wantQuota(t, r, "blobs", &blobQ, "project", 0)
	if r.Header.Get("ETag") != tag {
		t.Fatalf("the same quotas again changed the ETag: %q, was %q", r.Header.Get("ETag"), tag)
	}

	// Blob storage: the same upload is refused in A, taken in B.
	data := patterned(1, 1500)
	upA := blobUpload(t, admin, a, "big", data)
	if upA.Status != 422 || upA.ErrorCode() != "blob_quota_exceeded" {
		t.Fatalf("upload over A's own quota: %d %s", upA.Status, upA.Body)
	}
	blobUpload(t, admin, b, "big", data).Want(t, 201)
	r = admin.Do("GET", storagePath(b), nil).Want(t, 200)
	wantQuota(t, r, "blobs", nil, "platform", 1500)
	if blobs := r.JSON["blobs"].(map[string]any); blobs["unregistered_bytes"] != float64(1500) || blobs["uploading_bytes"] != float64(0) {
		t.Fatalf("B's blob parts after a committed upload: %v", blobs)
	}
	wantQuota(t, admin.Do("GET", storagePath(a), nil).Want(t, 200), "blobs", &blobQ, "project", 0)

	// Registry: the same layer is refused in A, taken in B.
	host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	repoA, credA := publishIntent(t, admin, a, map[string]any{"app_slug": "quota-a", "app_version": "1.0.0", "artifact_name": "runtime"})
	repoB, credB := publishIntent(t, admin, b, map[string]any{"app_slug": "quota-b", "app_version": "1.0.0", "artifact_name": "runtime"})
	layer := patterned(2, 30_000)
	wantRegistryError(t, pushLayer(ctx, host, repoA, credA, layer), "DENIED", "registry quota exceeded", "gpuaas project storage set")
	if err := pushLayer(ctx, host, repoB, credB, layer); err != nil {
		t.Fatalf("push into B, which has no quota: %v", err)
	}
	r = admin.Do("GET", storagePath(b), nil).Want(t, 200)
	if reg := r.JSON["registry"].(map[string]any); reg["committed_bytes"].(float64) < float64(len(layer)) {
		t.Fatalf("B's registry use after a push: %v", reg)
	}

	// Lowering a quota below use is accepted: nothing goes, the answer
	// says the project is over it.
	low := int64(10)
	r = admin.Do("PUT", storagePath(b)+"/quota", map[string]any{"blob_quota_bytes": low}).Want(t, 200)
	wantQuota(t, r, "blobs", &low, "project", 1500)
	if r.JSON["blobs"].(map[string]any)["over_quota"] != true {
		t.Fatalf("a quota below use is not reported over: %s", r.Body)
	}
	wantQuota(t, r, "registry", nil, "platform", r.JSON["registry"].(map[string]any)["used_bytes"].(float64))
	blobUpload(t, admin, b, "more", patterned(3, 5)).Want(t, 422)

	// Clearing puts A back on the platform's default (none).
	r = admin.Do("PUT", storagePath(a)+"/quota", map[string]any{}).Want(t, 200)
	wantQuota(t, r, "blobs", nil, "platform", 0)
	wantStorageAudit(t, s, a, map[string]any{"project_id": a, "blob_quota_bytes": float64(blobQ), "registry_quota_bytes": float64(regQ)},
		map[string]any{"project_id": a, "blob_quota_bytes": nil, "registry_quota_bytes": nil})

	// Every change that went through is an event in the project's stream,
	// with the quotas set; the refused one (412) is none.
	s.SettleEvents()
	evs, err := client.New(s.URL, admin.Token).ListEvents(ctx, client.ProjectEventsPath(a), client.EventFilter{Type: "apps.storage_quota."})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs.Items {
		var data map[string]any
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(e.Type, " ", e.Subject, " ", data))
	}
	set := fmt.Sprint(map[string]any{"project_id": a, "blob_quota_bytes": float64(blobQ), "registry_quota_bytes": float64(regQ)})
	cleared := fmt.Sprint(map[string]any{"project_id": a, "blob_quota_bytes": nil, "registry_quota_bytes": nil})
	prefix := "apps.storage_quota.updated projects/" + a + "/storage "
	if want := []string{prefix + set, prefix + set, prefix + cleared}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("storage quota events of project A:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	blobUpload(t, admin, a, "big", data).Want(t, 201)

	// Bad input: the canonical envelope, naming the field.
	for body, code := range map[string]string{`{"blob_quota_bytes": -1}`: "validation_failed", `{"blob_quota": 5}`: ""} {
		r := admin.Do("PUT", storagePath(a)+"/quota", json.RawMessage(body))
		if r.Status != 400 || (code != "" && r.ErrorCode() != code) {
			t.Fatalf("PUT %s: %d %s", body, r.Status, r.Body)
		}
	}

	// A project admin of A reads its use and may not set its quota; a
	// member of another org sees neither.
	uid, member := s.NewUser(admin, "a-admin@example.com")
	admin.Do("POST", "/api/v1/projects/"+a+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, 201)
	member.Do("GET", storagePath(a), nil).Want(t, 200)
	if r := member.Do("PUT", storagePath(a)+"/quota", map[string]any{"blob_quota_bytes": 1 << 40}); r.Status != 403 {
		t.Fatalf("a project admin set its own quota: %d %s", r.Status, r.Body)
	}
	xOrg := admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "x-org", "name": "x"}).Want(t, 201).String("id")
	xid, outsider := s.NewUser(admin, "x@example.com")
	admin.Do("POST", "/api/v1/orgs/"+xOrg+"/members", map[string]string{"user_id": xid, "role": "org_admin"}).Want(t, 201)
	outsider.Do("GET", storagePath(a), nil).Want(t, 404)
	outsider.Do("PUT", storagePath(a)+"/quota", map[string]any{"blob_quota_bytes": 1}).Want(t, 404)
}

// blobUpload uploads data into project p in one request and commits it.
func blobUpload(t *testing.T, c *servertest.Client, p, name string, data []byte) *servertest.Response {
	t.Helper()
	pi := c.Do("POST", "/api/v1/projects/"+p+"/app-artifacts/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.0",
		"artifact_name": name, "artifact_kind": "blob", "source_type": "artifact_store"}).Want(t, 201)
	return c.Do("PUT", pi.String("upload_url")+"?digest="+blobDigest(data), bytes.Clone(data),
		"Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(data)-1, len(data)))
}

// wantQuota checks one quota of a storage answer.
func wantQuota(t *testing.T, r *servertest.Response, which string, quota *int64, source string, used float64) {
	t.Helper()
	q, _ := r.JSON[which].(map[string]any)
	var want any
	if quota != nil {
		want = float64(*quota)
	}
	if q["quota_bytes"] != want || q["quota_source"] != source || q["used_bytes"] != used {
		t.Fatalf("%s: %v, want quota_bytes %v from %s and used_bytes %v", which, q, want, source, used)
	}
}

// wantStorageAudit checks the newest quota change of project p was
// audited with its before and after.
func wantStorageAudit(t *testing.T, s *servertest.Server, p string, before, after map[string]any) {
	t.Helper()
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "artifact.storage_quota.put", ResourceID: p}, store.Page{Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("audit of the quota change: %v %v", evs, err)
	}
	for name, c := range map[string]struct {
		raw  []byte
		want map[string]any
	}{"before": {evs[0].Before, before}, "after": {evs[0].After, after}} {
		var got map[string]any
		if len(c.raw) > 0 {
			if err := json.Unmarshal(c.raw, &got); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("audit %s = %v, want %v", name, got, c.want)
		}
	}
}

// countStorageAudits is how many quota changes of project p were audited.
func countStorageAudits(t *testing.T, s *servertest.Server, p string) int {
	t.Helper()
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "artifact.storage_quota.put", ResourceID: p}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

package client_test

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// newClient is a Go client of s whose every response servertest checks
// against the contract (and every mutation against the audit log).
func newClient(s *servertest.Server, token string) *client.Client {
	c := client.New(s.URL, token)
	c.HTTP = s.HTTPClient()
	return c
}

// signIn is a checked Go client of s signed in as a person.
func signIn(t *testing.T, s *servertest.Server, email, password string) *client.Client {
	t.Helper()
	c := newClient(s, "")
	if _, err := c.Login(t.Context(), email, password); err != nil {
		t.Fatal(err)
	}
	return c
}

// The service endpoints answer anyone.
func TestServiceEndpoints(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		ctx := t.Context()
		c := newClient(s, "")
		if h, err := c.Healthz(ctx); err != nil || h.Status != "ok" {
			t.Fatalf("healthz: %+v, %v", h, err)
		}
		if r, err := c.Readyz(ctx); err != nil || r.Status != "ready" || len(r.Checks) == 0 {
			t.Fatalf("readyz: %+v, %v", r, err)
		}
		if k, err := c.JWKS(ctx); err != nil || len(k.Keys) == 0 || k.Keys[0].Kid == "" {
			t.Fatalf("jwks: %+v, %v", k, err)
		}
		if y, err := c.AsyncAPI(ctx); err != nil || !bytes.Contains(y, []byte("asyncapi:")) {
			t.Fatalf("asyncapi: %d bytes, %v", len(y), err)
		}
	})
}

// An admin creates a user, grants and revokes roles on the org and the
// project, disables and enables the user, and finds it all in the audit
// log.
func TestUsersAndMembers(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		ctx := t.Context()
		admin := signIn(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword)
		pid, oid := s.Creds.ProjectID, s.Creds.OrgID
		const password = "a long enough password"
		u, err := admin.CreateUser(ctx, client.CreateUserRequest{Email: "dana@example.com", Password: password, DisplayName: "Dana"})
		if err != nil || u.ID == "" || u.Status != "active" || u.DisplayName != "Dana" {
			t.Fatalf("create user: %+v, %v", u, err)
		}
		pb, err := admin.AddProjectMember(ctx, pid, u.ID, "project_viewer")
		if err != nil || pb.PrincipalID != u.ID || pb.ScopeType != "project" || pb.ScopeID != pid {
			t.Fatalf("add project member: %+v, %v", pb, err)
		}
		ob, err := admin.AddOrgMember(ctx, oid, u.ID, "org_admin")
		if err != nil || ob.ScopeType != "org" || ob.Role != "org_admin" {
			t.Fatalf("add org member: %+v, %v", ob, err)
		}
		has := func(p client.CatalogPage[client.RoleBinding], id string) bool {
			return slices.ContainsFunc(p.Items, func(b client.RoleBinding) bool { return b.ID == id })
		}
		if p, err := admin.ListProjectMembers(ctx, pid, client.CatalogListOptions{}); err != nil || !has(p, pb.ID) {
			t.Fatalf("project members: %+v, %v", p, err)
		}
		if p, err := admin.ListOrgMembers(ctx, oid, client.CatalogListOptions{}); err != nil || !has(p, ob.ID) {
			t.Fatalf("org members: %+v, %v", p, err)
		}

		dana := signIn(t, s, u.Email, password)
		me, err := dana.Me(ctx)
		if err != nil || me.ID != u.ID || len(me.Bindings) != 2 {
			t.Fatalf("me: %+v, %v", me, err)
		}

		if err := admin.RemoveOrgMember(ctx, oid, ob.ID); err != nil {
			t.Fatal(err)
		}
		if err := admin.RemoveProjectMember(ctx, pid, pb.ID); err != nil {
			t.Fatal(err)
		}
		if p, err := admin.ListProjectMembers(ctx, pid, client.CatalogListOptions{}); err != nil || has(p, pb.ID) {
			t.Fatalf("project members after removal: %+v, %v", p, err)
		}

		if got, err := admin.DisableUser(ctx, u.ID); err != nil || got.Status != "disabled" {
			t.Fatalf("disable: %+v, %v", got, err)
		}
		var api *client.APIError
		if _, err := dana.Me(ctx); !errors.As(err, &api) || api.Status != http.StatusUnauthorized {
			t.Fatalf("a disabled user's token: %v", err)
		}
		if got, err := admin.EnableUser(ctx, u.ID); err != nil || got.Status != "active" {
			t.Fatalf("enable: %+v, %v", got, err)
		}

		audit, err := admin.ListAuditEvents(ctx, client.AuditFilter{ResourceType: "user", ResourceID: u.ID})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, e := range audit.Items {
			actions = append(actions, e.Action)
		}
		if !slices.Contains(actions, "user.create") || len(actions) < 3 {
			t.Fatalf("audit of the user: %v", actions)
		}
	})
}

// A blob goes up through UploadBlob in chunks, its upload reading back the
// offset to resume at between them, registers and downloads byte for byte;
// a second upload is cancelled.
func TestBlobUploadAndDownload(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		ctx := t.Context()
		c := signIn(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword)
		pid := s.Creds.ProjectID
		intent := func(name string) client.ArtifactIntent {
			pi, err := c.CreatePublishIntent(ctx, pid, client.PublishIntentRequest{AppSlug: "demo", AppVersion: "1.0.0",
				ArtifactName: name, ArtifactKind: "blob", SourceType: "artifact_store"})
			if err != nil || pi.UploadID == "" || pi.UploadURL == "" {
				t.Fatalf("publish intent: %+v, %v", pi, err)
			}
			return pi
		}
		pi := intent("weights")
		data := bytes.Repeat([]byte("gpuaas-"), 10000)
		chunks := 0
		digest, err := c.UploadBlob(ctx, pi.UploadURL, bytes.NewReader(data), int64(len(data)), 16<<10, func(sent int64) {
			chunks++
			// Between chunks the upload says where to resume.
			if up, err := c.GetArtifactUpload(ctx, pid, pi.UploadID); err != nil || up.Offset != sent || up.Committed {
				t.Errorf("upload after %d bytes: %+v, %v", sent, up, err)
			}
		})
		if err != nil || chunks != 5 {
			t.Fatalf("upload in %d chunks: %v", chunks, err)
		}
		art, err := c.RegisterArtifact(ctx, pid, client.RegisterArtifactRequest{AppSlug: "demo", AppVersion: "1.0.0", ArtifactName: "weights",
			ArtifactKind: "blob", SourceType: "artifact_store", SourceURI: pi.SourceURI, Digest: digest})
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		named, err := c.DownloadArtifact(ctx, pid, art.ID, &got)
		if err != nil || named != digest || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("download: %d bytes, digest %q, %v", got.Len(), named, err)
		}

		cancelled := intent("cancelled")
		if err := c.CancelArtifactUpload(ctx, pid, cancelled.UploadID); err != nil {
			t.Fatal(err)
		}
		var api *client.APIError
		if _, err := c.GetArtifactUpload(ctx, pid, cancelled.UploadID); !errors.As(err, &api) || api.Status != http.StatusNotFound {
			t.Fatalf("a cancelled upload reads: %v", err)
		}
	})
}

// The operators' reads answer with their documented shapes.
func TestOperatorReads(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		ctx := t.Context()
		c := signIn(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword)
		if _, err := c.ListAllocations(ctx, client.AllocationFilter{ProjectID: s.Creds.ProjectID, Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if u, err := c.ListUnratedUsage(ctx, client.CatalogListOptions{Limit: 10}); err != nil || u.Counts == nil {
			t.Fatalf("unrated usage: %+v, %v", u, err)
		}
		if p, err := c.ListParkedEvents(ctx, client.CatalogListOptions{Limit: 10}); err != nil || p.Counts == nil {
			t.Fatalf("parked events: %+v, %v", p, err)
		}
	})
}

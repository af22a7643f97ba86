package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// TestCatalogConformance runs the catalog queries against both dialects.
func TestCatalogConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Run("apps_and_versions", func(t *testing.T) { testCatalogAppsVersions(t, db) })
		t.Run("entitlements", func(t *testing.T) { testCatalogEntitlements(t, db) })
	})
}

func mkApp(t *testing.T, db *store.DB, slug string) catalog.App {
	t.Helper()
	now := time.Now()
	a := catalog.App{ID: newID(), Slug: slug, DisplayName: slug, RuntimeBackend: "slurm", Metadata: []byte(`{"slug":"` + slug + `"}`),
		MetadataDigest: "sha256:0", SubmittedBy: "user:x", CreatedAt: now, UpdatedAt: now}
	if err := db.Queries().CreateApp(context.Background(), a); err != nil {
		t.Fatalf("create app: %v", err)
	}
	return a
}

func mkVersion(t *testing.T, db *store.DB, a catalog.App, version string, status catalog.VersionStatus) catalog.AppVersion {
	t.Helper()
	now := time.Now()
	v := catalog.AppVersion{ID: newID(), AppID: a.ID, AppSlug: a.Slug, Version: version, Status: status, RuntimeBackend: "slurm",
		Manifest: []byte(`{"version":"` + version + `","n":1}`), Digest: "sha256:" + version, SubmittedBy: "user:x", CreatedAt: now, UpdatedAt: now}
	if err := db.Queries().CreateAppVersion(context.Background(), v); err != nil {
		t.Fatalf("create version: %v", err)
	}
	return v
}

func testCatalogAppsVersions(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	a := mkApp(t, db, "alpha")
	b := mkApp(t, db, "beta")
	dup := a
	dup.ID = newID()
	if err := q.CreateApp(ctx, dup); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate slug: %v", err)
	}
	if _, err := q.GetAppBySlug(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing app: %v", err)
	}
	got, err := q.GetAppBySlug(ctx, "alpha")
	if err != nil || got.ID != a.ID || got.CreatedAt.IsZero() {
		t.Fatalf("get app: %+v %v", got, err)
	}
	var meta map[string]any
	if err := json.Unmarshal(got.Metadata, &meta); err != nil || meta["slug"] != "alpha" {
		t.Fatalf("metadata round trip: %s %v", got.Metadata, err)
	}
	got.DisplayName, got.MetadataDigest, got.UpdatedAt = "Alpha", "sha256:1", time.Now()
	if err := q.UpdateAppMetadata(ctx, got); err != nil {
		t.Fatal(err)
	}
	if g2, _ := q.GetAppBySlug(ctx, "alpha"); g2.DisplayName != "Alpha" || g2.MetadataDigest != "sha256:1" {
		t.Fatalf("update app: %+v", g2)
	}

	v1 := mkVersion(t, db, a, "1.0.0", "draft")
	mkVersion(t, db, a, "1.1.0", "published")
	mkVersion(t, db, b, "2.0.0", "draft")
	dv := v1
	dv.ID = newID()
	if err := q.CreateAppVersion(ctx, dv); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate version: %v", err)
	}
	bad := v1
	bad.ID, bad.Version, bad.Status = newID(), "9.9.9", "bogus"
	if err := q.CreateAppVersion(ctx, bad); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("bad status: %v", err)
	}
	orphan := v1
	orphan.ID, orphan.Version, orphan.AppID = newID(), "8.8.8", newID()
	if err := q.CreateAppVersion(ctx, orphan); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("dangling app: %v", err)
	}

	// Listing filters and pages.
	apps, _, err := q.ListApps(ctx, []catalog.VersionStatus{"published", "deprecated"}, store.Page{})
	if err != nil || len(apps) != 1 || apps[0].Slug != "alpha" {
		t.Fatalf("listed apps: %+v %v", apps, err)
	}
	apps, next, err := q.ListApps(ctx, nil, store.Page{Limit: 1})
	if err != nil || len(apps) != 1 || next == "" {
		t.Fatalf("page 1: %+v %q %v", apps, next, err)
	}
	apps, next, err = q.ListApps(ctx, nil, store.Page{Limit: 1, Cursor: next})
	if err != nil || len(apps) != 1 || apps[0].Slug != "beta" || next != "" {
		t.Fatalf("page 2: %+v %q %v", apps, next, err)
	}
	vs, _, err := q.ListAppVersions(ctx, "alpha", nil, store.Page{})
	if err != nil || len(vs) != 2 || vs[0].Version != "1.0.0" {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	vs, _, err = q.ListAppVersions(ctx, "alpha", []catalog.VersionStatus{"published"}, store.Page{})
	if err != nil || len(vs) != 1 || vs[0].Version != "1.1.0" {
		t.Fatalf("published versions: %+v %v", vs, err)
	}

	// A draft's body can be replaced; a published one cannot.
	v1.Manifest, v1.Digest, v1.UpdatedAt = []byte(`{"version":"1.0.0","n":2}`), "sha256:new", time.Now()
	if err := q.ReplaceDraftVersion(ctx, v1); err != nil {
		t.Fatal(err)
	}
	gv, err := q.GetAppVersion(ctx, "alpha", "1.0.0")
	if err != nil || gv.Digest != "sha256:new" || !gv.PublishedAt.IsZero() {
		t.Fatalf("replaced draft: %+v %v", gv, err)
	}
	var body map[string]any
	if err := json.Unmarshal(gv.Manifest, &body); err != nil || body["n"] != float64(2) {
		t.Fatalf("manifest round trip: %s", gv.Manifest)
	}

	// Status moves are conditional on the current status.
	at := time.Now()
	if err := q.SetAppVersionStatus(ctx, v1.ID, "draft", "published", "ok", at); err != nil {
		t.Fatal(err)
	}
	if err := q.SetAppVersionStatus(ctx, v1.ID, "draft", "published", "again", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stale transition: %v", err)
	}
	if err := q.ReplaceDraftVersion(ctx, v1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replace published body: %v", err)
	}
	gv, _ = q.GetAppVersion(ctx, "alpha", "1.0.0")
	if gv.Status != "published" || gv.StatusReason != "ok" || gv.PublishedAt.IsZero() || !gv.DeprecatedAt.IsZero() {
		t.Fatalf("published: %+v", gv)
	}
	if d := gv.PublishedAt.Sub(at); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("published_at drifted by %v", d)
	}
}

func testCatalogEntitlements(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	o := mkOrg(t, db, "ent-org")
	p := iam.Project{ID: newID(), OrgID: o.ID, Slug: "p", Name: "P", CreatedAt: time.Now()}
	if err := q.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	a := mkApp(t, db, "gamma")
	b := mkApp(t, db, "delta")
	now := time.Now()
	e := catalog.AppEntitlement{ID: newID(), ProjectID: p.ID, OrgID: o.ID, AppID: a.ID, AppSlug: a.Slug, Enabled: true,
		PolicyOverrides: []byte(`{"allowed_versions":["1.0.0"]}`), UpdatedBy: "user:x", CreatedAt: now, UpdatedAt: now}
	if err := q.CreateEntitlement(ctx, e); err != nil {
		t.Fatal(err)
	}
	e2 := e
	e2.ID = newID()
	if err := q.CreateEntitlement(ctx, e2); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate entitlement: %v", err)
	}
	e3 := e
	e3.ID, e3.ProjectID = newID(), newID()
	if err := q.CreateEntitlement(ctx, e3); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("dangling project: %v", err)
	}
	off := catalog.AppEntitlement{ID: newID(), ProjectID: p.ID, OrgID: o.ID, AppID: b.ID, AppSlug: b.Slug, Enabled: false,
		PolicyOverrides: []byte(`{}`), UpdatedBy: "user:x", CreatedAt: now, UpdatedAt: now}
	if err := q.CreateEntitlement(ctx, off); err != nil {
		t.Fatal(err)
	}
	got, err := q.GetEntitlement(ctx, p.ID, "gamma")
	if err != nil || !got.Enabled || got.ID != e.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	var ov map[string]any
	if err := json.Unmarshal(got.PolicyOverrides, &ov); err != nil || ov["allowed_versions"] == nil {
		t.Fatalf("overrides round trip: %s", got.PolicyOverrides)
	}
	if _, err := q.GetEntitlement(ctx, p.ID, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	all, _, err := q.ListEntitlements(ctx, p.ID, false, store.Page{})
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %+v %v", all, err)
	}
	on, _, err := q.ListEntitlements(ctx, p.ID, true, store.Page{})
	if err != nil || len(on) != 1 || on[0].AppSlug != "gamma" {
		t.Fatalf("enabled only: %+v %v", on, err)
	}
	got.Enabled, got.UpdatedAt = false, time.Now()
	if err := q.UpdateEntitlement(ctx, got); err != nil {
		t.Fatal(err)
	}
	if on, _, _ := q.ListEntitlements(ctx, p.ID, true, store.Page{}); len(on) != 0 {
		t.Fatalf("disabled still listed: %+v", on)
	}
	missing := got
	missing.ID = newID()
	if err := q.UpdateEntitlement(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}

	// An org's entitlement: one per (org, app), read back without a project.
	oe := catalog.AppEntitlement{ID: newID(), OrgID: o.ID, AppID: a.ID, AppSlug: a.Slug, Enabled: true,
		PolicyOverrides: []byte(`{"allowed_control_plane_scopes":["tenant"]}`), UpdatedBy: "user:x", CreatedAt: now, UpdatedAt: now}
	if err := q.CreateOrgEntitlement(ctx, oe); err != nil {
		t.Fatal(err)
	}
	oe2 := oe
	oe2.ID = newID()
	if err := q.CreateOrgEntitlement(ctx, oe2); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate org entitlement: %v", err)
	}
	gotOrg, err := q.GetOrgEntitlement(ctx, o.ID, "gamma")
	if err != nil || gotOrg.ID != oe.ID || gotOrg.ProjectID != "" || gotOrg.OrgID != o.ID || !gotOrg.Enabled {
		t.Fatalf("get org entitlement: %+v %v", gotOrg, err)
	}
	if _, err := q.GetOrgEntitlement(ctx, o.ID, "delta"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing org entitlement: %v", err)
	}
	gotOrg.Enabled = false
	if err := q.UpdateOrgEntitlement(ctx, gotOrg); err != nil {
		t.Fatal(err)
	}
	if orgs, _, err := q.ListOrgEntitlements(ctx, o.ID, store.Page{}); err != nil || len(orgs) != 1 || orgs[0].Enabled {
		t.Fatalf("list org entitlements: %+v %v", orgs, err)
	}
	if _, err := q.GetEntitlement(ctx, p.ID, "gamma"); err != nil {
		t.Fatalf("the project's entitlement is apart from the org's: %v", err)
	}
}

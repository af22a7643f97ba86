package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The artifacts domain's storage (artifacts.Store) on both dialects:
// signing keys, intents, registry credentials and their wraps, registered
// artifacts, revocation by digest, and the owner reads of the registry.
func TestArtifactsConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		for _, c := range []conformanceCase{
			{"signing_keys", testArtifactSigningKeys},
			{"intents", testArtifactIntents},
			{"registry_credentials", testRegistryCredentials},
			{"credential_wraps", testCredentialWraps},
			{"artifact_round_trip", testAppArtifactRoundTrip},
			{"artifact_state", testAppArtifactState},
			{"artifact_lists", testAppArtifactLists},
			{"blob_usage", testProjectBlobUsage},
			{"digests", testArtifactDigests},
			{"owners", testArtifactOwners},
			{"stale_registry_holds", testStaleRegistryHolds},
			{"storage_quotas", testStorageQuotas},
			{"registry_recounts", testRegistryRecounts},
		} {
			t.Run(c.name, func(t *testing.T) { c.run(t, db) })
		}
	})
}

func tenant(t *testing.T, db *store.DB, slug string) (iam.Org, iam.Project) {
	t.Helper()
	o := mkOrg(t, db, slug+"-"+newID()[:8])
	return o, mkProject(t, db, o, slug)
}

func mkAppArtifact(o iam.Org, p iam.Project, slug, version, name, digest string) artifacts.AppArtifact {
	return artifacts.AppArtifact{ID: newID(), OrgID: o.ID, ProjectID: p.ID, AppSlug: slug, AppVersion: version, ArtifactName: name,
		ArtifactKind: "oci", SourceType: "oci_registry", Repository: o.Slug + "/" + slug, Digest: digest,
		LifecycleState: artifacts.StateDraft, TrustState: artifacts.TrustUnverified, CreatedBy: "user:1", CreatedAt: t0, UpdatedAt: t0}
}

func sameArtifact(t *testing.T, what string, got, want artifacts.AppArtifact) {
	t.Helper()
	sameJSON(t, what+" source metadata", got.SourceMetadata, want.SourceMetadata)
	got.SourceMetadata, want.SourceMetadata = nil, nil
	same(t, what, got, want)
}

func testArtifactSigningKeys(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "keys")
	_, p2 := tenant(t, db, "keys2")
	k := artifacts.ArtifactSigningKey{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Name: "release", Algorithm: "ecdsa-p256",
		PublicKey: "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n", Fingerprint: "sha256:aa", CreatedBy: "user:1", CreatedAt: t0}
	noErr(t, "insert key", q.InsertArtifactSigningKey(ctx, k))
	got, err := q.AllArtifactSigningKeys(ctx, p.ID)
	noErr(t, "all keys", err)
	same(t, "key round trip", got, []artifacts.ArtifactSigningKey{k})

	dup := k
	dup.ID, dup.Fingerprint = newID(), "sha256:bb"
	wantErr(t, "duplicate name in project", q.InsertArtifactSigningKey(ctx, dup), storage.ErrAlreadyExists)
	dup = k
	dup.ID, dup.Name = newID(), "other"
	wantErr(t, "duplicate fingerprint in project", q.InsertArtifactSigningKey(ctx, dup), storage.ErrAlreadyExists)
	dup = k
	dup.Name, dup.Fingerprint = "other", "sha256:other"
	wantErr(t, "duplicate id", q.InsertArtifactSigningKey(ctx, dup), storage.ErrAlreadyExists)
	dup = k
	dup.ID, dup.ProjectID = newID(), p2.ID
	noErr(t, "same name and fingerprint in another project", q.InsertArtifactSigningKey(ctx, dup))
	dup.ID, dup.ProjectID = newID(), newID()
	wantErr(t, "key of a missing project", q.InsertArtifactSigningKey(ctx, dup), storage.ErrConflict)

	// Paging and clamping over one project's keys.
	want := []artifacts.ArtifactSigningKey{k}
	noErr(t, "bulk keys", store.Artifacts(db).InTx(ctx, func(q artifacts.Queries) error {
		for i := 1; i <= storage.MaxPageLimit; i++ {
			k := artifacts.ArtifactSigningKey{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Name: fmt.Sprintf("k%d", i), Algorithm: "ed25519",
				PublicKey: "pem", Fingerprint: fmt.Sprintf("sha256:%d", i), CreatedAt: at(time.Duration(i) * time.Second)}
			if err := q.InsertArtifactSigningKey(ctx, k); err != nil {
				return err
			}
			want = append(want, k)
		}
		return nil
	}))
	list := func(pg storage.Page) ([]artifacts.ArtifactSigningKey, string, error) {
		return q.ListArtifactSigningKeys(ctx, p.ID, pg)
	}
	same(t, "paged keys", pageAll(t, 97, list), want)
	checkClamp(t, len(want), list)
	got, _ = q.AllArtifactSigningKeys(ctx, p.ID)
	same(t, "all keys, unpaged", got, want)
	got, _, _ = q.ListArtifactSigningKeys(ctx, p2.ID, storage.Page{})
	if len(got) != 1 || got[0].ProjectID != p2.ID {
		t.Fatalf("keys of the other project: %+v", got)
	}
	got, _ = q.AllArtifactSigningKeys(ctx, newID())
	if len(got) != 0 {
		t.Fatalf("keys of a missing project: %v", got)
	}
}

func mkIntent(o iam.Org, p iam.Project, kind, slug string) artifacts.ArtifactIntent {
	return artifacts.ArtifactIntent{ID: newID(), Kind: kind, OrgID: o.ID, ProjectID: p.ID, ArtifactKind: "oci", SourceType: "oci_registry",
		AppSlug: slug, AppVersion: "1.0.0", ArtifactName: "main", CreatedBy: "user:1", CreatedAt: t0, ExpiresAt: at(time.Hour)}
}

func testArtifactIntents(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "intents")
	_, p2 := tenant(t, db, "intents2")
	i := artifacts.ArtifactIntent{ID: newID(), Kind: "publish", OrgID: o.ID, ProjectID: p.ID, ArtifactKind: "blob", SourceType: "artifact_store",
		AppSlug: "llm", AppVersion: "2.1.0", ArtifactName: "weights", Channel: "stable", Repository: o.Slug + "/llm", TagHint: "v2",
		SourceURI: "s3://bucket/w", UploadID: "up-" + newID(), ArtifactID: newID(), SignatureRequired: true, SignatureScheme: "cosign",
		SigningKeyID: newID(), ProvenanceRequired: true, CreatedBy: "service_account:sa", CreatedAt: t0, ExpiresAt: at(15 * time.Minute)}
	noErr(t, "insert intent", q.InsertArtifactIntent(ctx, i))
	got, err := q.GetArtifactIntent(ctx, p.ID, i.ID)
	noErr(t, "get intent", err)
	same(t, "intent round trip", got, i)
	_, err = q.GetArtifactIntent(ctx, p2.ID, i.ID)
	wantErr(t, "intent through another project", err, storage.ErrNotFound)
	_, err = q.GetArtifactIntent(ctx, p.ID, newID())
	wantErr(t, "missing intent", err, storage.ErrNotFound)
	wantErr(t, "duplicate intent", q.InsertArtifactIntent(ctx, i), storage.ErrAlreadyExists)
	bad := mkIntent(o, p, "borrow", "x")
	wantErr(t, "unknown kind", q.InsertArtifactIntent(ctx, bad), storage.ErrConflict)
	bad = mkIntent(o, p, "publish", "x")
	bad.ArtifactKind = "vm"
	wantErr(t, "unknown artifact kind", q.InsertArtifactIntent(ctx, bad), storage.ErrConflict)
	bad = mkIntent(o, iam.Project{ID: newID()}, "publish", "x")
	wantErr(t, "intent of a missing project", q.InsertArtifactIntent(ctx, bad), storage.ErrConflict)

	// By upload: publish intents of the project only.
	got, err = q.ArtifactIntentByUpload(ctx, p.ID, i.UploadID)
	noErr(t, "by upload", err)
	same(t, "by upload", got, i)
	_, err = q.ArtifactIntentByUpload(ctx, p2.ID, i.UploadID)
	wantErr(t, "upload through another project", err, storage.ErrNotFound)
	pull := mkIntent(o, p, "pull", "llm")
	pull.UploadID = "up-pull"
	noErr(t, "insert pull", q.InsertArtifactIntent(ctx, pull))
	_, err = q.ArtifactIntentByUpload(ctx, p.ID, "up-pull")
	wantErr(t, "upload of a pull intent", err, storage.ErrNotFound)

	// Latest publish intent of a slot: the newest, never a pull, never
	// another slot's.
	slot := func(kind string) artifacts.ArtifactIntent {
		x := mkIntent(o, p, kind, "slot")
		noErr(t, "insert", q.InsertArtifactIntent(ctx, x))
		return x
	}
	slot("publish")
	newest := slot("publish")
	slot("pull")
	other := mkIntent(o, p, "publish", "slot")
	other.ArtifactName = "sidecar"
	noErr(t, "insert other slot", q.InsertArtifactIntent(ctx, other))
	other = mkIntent(o, p, "publish", "slot")
	other.ArtifactKind = "blob"
	noErr(t, "insert other kind", q.InsertArtifactIntent(ctx, other))
	got, err = q.LatestPublishIntent(ctx, p.ID, "slot", "1.0.0", "main", "oci")
	noErr(t, "latest", err)
	same(t, "latest publish intent", got, newest)
	_, err = q.LatestPublishIntent(ctx, p.ID, "slot", "9.9.9", "main", "oci")
	wantErr(t, "latest of an empty slot", err, storage.ErrNotFound)
	_, err = q.LatestPublishIntent(ctx, p2.ID, "slot", "1.0.0", "main", "oci")
	wantErr(t, "latest through another project", err, storage.ErrNotFound)
}

func testRegistryCredentials(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "creds")
	i := mkIntent(o, p, "pull", "app")
	noErr(t, "insert intent", q.InsertArtifactIntent(ctx, i))
	c := artifacts.RegistryCredential{ID: "gpuaas-" + newID(), IntentID: i.ID, ProjectID: p.ID, ArtifactID: newID(), Repository: o.Slug + "/app",
		Actions: "pull", SecretHash: "e3b0c442", CreatedAt: t0, ExpiresAt: at(10 * time.Minute)}
	noErr(t, "insert credential", q.InsertRegistryCredential(ctx, c))
	got, err := q.GetRegistryCredential(ctx, c.ID)
	noErr(t, "get credential", err)
	same(t, "credential round trip", got, c)
	_, err = q.GetRegistryCredential(ctx, "gpuaas-missing")
	wantErr(t, "missing credential", err, storage.ErrNotFound)
	wantErr(t, "duplicate credential", q.InsertRegistryCredential(ctx, c), storage.ErrAlreadyExists)
	c.ID, c.IntentID = "gpuaas-"+newID(), newID()
	wantErr(t, "credential of a missing intent", q.InsertRegistryCredential(ctx, c), storage.ErrConflict)
}

func testCredentialWraps(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Artifacts(db)
	q := s.Read()
	w := artifacts.CredentialWrap{TokenHash: "wrap-" + newID(), Sealed: "sealed:v1:secret", CreatedAt: t0, ExpiresAt: at(time.Minute)}
	noErr(t, "insert wrap", q.InsertCredentialWrap(ctx, w))
	wantErr(t, "duplicate wrap", q.InsertCredentialWrap(ctx, w), storage.ErrAlreadyExists)

	// Consumed once, in a mutation as the vault does.
	consume := func(hash string, now time.Time) (string, error) {
		var sealed string
		err := s.Mutate(ctx, func(tx artifacts.Tx) error {
			var err error
			if sealed, err = tx.ConsumeCredentialWrap(ctx, hash, now); err != nil {
				return err
			}
			return audited(tx)
		})
		return sealed, err
	}
	sealed, err := consume(w.TokenHash, at(30*time.Second))
	noErr(t, "consume", err)
	if sealed != w.Sealed {
		t.Fatalf("consumed %q, want %q", sealed, w.Sealed)
	}
	_, err = consume(w.TokenHash, at(31*time.Second))
	wantErr(t, "consume twice", err, storage.ErrNotFound)
	_, err = consume("wrap-missing", t0)
	wantErr(t, "consume a missing wrap", err, storage.ErrNotFound)

	// Expired: at its expiry, not only after.
	e := artifacts.CredentialWrap{TokenHash: "wrap-" + newID(), Sealed: "s", CreatedAt: t0, ExpiresAt: at(time.Minute)}
	noErr(t, "insert wrap", q.InsertCredentialWrap(ctx, e))
	_, err = q.ConsumeCredentialWrap(ctx, e.TokenHash, at(time.Minute))
	wantErr(t, "consume at expiry", err, storage.ErrNotFound)
	sealed, err = q.ConsumeCredentialWrap(ctx, e.TokenHash, at(time.Minute-time.Millisecond))
	if err != nil || sealed != "s" {
		t.Fatalf("consume just before expiry: %q %v", sealed, err)
	}
	u := artifacts.CredentialWrap{TokenHash: "wrap-" + newID(), Sealed: "s", CreatedAt: t0, ExpiresAt: at(time.Hour), UsedAt: t0}
	noErr(t, "insert used wrap", q.InsertCredentialWrap(ctx, u))
	_, err = q.ConsumeCredentialWrap(ctx, u.TokenHash, at(time.Minute))
	wantErr(t, "consume a used wrap", err, storage.ErrNotFound)
}

func testAppArtifactRoundTrip(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "rt")
	_, p2 := tenant(t, db, "rt2")
	a := artifacts.AppArtifact{ID: newID(), OrgID: o.ID, ProjectID: p.ID, AppSlug: "llm", AppVersion: "1.2.3", ArtifactName: "server",
		ArtifactKind: "oci", SourceType: "oci_registry", Repository: o.Slug + "/llm", Digest: "sha256:" + newID(), Tag: "v1.2.3",
		MediaType: "application/vnd.oci.image.manifest.v1+json", SizeBytes: 1 << 40, SourceURI: "oci://x",
		SourceMetadata: []byte(`{"labels": {"z": "1", "a": [1, 2]}, "created": "2031-01-01"}`), PublishIntentID: newID(),
		LifecycleState: artifacts.StateActive, TrustState: artifacts.TrustVerified, TrustReason: "signature_verified", TrustDetail: "cosign",
		VerifiedKeyID: newID(), VerifiedAt: at(time.Second), SignatureRequired: true, SignatureScheme: "cosign", SigningKeyID: newID(),
		ProvenanceRequired: true, CreatedBy: "user:1", CreatedAt: t0, UpdatedAt: at(2 * time.Second)}
	noErr(t, "insert", q.InsertAppArtifact(ctx, a))
	got, err := q.GetAppArtifact(ctx, p.ID, a.ID)
	noErr(t, "get", err)
	sameArtifact(t, "artifact round trip", got, a)
	if !got.Launchable() {
		t.Fatal("an active, verified, unrevoked artifact is launchable")
	}
	_, err = q.GetAppArtifact(ctx, p2.ID, a.ID)
	wantErr(t, "artifact through another project", err, storage.ErrNotFound)
	_, err = q.GetAppArtifact(ctx, p.ID, newID())
	wantErr(t, "missing artifact", err, storage.ErrNotFound)

	// Optional fields read back empty.
	b := mkAppArtifact(o, p, "llm", "1.2.3", "sidecar", "sha256:b")
	noErr(t, "insert minimal", q.InsertAppArtifact(ctx, b))
	got, _ = q.GetAppArtifact(ctx, p.ID, b.ID)
	sameArtifact(t, "minimal artifact", got, b)
	if got.SourceMetadata != nil || !got.VerifiedAt.IsZero() || got.Revoked() {
		t.Fatalf("minimal artifact: %+v", got)
	}

	wantErr(t, "duplicate id", q.InsertAppArtifact(ctx, a), storage.ErrAlreadyExists)
	dup := mkAppArtifact(o, p, "llm", "1.2.3", "server", "sha256:other")
	wantErr(t, "second live artifact of a name", q.InsertAppArtifact(ctx, dup), storage.ErrAlreadyExists)
	dup.ProjectID = p2.ID
	noErr(t, "same name in another project", q.InsertAppArtifact(ctx, dup))
	revoked := mkAppArtifact(o, p, "llm", "1.2.3", "server", "sha256:old")
	revoked.RevokedAt, revoked.RevokeReason = t0, "cve"
	noErr(t, "a revoked artifact beside the live one", q.InsertAppArtifact(ctx, revoked))
	bad := mkAppArtifact(o, p, "llm", "9", "x", "d")
	bad.LifecycleState = "exploded"
	wantErr(t, "unknown lifecycle state", q.InsertAppArtifact(ctx, bad), storage.ErrConflict)
	bad = mkAppArtifact(o, p, "llm", "9", "x", "d")
	bad.TrustState = "trusted"
	wantErr(t, "unknown trust state", q.InsertAppArtifact(ctx, bad), storage.ErrConflict)
	bad = mkAppArtifact(o, iam.Project{ID: newID()}, "llm", "9", "x", "d")
	wantErr(t, "artifact of a missing project", q.InsertAppArtifact(ctx, bad), storage.ErrConflict)
}

func testAppArtifactState(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Artifacts(db)
	q := s.Read()
	o, p := tenant(t, db, "state")
	a := mkAppArtifact(o, p, "app", "1", "main", "sha256:s")
	noErr(t, "insert", q.InsertAppArtifact(ctx, a))

	update := func(next artifacts.AppArtifact, prev artifacts.LifecycleState, prevTrust artifacts.TrustState, prevRevoked bool) error {
		return s.Mutate(ctx, func(tx artifacts.Tx) error {
			if err := tx.UpdateAppArtifactState(ctx, next, prev, prevTrust, prevRevoked); err != nil {
				return err
			}
			return audited(tx)
		})
	}
	next := a
	next.LifecycleState, next.TrustState, next.TrustReason, next.TrustDetail = artifacts.StateStaged, artifacts.TrustVerified, "signature_verified", "ok"
	next.VerifiedKeyID, next.VerifiedAt, next.UpdatedAt = newID(), at(time.Minute), at(time.Minute)
	// Every field the guard compares must match what the caller read.
	wantErr(t, "stale lifecycle state", update(next, artifacts.StateStaged, artifacts.TrustUnverified, false), storage.ErrNotFound)
	wantErr(t, "stale trust state", update(next, artifacts.StateDraft, artifacts.TrustVerified, false), storage.ErrNotFound)
	wantErr(t, "stale revocation", update(next, artifacts.StateDraft, artifacts.TrustUnverified, true), storage.ErrNotFound)
	missing := next
	missing.ID = newID()
	wantErr(t, "missing artifact", update(missing, artifacts.StateDraft, artifacts.TrustUnverified, false), storage.ErrNotFound)
	got, _ := q.GetAppArtifact(ctx, p.ID, a.ID)
	sameArtifact(t, "unchanged after refused updates", got, a)

	noErr(t, "draft→staged, verified", update(next, artifacts.StateDraft, artifacts.TrustUnverified, false))
	got, _ = q.GetAppArtifact(ctx, p.ID, a.ID)
	sameArtifact(t, "after the update", got, next)
	wantErr(t, "the same update again (a concurrent transition won)", update(next, artifacts.StateDraft, artifacts.TrustUnverified, false), storage.ErrNotFound)

	// Revocation through the state update; then only a caller that read
	// the revocation may write.
	rev := next
	rev.RevokedAt, rev.RevokeReason, rev.UpdatedAt = at(2*time.Minute), "compromised", at(2*time.Minute)
	noErr(t, "revoke", update(rev, artifacts.StateStaged, artifacts.TrustVerified, false))
	got, _ = q.GetAppArtifact(ctx, p.ID, a.ID)
	sameArtifact(t, "revoked", got, rev)
	if !got.Revoked() || got.Launchable() {
		t.Fatalf("revoked artifact: revoked %v launchable %v", got.Revoked(), got.Launchable())
	}
	retired := rev
	retired.LifecycleState, retired.UpdatedAt = artifacts.StateRetired, at(3*time.Minute)
	wantErr(t, "update of a revoked artifact read as unrevoked", update(retired, artifacts.StateStaged, artifacts.TrustVerified, false), storage.ErrNotFound)
	noErr(t, "update of a revoked artifact", update(retired, artifacts.StateStaged, artifacts.TrustVerified, true))
	got, _ = q.GetAppArtifact(ctx, p.ID, a.ID)
	sameArtifact(t, "retired", got, retired)
	bad := retired
	bad.TrustState = "trusted"
	wantErr(t, "unknown trust state", update(bad, artifacts.StateRetired, artifacts.TrustVerified, true), storage.ErrConflict)
}

func testAppArtifactLists(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "lists")
	o2, p2 := tenant(t, db, "lists2")
	slug := "app-" + newID()[:8] // the version listing spans projects
	var all []artifacts.AppArtifact
	for i, c := range []struct {
		version, name string
		state         artifacts.LifecycleState
		trust         artifacts.TrustState
		revoked       bool
	}{
		{"1", "main", artifacts.StateActive, artifacts.TrustVerified, false},
		{"1", "side", artifacts.StateDraft, artifacts.TrustUnverified, false},
		{"2", "main", artifacts.StateActive, artifacts.TrustFailed, false},
		{"1", "main", artifacts.StateRetired, artifacts.TrustVerified, true},
		{"2", "side", artifacts.StateActive, artifacts.TrustVerified, false},
	} {
		a := mkAppArtifact(o, p, slug, c.version, c.name, fmt.Sprintf("sha256:%d", i))
		a.LifecycleState, a.TrustState = c.state, c.trust
		if c.revoked {
			a.RevokedAt = t0
		}
		noErr(t, "insert", q.InsertAppArtifact(ctx, a))
		all = append(all, a)
	}
	elsewhere := mkAppArtifact(o2, p2, slug, "1", "main", "sha256:x")
	noErr(t, "insert in another project", q.InsertAppArtifact(ctx, elsewhere))
	pick := func(idx ...int) []artifacts.AppArtifact {
		var out []artifacts.AppArtifact
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	list := func(f artifacts.AppArtifactFilter, limit int) []artifacts.AppArtifact {
		return pageAll(t, limit, func(pg storage.Page) ([]artifacts.AppArtifact, string, error) {
			return q.ListAppArtifacts(ctx, p.ID, f, pg)
		})
	}
	same(t, "all of the project", list(artifacts.AppArtifactFilter{}, 2), all)
	same(t, "of version 1", list(artifacts.AppArtifactFilter{AppSlug: slug, AppVersion: "1"}, 1), pick(0, 1, 3))
	same(t, "named main", list(artifacts.AppArtifactFilter{ArtifactName: "main"}, 2), pick(0, 2, 3))
	same(t, "active", list(artifacts.AppArtifactFilter{LifecycleState: artifacts.StateActive}, 2), pick(0, 2, 4))
	same(t, "verified", list(artifacts.AppArtifactFilter{TrustState: artifacts.TrustVerified}, 2), pick(0, 3, 4))
	same(t, "active verified main of version 1", list(artifacts.AppArtifactFilter{AppSlug: slug, AppVersion: "1", ArtifactName: "main",
		LifecycleState: artifacts.StateActive, TrustState: artifacts.TrustVerified}, 5), pick(0))
	if got := list(artifacts.AppArtifactFilter{AppSlug: "no-such-app"}, 5); len(got) != 0 {
		t.Fatalf("artifacts of a missing app: %v", got)
	}
	if _, _, err := q.ListAppArtifacts(ctx, p.ID, artifacts.AppArtifactFilter{}, storage.Page{Cursor: "garbage!"}); err == nil {
		t.Fatal("a garbage cursor must be refused")
	}

	// The catalog's publish gate: unrevoked artifacts of a version in any
	// project.
	got, err := q.LiveAppArtifactsOfVersion(ctx, slug, "1")
	noErr(t, "live of version", err)
	want := append(pick(0, 1), elsewhere)
	for i := range got {
		got[i].SourceMetadata = nil
	}
	same(t, "live artifacts of version 1", got, want)
	got, _ = q.LiveAppArtifactsOfVersion(ctx, slug, "3")
	if len(got) != 0 {
		t.Fatalf("live artifacts of a version without any: %v", got)
	}
}

func testProjectBlobUsage(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "bytes")
	n, err := q.ProjectBlobUsage(ctx, p.ID, "")
	if err != nil || n != 0 {
		t.Fatalf("bytes of an empty project = %d %v", n, err)
	}
	for i, c := range []struct {
		kind    string
		size    int64
		revoked bool
	}{{"blob", 3 << 30, false}, {"blob", 5 << 30, true}, {"oci", 7 << 30, false}, {"blob", 1, false}} {
		a := mkAppArtifact(o, p, "b", "1", fmt.Sprintf("n%d", i), "d")
		a.ArtifactKind, a.SizeBytes, a.SourceURI = c.kind, c.size, fmt.Sprintf("artifact_store://projects/%s/artifacts/b/1/n%d", p.ID, i)
		if c.revoked {
			a.RevokedAt = t0
		}
		noErr(t, "insert", q.InsertAppArtifact(ctx, a))
	}
	n, err = q.ProjectBlobUsage(ctx, p.ID, "")
	if err != nil || n != 8<<30+1 {
		t.Fatalf("blob bytes = %d %v, want %d (blobs, revoked ones included, never OCI)", n, err, int64(8<<30+1))
	}
	// Uploads count while in progress and once committed unregistered;
	// not the same content committed again at a registered key, nor
	// content swept.
	for _, u := range []artifacts.BlobUpload{
		{UploadID: "up-1", State: artifacts.BlobUploading, Bytes: 10, SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/u1"},
		{UploadID: "up-2", State: artifacts.BlobCommitted, Bytes: 20, Digest: "sha256:c", SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/u2"},
		{UploadID: "up-3", State: artifacts.BlobCommitted, Bytes: 30, Digest: "sha256:d", SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/n0"},
		{UploadID: "up-4", State: artifacts.BlobSwept, Bytes: 40, Digest: "sha256:e", SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/u4"},
	} {
		u.ProjectID, u.IntentID, u.CreatedAt, u.UpdatedAt = p.ID, "i", t0, t0
		noErr(t, "put upload", q.PutBlobUpload(ctx, u))
	}
	for except, want := range map[string]int64{"": 8<<30 + 31, "up-1": 8<<30 + 21, "up-2": 8<<30 + 11} {
		if n, err = q.ProjectBlobUsage(ctx, p.ID, except); err != nil || n != want {
			t.Fatalf("usage except %q = %d %v, want %d", except, n, err, want)
		}
	}
	if u, err := q.ProjectBlobUsageParts(ctx, p.ID); err != nil || u != (artifacts.BlobUsage{Registered: 8<<30 + 1, Unregistered: 20, Uploading: 10}) {
		t.Fatalf("usage parts = %+v %v, want 8 GiB + 1 registered, 20 unregistered, 10 uploading", u, err)
	}
	noErr(t, "grow", q.PutBlobUpload(ctx, artifacts.BlobUpload{UploadID: "up-1", ProjectID: p.ID, IntentID: "i", State: artifacts.BlobUploading, Bytes: 15,
		SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/u1", CreatedAt: t0, UpdatedAt: t0.Add(time.Minute)}))
	if n, err = q.ProjectBlobUsage(ctx, p.ID, ""); err != nil || n != 8<<30+36 {
		t.Fatalf("usage after the upload grew = %d %v", n, err)
	}
	stale, err := q.StaleBlobUploads(ctx, artifacts.BlobUploading, t0.Add(time.Second), 10)
	if err != nil || len(stale) != 0 {
		t.Fatalf("stale uploads before their update = %v %v", stale, err)
	}
	if stale, err = q.StaleBlobUploads(ctx, artifacts.BlobCommitted, t0.Add(time.Second), 10); err != nil || len(stale) != 2 {
		t.Fatalf("stale committed uploads = %v %v", stale, err)
	}
	claimed, err := q.ClaimCommittedBlob(ctx, p.ID, "artifact_store://projects/"+p.ID+"/artifacts/b/1/u2", "sha256:c")
	if err != nil || claimed != 1 {
		t.Fatalf("claim = %d %v", claimed, err)
	}
	if swept, err := q.BlobContentSwept(ctx, p.ID, "artifact_store://projects/"+p.ID+"/artifacts/b/1/u4", "sha256:e"); err != nil || !swept {
		t.Fatalf("swept = %v %v", swept, err)
	}
	if held, err := q.BlobContentHeld(ctx, "sha256:d", "up-3"); err != nil || held {
		t.Fatalf("content only its own upload names is held: %v %v", held, err)
	}
	if held, err := q.BlobContentHeld(ctx, "d", ""); err != nil || !held {
		t.Fatalf("content an artifact names is not held: %v %v", held, err)
	}

	// An append's bookkeeping runs after the blob store let the upload go:
	// a commit, an abort or the sweeper may have moved its row on since,
	// and the late write must leave that row as it is.
	row := func(id string) (artifacts.BlobUpload, bool) {
		u, err := q.GetBlobUpload(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return u, false
		}
		noErr(t, "get upload", err)
		return u, true
	}
	late := t0.Add(time.Hour)
	for _, id := range []string{"up-3", "up-4"} { // committed, swept
		before, _ := row(id)
		wrote, err := q.ReserveBlobUpload(ctx, artifacts.BlobUpload{UploadID: id, ProjectID: p.ID, IntentID: "i", SourceURI: before.SourceURI,
			Bytes: 99, CreatedAt: late, UpdatedAt: late})
		noErr(t, "reserve", err)
		if wrote, err = q.SetUploadingBlobBytes(ctx, id, 99, late); err != nil || wrote {
			t.Fatalf("append bookkeeping on a %s row: wrote=%v %v", before.State, wrote, err)
		}
		if after, _ := row(id); after.State != before.State || after.Digest != before.Digest || after.Bytes != before.Bytes {
			t.Fatalf("a late append's bookkeeping changed a %s row: %+v, was %+v", before.State, after, before)
		}
	}
	noErr(t, "abort", q.DeleteBlobUpload(ctx, "up-1"))
	if wrote, err := q.SetUploadingBlobBytes(ctx, "up-1", 99, late); err != nil || wrote {
		t.Fatalf("append bookkeeping on an aborted upload: wrote=%v %v", wrote, err)
	}
	if u, ok := row("up-1"); ok {
		t.Fatalf("a late append's bookkeeping brought an aborted upload back: %+v", u)
	}
	uri5 := "artifact_store://projects/" + p.ID + "/artifacts/b/1/u5"
	if wrote, err := q.ReserveBlobUpload(ctx, artifacts.BlobUpload{UploadID: "up-5", ProjectID: p.ID, IntentID: "i", SourceURI: uri5,
		Bytes: 7, CreatedAt: t0, UpdatedAt: t0}); err != nil || !wrote {
		t.Fatalf("reserve a new upload: wrote=%v %v", wrote, err)
	}
	if wrote, err := q.SetUploadingBlobBytes(ctx, "up-5", 5, late); err != nil || !wrote {
		t.Fatalf("append bookkeeping on an upload in progress: wrote=%v %v", wrote, err)
	}
	if u, _ := row("up-5"); u.State != artifacts.BlobUploading || u.Bytes != 5 || !u.UpdatedAt.Equal(late) {
		t.Fatalf("upload in progress after its append: %+v", u)
	}

	// Content the sweeper took and has not removed yet refuses
	// registration and counts nothing; tombstones go by age.
	noErr(t, "sweeping", q.PutBlobUpload(ctx, artifacts.BlobUpload{UploadID: "up-6", ProjectID: p.ID, IntentID: "i", State: artifacts.BlobSweeping,
		Bytes: 50, Digest: "sha256:f", SourceURI: "artifact_store://projects/" + p.ID + "/artifacts/b/1/u6", CreatedAt: t0, UpdatedAt: t0}))
	if swept, err := q.BlobContentSwept(ctx, p.ID, "artifact_store://projects/"+p.ID+"/artifacts/b/1/u6", "sha256:f"); err != nil || !swept {
		t.Fatalf("content being swept: swept = %v %v", swept, err)
	}
	if n, err = q.ProjectBlobUsage(ctx, p.ID, ""); err != nil || n != 8<<30+6 {
		t.Fatalf("usage with content being swept = %d %v, want %d", n, err, int64(8<<30+6))
	}
	if n, err := q.DeleteSweptBlobUploads(ctx, t0); err != nil || n != 0 {
		t.Fatalf("tombstones deleted before their cutoff: %d %v", n, err)
	}
	if n, err := q.DeleteSweptBlobUploads(ctx, t0.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("tombstones deleted = %d %v, want 1 (not the one being swept)", n, err)
	}
	if _, ok := row("up-6"); !ok {
		t.Fatal("content still being swept lost its row with the tombstones")
	}
}

func testArtifactDigests(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Artifacts(db)
	q := s.Read()
	o, p := tenant(t, db, "digests")
	o2, p2 := tenant(t, db, "digests2")
	d := "sha256:" + newID()
	a1 := mkAppArtifact(o, p, "app", "1", "main", d)
	a1.TrustState = artifacts.TrustVerified
	a2 := mkAppArtifact(o, p, "app", "2", "main", d)
	a2.LifecycleState = artifacts.StateActive
	other := mkAppArtifact(o, p, "app", "3", "main", "sha256:other")
	foreign := mkAppArtifact(o2, p2, "app", "1", "main", d) // same digest, another project
	for _, a := range []artifacts.AppArtifact{a1, a2, other, foreign} {
		noErr(t, "insert", q.InsertAppArtifact(ctx, a))
	}
	revoked, err := q.DigestRevoked(ctx, p.ID, d)
	if err != nil || revoked {
		t.Fatalf("digest revoked before revocation = %v %v", revoked, err)
	}
	_, _, err = q.DigestRevocation(ctx, p.ID, d)
	wantErr(t, "revocation before revocation", err, storage.ErrNotFound)
	verified, err := q.RepositoryDigestVerified(ctx, a1.Repository, d)
	if err != nil || !verified {
		t.Fatalf("repository digest verified = %v %v", verified, err)
	}
	verified, _ = q.RepositoryDigestVerified(ctx, a1.Repository, "sha256:other")
	if verified {
		t.Fatal("an unverified digest reads as verified")
	}
	got, err := q.UnrevokedArtifactsWithDigest(ctx, p.ID, d)
	noErr(t, "unrevoked with digest", err)
	if len(got) != 2 {
		t.Fatalf("unrevoked with digest: %d", len(got))
	}
	same(t, "unrevoked artifacts with the digest", []string{got[0].ID, got[1].ID}, []string{a1.ID, a2.ID})

	noErr(t, "revoke", s.Mutate(ctx, func(tx artifacts.Tx) error {
		if err := tx.RevokeArtifactsWithDigest(ctx, p.ID, d, "cve-1", at(time.Minute)); err != nil {
			return err
		}
		return audited(tx)
	}))
	for _, a := range []artifacts.AppArtifact{a1, a2} {
		got, _ := q.GetAppArtifact(ctx, p.ID, a.ID)
		want := a
		want.RevokedAt, want.RevokeReason, want.UpdatedAt = at(time.Minute), "cve-1", at(time.Minute)
		sameArtifact(t, "revoked by digest (states kept)", got, want)
	}
	for _, a := range []artifacts.AppArtifact{other, foreign} {
		got, _ := q.GetAppArtifact(ctx, a.ProjectID, a.ID)
		if got.Revoked() {
			t.Fatalf("revocation reached %s (digest %s, project %s)", a.ID, a.Digest, a.ProjectID)
		}
	}
	revoked, _ = q.DigestRevoked(ctx, p.ID, d)
	if !revoked {
		t.Fatal("digest not revoked after revocation")
	}
	revoked, _ = q.DigestRevoked(ctx, p2.ID, d)
	if revoked {
		t.Fatal("the digest is revoked in another project")
	}
	revoked, err = q.RepositoryDigestRevoked(ctx, a1.Repository, d)
	if err != nil || !revoked {
		t.Fatalf("repository digest revoked = %v %v", revoked, err)
	}
	revoked, _ = q.RepositoryDigestRevoked(ctx, foreign.Repository, d)
	if revoked {
		t.Fatal("the digest is revoked in another project's repository")
	}
	// Revocation is the project's: the digest is revoked in every
	// repository of the project, whether an artifact (of any digest) or
	// only an intent reached it, and nowhere else.
	sibling := mkAppArtifact(o, p, "sibling", "1", "main", "sha256:sibling")
	noErr(t, "insert", q.InsertAppArtifact(ctx, sibling))
	pushedOnly := mkIntent(o, p, "publish", "pushed")
	pushedOnly.Repository = o.Slug + "/pushed"
	noErr(t, "insert intent", q.InsertArtifactIntent(ctx, pushedOnly))
	foreignIntent := mkIntent(o2, p2, "publish", "elsewhere")
	foreignIntent.Repository = o2.Slug + "/elsewhere"
	noErr(t, "insert intent", q.InsertArtifactIntent(ctx, foreignIntent))
	for repo, want := range map[string]bool{sibling.Repository: true, pushedOnly.Repository: true,
		foreignIntent.Repository: false, foreign.Repository: false, o.Slug + "/unknown": false} {
		revoked, err = q.RepositoryDigestRevoked(ctx, repo, d)
		if err != nil || revoked != want {
			t.Fatalf("digest revoked in %s = %v %v, want %v", repo, revoked, err, want)
		}
	}
	if revoked, _ = q.RepositoryDigestRevoked(ctx, sibling.Repository, "sha256:sibling"); revoked {
		t.Fatal("an unrevoked digest reads as revoked")
	}
	got, _ = q.UnrevokedArtifactsWithDigest(ctx, p.ID, d)
	if len(got) != 0 {
		t.Fatalf("unrevoked after revocation: %d", len(got))
	}

	// A later revocation keeps the first one's time and reason.
	late := mkAppArtifact(o, p, "app", "4", "main", d)
	noErr(t, "insert", q.InsertAppArtifact(ctx, late))
	noErr(t, "revoke again", q.RevokeArtifactsWithDigest(ctx, p.ID, d, "cve-2", at(time.Hour)))
	when, reason, err := q.DigestRevocation(ctx, p.ID, d)
	if err != nil || !when.Equal(at(time.Minute)) || reason != "cve-1" {
		t.Fatalf("first revocation = %v %q %v, want %v cve-1", when, reason, err, at(time.Minute))
	}
	for _, a := range []artifacts.AppArtifact{a1, late} {
		got, _ := q.GetAppArtifact(ctx, p.ID, a.ID)
		wantAt, wantReason := at(time.Minute), "cve-1"
		if a.ID == late.ID {
			wantAt, wantReason = at(time.Hour), "cve-2"
		}
		if !got.RevokedAt.Equal(wantAt) || got.RevokeReason != wantReason {
			t.Fatalf("%s revoked at %v for %q, want %v %q", a.ID, got.RevokedAt, got.RevokeReason, wantAt, wantReason)
		}
	}
}

func testArtifactOwners(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	o, p := tenant(t, db, "owners")
	sa := serviceaccounts.ServiceAccount{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Slug: "ci", Name: "CI", Status: serviceaccounts.AccountDisabled,
		TokensValidAfter: t0, CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "create account", store.ServiceAccounts(db).Read().CreateServiceAccount(ctx, sa))
	acct, err := q.ArtifactOwnerAccount(ctx, sa.ID)
	noErr(t, "owner account", err)
	same(t, "owner account", acct, artifacts.OwnerAccount{ID: sa.ID, OrgID: o.ID, ProjectID: p.ID, Status: "disabled"})
	_, err = q.ArtifactOwnerAccount(ctx, newID())
	wantErr(t, "missing owner account", err, storage.ErrNotFound)

	n := mkNode(t, store.Nodes(db), "owner", nodes.StateDraining, 0, t0)
	state, err := q.ArtifactOwnerNodeState(ctx, n.ID)
	if err != nil || state != nodes.StateDraining {
		t.Fatalf("owner node state = %q %v", state, err)
	}
	_, err = q.ArtifactOwnerNodeState(ctx, newID())
	wantErr(t, "missing owner node", err, storage.ErrNotFound)
	org, err := q.GetOrg(ctx, o.ID)
	if err != nil || org.Slug != o.Slug {
		t.Fatalf("org of an intent: %+v %v", org, err)
	}
}

// Registry quota holds last written before a time are found oldest first,
// across projects, up to the limit; one written at the time is not stale.
func testStaleRegistryHolds(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, h := range []artifacts.RegistryHold{
		{ID: "up-b", ProjectID: "p1", UpdatedAt: t0.Add(-time.Minute)},
		{ID: "up-a", ProjectID: "p2", UpdatedAt: t0.Add(-time.Hour)},
		{ID: "put:c", ProjectID: "p1", UpdatedAt: t0},
		{ID: "up-d", ProjectID: "p2", UpdatedAt: t0.Add(time.Minute)},
	} {
		h.Repository, h.SizeBytes, h.CreatedAt = "r", int64(i+1), t0.Add(-2*time.Hour)
		noErr(t, "put hold", q.PutRegistryHold(ctx, h))
	}
	stale, err := q.StaleRegistryHolds(ctx, t0, 10)
	noErr(t, "stale holds", err)
	if len(stale) != 2 || stale[0].ID != "up-a" || stale[1].ID != "up-b" || stale[0].SizeBytes != 2 || !stale[0].UpdatedAt.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("stale holds = %+v, want up-a then up-b", stale)
	}
	if stale, err = q.StaleRegistryHolds(ctx, t0, 1); err != nil || len(stale) != 1 || stale[0].ID != "up-a" {
		t.Fatalf("stale holds, limit 1 = %+v %v", stale, err)
	}
}

// A project's quota override: NULL keeps the platform's value, 0 is a
// quota of its own (nothing may be stored), one project's row leaves
// another's alone, and a negative quota never reaches the table.
func testStorageQuotas(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Artifacts(db).Read()
	_, a := tenant(t, db, "quota-a")
	_, b := tenant(t, db, "quota-b")
	if _, err := q.GetStorageQuota(ctx, a.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("override of a project without one: %v, want not found", err)
	}
	zero, ten := int64(0), int64(10<<30)
	want := artifacts.StorageQuota{ProjectID: a.ID, BlobBytes: &zero, UpdatedBy: "user:1", UpdatedAt: t0}
	noErr(t, "put", q.PutStorageQuota(ctx, want))
	got, err := q.GetStorageQuota(ctx, a.ID)
	noErr(t, "get", err)
	same(t, "override with a blob quota of 0 and no registry override", got, want)
	want = artifacts.StorageQuota{ProjectID: a.ID, RegistryBytes: &ten, UpdatedBy: "user:2", UpdatedAt: t0.Add(time.Minute)}
	noErr(t, "replace", q.PutStorageQuota(ctx, want))
	got, err = q.GetStorageQuota(ctx, a.ID)
	noErr(t, "get", err)
	same(t, "replaced override", got, want)
	if _, err := q.GetStorageQuota(ctx, b.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("another project's override: %v, want not found", err)
	}
	neg := int64(-1)
	if err := q.PutStorageQuota(ctx, artifacts.StorageQuota{ProjectID: b.ID, BlobBytes: &neg, UpdatedBy: "user:1", UpdatedAt: t0}); err == nil {
		t.Fatal("a negative quota was stored")
	}
	noErr(t, "delete", q.DeleteStorageQuota(ctx, a.ID))
	noErr(t, "delete again", q.DeleteStorageQuota(ctx, a.ID))
	if _, err := q.GetStorageQuota(ctx, a.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("override after delete: %v, want not found", err)
	}
}

// What a registry recount reads and writes: a blob's last use only moves
// forward (insert of a held digest, touch), the project's repositories
// come from its intents and blobs, and a recount asked for twice is due
// at the earlier time and cleared only up to the time its pass started.
func testRegistryRecounts(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pid := "p-" + newID()
	b := artifacts.RegistryBlob{ProjectID: pid, Digest: "sha256:aa", SizeBytes: 7, Repository: "r1", CreatedAt: t0}
	noErr(t, "insert blob", q.InsertRegistryBlob(ctx, b))
	noErr(t, "insert other", q.InsertRegistryBlob(ctx, artifacts.RegistryBlob{ProjectID: pid, Digest: "sha256:bb", SizeBytes: 3,
		Repository: "r2", CreatedAt: t0, UsedAt: t0.Add(time.Hour)}))
	noErr(t, "touch", q.TouchRegistryBlob(ctx, pid, "sha256:aa", t0.Add(2*time.Hour)))
	noErr(t, "touch back", q.TouchRegistryBlob(ctx, pid, "sha256:aa", t0.Add(time.Hour)))
	again := b
	again.SizeBytes, again.CreatedAt, again.UsedAt = 99, t0.Add(time.Minute), t0.Add(time.Minute)
	noErr(t, "insert held digest", q.InsertRegistryBlob(ctx, again))
	blobs, err := q.RegistryBlobs(ctx, pid)
	noErr(t, "blobs", err)
	if len(blobs) != 2 || blobs[0].Digest != "sha256:aa" || blobs[0].SizeBytes != 7 || !blobs[0].CreatedAt.Equal(t0) ||
		!blobs[0].UsedAt.Equal(t0.Add(2*time.Hour)) || !blobs[1].UsedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("blobs = %+v", blobs)
	}
	repos, err := q.RegistryRepositories(ctx, pid)
	noErr(t, "repositories", err)
	same(t, "repositories", repos, []string{"r1", "r2"})
	noErr(t, "delete blob", q.DeleteRegistryBlob(ctx, pid, "sha256:aa"))
	if c, _, err := q.RegistryUsage(ctx, pid); err != nil || c != 3 {
		t.Fatalf("usage after delete = %d %v, want 3", c, err)
	}

	noErr(t, "schedule", q.ScheduleRegistryRecount(ctx, pid, t0.Add(time.Hour)))
	noErr(t, "schedule earlier", q.ScheduleRegistryRecount(ctx, pid, t0))
	noErr(t, "schedule later", q.ScheduleRegistryRecount(ctx, pid, t0.Add(2*time.Hour)))
	if due, err := q.DueRegistryRecounts(ctx, t0.Add(-time.Second), 10); err != nil || len(due) != 0 {
		t.Fatalf("due before = %v %v", due, err)
	}
	if due, err := q.DueRegistryRecounts(ctx, t0, 10); err != nil || len(due) != 1 || due[0] != pid {
		t.Fatalf("due = %v %v, want %s", due, err, pid)
	}
	noErr(t, "clear before", q.ClearRegistryRecount(ctx, pid, t0.Add(-time.Second)))
	if due, err := q.DueRegistryRecounts(ctx, t0, 10); err != nil || len(due) != 1 {
		t.Fatalf("due after a clear through an earlier time = %v %v", due, err)
	}
	noErr(t, "clear", q.ClearRegistryRecount(ctx, pid, t0))
	if due, err := q.DueRegistryRecounts(ctx, t0.Add(24*time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("due after clear = %v %v", due, err)
	}
	// A request replaces the due time, later as well as earlier, so a
	// clear through an earlier time leaves it.
	noErr(t, "schedule", q.ScheduleRegistryRecount(ctx, pid, t0))
	noErr(t, "request later", q.RequestRegistryRecount(ctx, pid, t0.Add(time.Minute)))
	noErr(t, "clear through the first", q.ClearRegistryRecount(ctx, pid, t0))
	if due, err := q.DueRegistryRecounts(ctx, t0.Add(time.Minute), 10); err != nil || len(due) != 1 || due[0] != pid {
		t.Fatalf("due after a later request and a clear through the earlier time = %v %v, want [%s]", due, err, pid)
	}
	noErr(t, "request anew", q.RequestRegistryRecount(ctx, "p-"+pid, t0))
	noErr(t, "clear", q.ClearRegistryRecount(ctx, pid, t0.Add(time.Minute)))
	noErr(t, "clear", q.ClearRegistryRecount(ctx, "p-"+pid, t0))
}

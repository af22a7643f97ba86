package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A project frees its own registry quota: the publish credential deletes
// an image nobody registered (202) and the recount the delete kicks gives
// its blobs back, with an audit row naming who deleted what. The digest of
// a registered artifact that is neither revoked nor retired is refused
// (DENIED, naming the artifact and what to do), and the refusal audited,
// until it is revoked, and then while a live instance runs it. A pull
// credential cannot delete, nor can another project's publish credential.
func TestRegistryPublisherDeletesOwnImages(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, clk, recounter, host, intent := clockedQuotaRepos(t, d)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		repo, pub := intent("del-a")

		stray := quotaImage(t, patterned(50, 30_000))
		kept := quotaImage(t, patterned(51, 20_000))
		other := quotaImage(t, patterned(52, 10_000))
		for _, img := range []v1.Image{stray, kept, other} {
			writeImage(t, ctx, host, repo, pub, img, nil)
		}
		dStray, dKept, dOther := digestRef(t, host, repo, stray), digestRef(t, host, repo, kept), digestRef(t, host, repo, other)
		art := admin.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts", map[string]any{"app_slug": "del-a", "app_version": "1.0.0",
			"artifact_name": "runtime", "repository": repo, "digest": dKept.DigestStr()}).Want(t, 201)
		artID := art.String("id")
		want := imageBytes(t, stray) + imageBytes(t, kept) + imageBytes(t, other)
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("after the pushes: %d committed, %d held; want %d, 0", c, h, want)
		}

		// A pull credential, and another project's publish credential,
		// get no token that deletes.
		pull := unwrap(t, admin, wrapToken(admin.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts/"+artID+"/pull-intents", map[string]any{}).Want(t, 201)))
		otherPID := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "del-other", "name": "Other"}).Want(t, 201).String("id")
		_, stranger := publishIntent(t, admin, otherPID, map[string]any{"app_slug": "del-a", "app_version": "1.0.0", "artifact_name": "runtime"})
		for who, rc := range map[string]regCreds{"pull credential": pull, "another project's publish credential": stranger} {
			wantRegistryError(t, remote.Delete(dOther, rc.opts(ctx)...), "UNAUTHORIZED")
			if _, err := remote.Head(dOther, pub.opts(ctx)...); err != nil {
				t.Fatalf("after the %s's delete: %v", who, err)
			}
		}

		// The registered, unverified draft stays.
		err := remote.Delete(dKept, pub.opts(ctx)...)
		wantRegistryError(t, err, "DENIED", artID, "state draft", "gpuaas artifact revoke "+artID)
		if _, err := remote.Head(dKept, pub.opts(ctx)...); err != nil {
			t.Fatalf("the registered manifest after a refused delete: %v", err)
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dKept.DigestStr(), "denied", 1)

		// The stray image goes, and its bytes come back after the recount.
		n := recounter.Runs()
		if err := remote.Delete(dStray, pub.opts(ctx)...); err != nil {
			t.Fatalf("the publisher's delete of an unregistered image: %v", err)
		}
		if err := recounter.WaitRuns(ctx, n+1); err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Head(dStray, pub.opts(ctx)...); err == nil {
			t.Fatal("the deleted manifest is still there")
		}
		clk.Advance(artifacts.RegistryHoldIdle(s.App.Config.StreamTimeout) + time.Minute)
		kickSweep(t, ctx, recounter)
		want -= imageBytes(t, stray)
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("after the recount: %d committed, %d held; want %d, 0", c, h, want)
		}
		// The credential's owner deleted it, in the intent's project.
		e := wantManifestDeleteAudit(t, s, repo+"@"+dStray.DigestStr(), "success", 1)[0]
		reg, _, err := s.DB.Queries().ListAudit(ctx, store.AuditFilter{Action: "artifact.register", ResourceID: artID}, store.Page{Limit: 1})
		if err != nil || len(reg) != 1 {
			t.Fatalf("the registration's audit row: %v %v", reg, err)
		}
		if e.ActorType != "user" || e.ActorID != reg[0].ActorID || e.ProjectID != pid || e.OrgID != s.Creds.OrgID || e.CorrelationID == "" {
			t.Fatalf("audit row of the delete: %+v (the admin is %s)", e, reg[0].ActorID)
		}
		var after map[string]any
		if err := json.Unmarshal(e.After, &after); err != nil || after["digest"] != dStray.DigestStr() || after["repository"] != repo {
			t.Fatalf("audit row of the delete records %s (%v)", e.After, err)
		}

		// Revoked, the artifact lets its manifest go (a fresh token and
		// credentials: the old ones expired with the clock).
		s.Admin().Do("POST", "/api/v1/projects/"+pid+"/app-artifacts/"+artID+"/revoke", map[string]string{"reason": "superseded"}).Want(t, 200)
		_, pub = intent("del-a")
		// Unless a live instance runs it (the instances domain's answer,
		// stood in for here).
		running := &runningDigest{}
		running.digest.Store(dKept.DigestStr())
		s.App.API.Artifacts.AddInstanceUsage(running)
		wantRegistryError(t, remote.Delete(dKept, pub.opts(ctx)...), "DENIED", "is still run by live instances of app del-a")
		running.digest.Store("")
		if err := remote.Delete(dKept, pub.opts(ctx)...); err != nil {
			t.Fatalf("delete of a revoked artifact's manifest: %v", err)
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dKept.DigestStr(), "success", 1)
		wantManifestDeleteAudit(t, s, repo+"@"+dKept.DigestStr(), "denied", 2)
	})
}

// A child manifest of a registered image index is not registered itself,
// yet deleting it breaks the index's pulls of its platform: the publisher's
// delete of it is refused (DENIED, naming the artifact and its index, and
// audited) while the index's artifact is unsettled, and after its revoke
// while a live instance runs the index; then the child can go.
func TestRegistryPublisherCannotDeleteARegisteredIndexChild(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, _, _, host, intent := clockedQuotaRepos(t, d)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		repo, pub := intent("del-idx")

		amd, arm := quotaImage(t, patterned(70, 8_000)), quotaImage(t, patterned(71, 9_000))
		idxDigest := pushIndex(t, ctx, host, repo, pub, amd, arm)
		artID := admin.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts", map[string]any{"app_slug": "del-idx", "app_version": "1.0.0",
			"artifact_name": "runtime", "repository": repo, "digest": idxDigest.String()}).Want(t, 201).String("id")
		dAmd := digestRef(t, host, repo, amd)

		wantRegistryError(t, remote.Delete(dAmd, pub.opts(ctx)...), "DENIED",
			"manifest "+dAmd.DigestStr()+" is part of the image index "+idxDigest.String()+" of artifact "+artID, "gpuaas artifact revoke "+artID)
		if _, err := remote.Head(dAmd, pub.opts(ctx)...); err != nil {
			t.Fatalf("the index's child after a refused delete: %v", err)
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dAmd.DigestStr(), "denied", 1)

		// Revoked, the index still serves a live instance that runs it.
		admin.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts/"+artID+"/revoke", map[string]string{"reason": "superseded"}).Want(t, 200)
		running := &runningDigest{}
		running.digest.Store(idxDigest.String())
		s.App.API.Artifacts.AddInstanceUsage(running)
		wantRegistryError(t, remote.Delete(dAmd, pub.opts(ctx)...), "DENIED",
			"part of the image index "+idxDigest.String()+" of artifact "+artID, "which live instances of app del-idx still run")
		running.digest.Store("")
		if err := remote.Delete(dAmd, pub.opts(ctx)...); err != nil {
			t.Fatalf("delete of a revoked index's child: %v", err)
		}
		if _, err := remote.Head(dAmd, pub.opts(ctx)...); err == nil {
			t.Fatal("the deleted child is still there")
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dAmd.DigestStr(), "success", 1)
		wantManifestDeleteAudit(t, s, repo+"@"+dAmd.DigestStr(), "denied", 2)
	})
}

// runningDigest stands in for the instances domain: one live instance of
// app del-a or del-idx runs digest.
type runningDigest struct{ digest atomic.Value }

func (r *runningDigest) LiveInstancesUsingDigest(_ context.Context, _ storage.Tx, appSlug, digest string) (int, error) {
	if d, _ := r.digest.Load().(string); d == digest && (appSlug == "del-a" || appSlug == "del-idx") {
		return 1, nil
	}
	return 0, nil
}

// digestRef is img's manifest in repo by digest.
func digestRef(t *testing.T, host, repo string, img v1.Image) name.Digest {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(host+"/"+repo+"@"+d.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// wantManifestDeleteAudit asserts n audit rows of a manifest delete of
// resource (repository@digest) with outcome, and returns them.
func wantManifestDeleteAudit(t *testing.T, s *servertest.Server, resource, outcome string, n int) []store.AuditEvent {
	t.Helper()
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "artifact.registry_manifest.delete",
		ResourceID: resource, Outcome: outcome}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d %s audit rows of the delete of %s, want %d", len(evs), outcome, resource, n)
	}
	return evs
}

// A registry token outlives a change to its credential's owner by up to its
// lifetime, and a delete destroys data: the delete itself asks again
// whether the owner may still write in the project. A publisher disabled
// after minting a delete token deletes nothing with it, and the refusal is
// audited. A delete token never deletes a blob on its own.
func TestRegistryDeleteAsksAgainWhetherTheOwnerMayWrite(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		admin := s.Admin()
		pid := s.Creds.ProjectID
		pw := "pw-deleter-long-enough"
		uid := admin.Do("POST", "/api/v1/users", map[string]string{"email": "deleter@example.com", "password": pw}).Want(t, 201).String("id")
		admin.Do("POST", "/api/v1/projects/"+pid+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, 201)
		repo, rc := publishIntent(t, s.Login("deleter@example.com", pw), pid, map[string]any{"app_slug": "del-owner", "app_version": "1.0.0", "artifact_name": "runtime"})
		host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
		img := quotaImage(t, patterned(61, 5_000))
		writeImage(t, ctx, host, repo, rc, img, nil)
		dg := digestRef(t, host, repo, img).DigestStr()

		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v2/token?scope=repository:"+repo+":delete", nil)
		req.SetBasicAuth(rc.user, rc.pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tok struct {
			Token string `json:"token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || tok.Token == "" {
			t.Fatalf("delete token: %d %v", resp.StatusCode, err)
		}

		// The delete token deletes no blob on its own: unlinking a layer
		// would break every image using it behind the gate's back.
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		layer, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		bdel, _ := http.NewRequestWithContext(ctx, "DELETE", s.URL+"/v2/"+repo+"/blobs/"+layer.String(), nil)
		bdel.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err = http.DefaultClient.Do(bdel)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 405 || !strings.Contains(string(body), "UNSUPPORTED") {
			t.Fatalf("a blob delete with a delete token: %d %s; want 405 UNSUPPORTED", resp.StatusCode, body)
		}

		admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
		del, _ := http.NewRequestWithContext(ctx, "DELETE", s.URL+"/v2/"+repo+"/manifests/"+dg, nil)
		del.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err = http.DefaultClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "DENIED") || !strings.Contains(string(body), "may no longer write") {
			t.Fatalf("a disabled owner's delete with a token minted before: %d %s; want 403 DENIED", resp.StatusCode, body)
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dg, "denied", 1)
		_, fresh := publishIntent(t, admin, pid, map[string]any{"app_slug": "del-owner", "app_version": "1.0.1", "artifact_name": "runtime"})
		if _, err := remote.Head(digestRef(t, host, repo, img), fresh.opts(ctx)...); err != nil {
			t.Fatalf("the manifest after a refused delete: %v", err)
		}
	})
}

// A publisher may delete the images of an index nobody registered yet; the
// index is then no image the registry can serve, and registering it is
// refused, naming the missing manifest.
func TestRegisteringAnIndexWithADeletedImageIsRefused(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, repo, pub, idxDigest, dArm := unregisteredIndex(t, d, "del-gone", 80)
		pid := s.Creds.ProjectID
		if err := remote.Delete(dArm, pub.opts(ctx)...); err != nil {
			t.Fatalf("delete of an unregistered index's image: %v", err)
		}
		r := s.Admin().Do("POST", "/api/v1/projects/"+pid+"/app-artifacts", map[string]any{"app_slug": "del-gone", "app_version": "1.0.0",
			"artifact_name": "runtime", "repository": repo, "digest": idxDigest.String()}).Want(t, 422)
		if r.ErrorCode() != "index_incomplete" || !strings.Contains(string(r.Body), dArm.DigestStr()) {
			t.Fatalf("registering an index whose image was deleted: %s", r.Body)
		}
	})
}

// within receives from ch, failing the test when nothing comes in a
// minute (a request whose goroutine failed never sends).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s did not end in a minute", what)
		panic("unreachable")
	}
}

// Registering an index and deleting one of its images exclude each other:
// a delete that comes while the registration stands between its check that
// every image is there and its record waits for the record, and is then
// refused (DENIED, naming the index's artifact). Without that, the delete
// found no registered index, the image went, and the index was registered
// with a platform the registry cannot serve.
func TestRegisteringAnIndexAndDeletingItsImageExcludeEachOther(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, repo, pub, idxDigest, dArm := unregisteredIndex(t, d, "idx-race", 90)
		pid := s.Creds.ProjectID

		// The registration stops once the registry answered its checks
		// (both images are there), before it records the artifact.
		pause := newPausePoint(t)
		s.App.API.Artifacts.OnRegisterChecked(func(_ context.Context, a artifacts.AppArtifact) {
			if a.Digest == idxDigest.String() {
				pause.stop()
			}
		})
		t.Cleanup(func() { s.App.API.Artifacts.OnRegisterChecked(nil) })
		registered := make(chan *servertest.Response, 1)
		go func() {
			registered <- s.Admin().Do("POST", "/api/v1/projects/"+pid+"/app-artifacts", map[string]any{"app_slug": "idx-race", "app_version": "1.0.0",
				"artifact_name": "runtime", "repository": repo, "digest": idxDigest.String()})
		}()
		reached(t, pause, registered, "the registration")

		deleted := make(chan error, 1)
		go func() { deleted <- remote.Delete(dArm, pub.opts(ctx)...) }()
		select {
		case err := <-deleted:
			pause.resume()
			r := <-registered
			t.Fatalf("the delete of an image of the index ended (%v) while the index's registration stood between its check and its record (then %d %s)", err, r.Status, r.Body)
		case <-time.After(2 * time.Second):
		}
		pause.resume()
		artID := within(t, registered, "the registration").Want(t, 201).String("id")
		wantRegistryError(t, within(t, deleted, "the delete"), "DENIED", "manifest "+dArm.DigestStr()+" is part of the image index "+idxDigest.String()+" of artifact "+artID)
		if _, err := remote.Head(dArm, pub.opts(ctx)...); err != nil {
			t.Fatalf("the index's image after the refused delete: %v", err)
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dArm.DigestStr(), "denied", 1)
	})
}

// pausePoint stops the first request that reaches it (stop, called from
// a test hook) until the test resumes it; it is resumed at the test's end
// at the latest, so a failed test leaves no request stopped.
type pausePoint struct {
	reached, resumed chan struct{}
	stopped, started sync.Once
}

func newPausePoint(t *testing.T) *pausePoint {
	p := &pausePoint{reached: make(chan struct{}), resumed: make(chan struct{})}
	t.Cleanup(p.resume)
	return p
}

// stop closes reached and waits to be resumed, the first time only.
func (p *pausePoint) stop() {
	p.stopped.Do(func() {
		close(p.reached)
		<-p.resumed
	})
}

// resume lets the stopped request go on; a second call does nothing.
func (p *pausePoint) resume() { p.started.Do(func() { close(p.resumed) }) }

// reached waits until a request reaches p, failing t when it ends first
// (sending on ended) or does not come in a minute.
func reached[T any](t *testing.T, p *pausePoint, ended <-chan T, what string) {
	t.Helper()
	select {
	case <-p.reached:
	case v := <-ended:
		t.Fatalf("%s ended without reaching its pause: %+v", what, v)
	case <-time.After(time.Minute):
		t.Fatalf("%s did not reach its pause in a minute", what)
	}
}

// unregisteredIndex starts a server on d and pushes an index of two images
// (their content patterned from seed and seed+1) to the repository of a
// publish intent for app slug, with the intent's credential pub; it
// returns the index's digest and the second image's manifest, nothing
// registered.
func unregisteredIndex(t *testing.T, d store.Dialect, slug string, seed byte) (ctx context.Context, s *servertest.Server, repo string, pub regCreds, idx v1.Hash, second name.Digest) {
	t.Helper()
	ctx, s, _, _, host, intent := clockedQuotaRepos(t, d)
	repo, pub = intent(slug)
	first, img := quotaImage(t, patterned(seed, 7_000)), quotaImage(t, patterned(seed+1, 6_000))
	idx = pushIndex(t, ctx, host, repo, pub, first, img)
	return ctx, s, repo, pub, idx, digestRef(t, host, repo, img)
}

// pushIndex pushes an index of imgs to repo as tag v1 with rc and returns
// its digest.
func pushIndex(t *testing.T, ctx context.Context, host, repo string, rc regCreds, imgs ...v1.Image) v1.Hash {
	t.Helper()
	idx := quotaIndex(t, imgs...)
	tag, err := name.NewTag(host+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx, rc.opts(ctx)...); err != nil {
		t.Fatalf("push of the index: %v", err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Deletes of different manifests in one repository run side by side: while
// one delete stands between its checks and the registry's delete, a delete
// of another image of the repository goes through. An image index's
// registration still waits for the delete in progress (which holds the
// repository's indexes shared, the registration exclusively), so it
// checks the index after the delete, finds the image gone and is refused;
// without the wait it would have found every image there and recorded an
// index the registry can no longer serve whole.
func TestRegistryDeletesInOneRepositoryRunSideBySide(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, repo, pub, idxDigest, dArm := unregisteredIndex(t, d, "del-side", 110)
		pid := s.Creds.ProjectID
		host := s.Admin().Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
		loose := quotaImage(t, patterned(112, 5_000))
		writeImage(t, ctx, host, repo, pub, loose, nil)
		dLoose := digestRef(t, host, repo, loose)

		// The delete of the index's image stops once its checks let it
		// through, before the registry deletes.
		pause := newPausePoint(t)
		s.App.API.Artifacts.OnManifestDeleteChecked(func(_ context.Context, _, digest string) {
			if digest == dArm.DigestStr() {
				pause.stop()
			}
		})
		t.Cleanup(func() { s.App.API.Artifacts.OnManifestDeleteChecked(nil) })
		deleted := make(chan error, 1)
		go func() { deleted <- remote.Delete(dArm, pub.opts(ctx)...) }()
		reached(t, pause, deleted, "the delete")

		other := make(chan error, 1)
		go func() { other <- remote.Delete(dLoose, pub.opts(ctx)...) }()
		select {
		case err := <-other:
			if err != nil {
				t.Fatalf("the delete of another image beside a delete in progress: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the delete of another image of the repository waited for a delete in progress")
		}
		if _, err := remote.Head(dLoose, pub.opts(ctx)...); err == nil {
			t.Fatal("the other image is still there after its delete")
		}
		wantManifestDeleteAudit(t, s, repo+"@"+dLoose.DigestStr(), "success", 1)

		registered := make(chan *servertest.Response, 1)
		go func() {
			registered <- s.Admin().Do("POST", "/api/v1/projects/"+pid+"/app-artifacts", map[string]any{"app_slug": "del-side", "app_version": "1.0.0",
				"artifact_name": "runtime", "repository": repo, "digest": idxDigest.String()})
		}()
		// The registration reaches the repository's key and queues behind
		// the delete in progress (it does not answer meanwhile).
		for queued := time.Now().Add(20 * time.Second); registry.Waiting(registry.IndexesKey(repo)) == 0; time.Sleep(5 * time.Millisecond) {
			select {
			case r := <-registered:
				pause.resume()
				t.Fatalf("the index's registration answered %d %s while a delete of one of its images stood between its check and the delete", r.Status, r.Body)
			default:
			}
			if time.Now().After(queued) {
				pause.resume()
				t.Fatal("the index's registration never queued for the repository's key")
			}
		}
		pause.resume()
		if err := within(t, deleted, "the delete"); err != nil {
			t.Fatalf("the delete of the index's image: %v", err)
		}
		r := within(t, registered, "the registration").Want(t, 422)
		if r.ErrorCode() != "index_incomplete" || !strings.Contains(string(r.Body), dArm.DigestStr()) {
			t.Fatalf("registering the index after the delete of its image: %s", r.Body)
		}
	})
}

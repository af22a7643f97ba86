package httpapi_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

type regCreds struct{ user, pass, registry, repo string }

func unwrap(t *testing.T, c *servertest.Client, token string) regCreds {
	t.Helper()
	r := c.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": token}).Want(t, 200)
	return regCreds{r.String("username"), r.String("password"), r.String("registry"), r.String("repository")}
}

func (rc regCreds) opts(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: rc.user, Password: rc.pass})}
}

// publishIntent creates a publish intent as c in projectID (body: the
// request's fields) and unwraps its registry credentials: the intent's
// repository and the credentials.
func publishIntent(t *testing.T, c *servertest.Client, projectID string, body map[string]any) (string, regCreds) {
	t.Helper()
	pi := c.Do("POST", "/api/v1/projects/"+projectID+"/app-artifacts/publish-intents", body).Want(t, 201)
	return pi.String("repository"), unwrap(t, c, wrapToken(pi))
}

func wrapToken(r *servertest.Response) string {
	w, _ := r.JSON["wrapped_credentials"].(map[string]any)
	s, _ := w["wrapping_token"].(string)
	return s
}

// The whole OCI publish path through the real embedded registry on the
// server's own listener, with a real OCI client.
func TestArtifactOCILifecycle(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testArtifactOCILifecycle(t, d)
	})
}

func testArtifactOCILifecycle(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d)
	// The artifacts clock, moved forward to expire intents without sleeping.
	var skew atomic.Int64
	s.WhileWorkersStopped(func() { // the artifact sweepers read it
		s.App.API.Artifacts.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	admin := s.Admin()
	pid := s.Creds.ProjectID
	base := "/api/v1/projects/" + pid + "/app-artifacts"

	info := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200)
	host := info.String("registry_host")
	if host != s.App.Addr() || info.String("token_realm") != s.URL+"/v2/token" {
		t.Fatalf("registry info does not follow the listener: %s", info.Body)
	}

	// The project's signing key, and a stranger's.
	privPEM, pubPEM := mustKeyPair(t, signature.AlgECDSAP256)
	otherPriv, _ := mustKeyPair(t, signature.AlgEd25519)
	key := admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "ci", "public_key": string(pubPEM)}).Want(t, 201)
	admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "bad", "public_key": "not a key"}).Want(t, 400)
	admin.Do("GET", "/api/v1/projects/"+pid+"/artifact-signing-keys", nil).Want(t, 200)

	// A second project, the "other tenant" for repository checks.
	other := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
	otherIntent := admin.Do("POST", "/api/v1/projects/"+other+"/app-artifacts/publish-intents",
		map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime", "signature_required": false}).Want(t, 201)
	otherRepo := otherIntent.String("repository")

	pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime", "channel": "dev"}).Want(t, 201)
	if !(pi.JSON["signature_required"] == true) || pi.String("signature_scheme") != "cosign_key" || pi.String("credential_delivery") != "wrapped" {
		t.Fatalf("publish intent: %s", pi.Body)
	}
	repo := pi.String("repository")
	if !strings.HasPrefix(repo, "gpuaas/apps/") || repo == otherRepo {
		t.Fatalf("repository %q (other project %q)", repo, otherRepo)
	}
	tok := wrapToken(pi)
	if strings.Contains(s.Logs.String(), tok) {
		t.Fatal("the wrapping token leaked into the logs")
	}
	creds := unwrap(t, admin, tok)
	if r := admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}); r.Status != 409 || r.ErrorCode() != "wrapping_token_invalid" {
		t.Fatalf("second unwrap: %d %s", r.Status, r.Body)
	}
	if creds.registry != host || creds.repo != repo {
		t.Fatalf("unwrapped %+v", creds)
	}

	// Push an image built here with the intent's credentials.
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/" + repo + ":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, creds.opts(ctx)...); err != nil {
		t.Fatalf("push with intent credentials: %v", err)
	}
	dg, _ := img.Digest()
	digest := dg.String()

	// The credentials reach nothing else.
	otherRef, _ := name.ParseReference(host + "/" + otherRepo + ":x")
	fresh, _ := random.Image(512, 1)
	if err := remote.Write(otherRef, fresh, creds.opts(ctx)...); err == nil {
		t.Fatal("intent credentials pushed to another project's repository")
	}
	if _, err := remote.Get(otherRef, creds.opts(ctx)...); err == nil {
		t.Fatal("intent credentials pulled from another repository")
	}
	if err := remote.Write(ref, fresh, remote.WithContext(ctx)); err == nil {
		t.Fatal("anonymous push accepted")
	}

	// Registration checks the real registry.
	reg := func(repo, digest, tag string) *servertest.Response {
		body := map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime", "repository": repo, "tag": tag}
		if digest != "" {
			body["digest"] = digest
		}
		return admin.Do("POST", base, body)
	}
	if r := reg(repo, "sha256:"+strings.Repeat("ab", 32), ""); r.Status != 422 || r.ErrorCode() != "manifest_not_found" {
		t.Fatalf("unknown digest: %d %s", r.Status, r.Body)
	}
	if r := reg(otherRepo, digest, ""); r.Status != 422 || r.ErrorCode() != "repository_not_owned" {
		t.Fatalf("other project's repository: %d %s", r.Status, r.Body)
	}
	if r := reg(repo, "", "1.0.0"); r.Status != 400 {
		t.Fatalf("tag alone: %d %s", r.Status, r.Body)
	}
	art := reg(repo, digest, "1.0.0").Want(t, 201)
	id := art.String("id")
	if art.String("lifecycle_state") != "draft" || art.String("trust_state") != "unverified" || art.String("media_type") == "" {
		t.Fatalf("registered: %s", art.Body)
	}
	reg(repo, digest, "").Want(t, 409)
	one := admin.Do("GET", base+"/"+id, nil).Want(t, 200)
	if one.String("digest") != digest {
		t.Fatalf("get: %s", one.Body)
	}
	if n := len(admin.Do("GET", base+"?app_slug=demo&state=draft", nil).Want(t, 200).Items()); n != 1 {
		t.Fatalf("list filtered: %d items", n)
	}

	verify := func(wantTrust, wantReason string) {
		t.Helper()
		r := admin.Do("POST", base+"/"+id+"/verify", map[string]string{"reason": "check"})
		if r.Status != 200 {
			for _, l := range strings.Split(s.Logs.String(), "\n") {
				if strings.Contains(l, "verification") {
					t.Log(l)
				}
			}
		}
		r.Want(t, 200)
		if r.String("trust_state") != wantTrust || r.String("trust_reason") != wantReason {
			t.Fatalf("verify: want %s/%s, got %s", wantTrust, wantReason, r.Body)
		}
	}
	rd, err := signature.ParseRepoDigest(host+"/"+repo+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	sopts := signature.Options{Remote: creds.opts(ctx)}
	verify("failed", "signature_missing")
	if _, err := signature.SignImage(ctx, rd, otherPriv, "stranger", sopts); err != nil {
		t.Fatal(err)
	}
	verify("failed", "signature_invalid")

	promote := func(target string, want int) *servertest.Response {
		t.Helper()
		return admin.Do("POST", base+"/"+id+"/promote", map[string]string{"target_state": target, "reason": "to " + target}).Want(t, want)
	}
	promote("", 200) // next: staged
	promote("canary", 200)
	if r := promote("active", 409); r.ErrorCode() != "artifact_not_verified" {
		t.Fatalf("active before verified: %s", r.Body)
	}
	promote("staged", 200) // rollback
	promote("canary", 200)

	if _, err := signature.SignImage(ctx, rd, privPEM, key.String("id"), sopts); err != nil {
		t.Fatal(err)
	}
	verify("verified", "")
	promote("active", 200)
	if r := promote("staged", 409); r.ErrorCode() != "illegal_transition" || !strings.Contains(string(r.Body), "deprecated") {
		t.Fatalf("illegal transition: %s", r.Body)
	}

	// Pull intent: pull-only credentials for this repository.
	pull := admin.Do("POST", base+"/"+id+"/pull-intents", map[string]any{}).Want(t, 201)
	if pull.String("digest") != digest {
		t.Fatalf("pull intent: %s", pull.Body)
	}
	pc := unwrap(t, admin, wrapToken(pull))
	byDigest, _ := name.ParseReference(host + "/" + repo + "@" + digest)
	if _, err := remote.Get(byDigest, pc.opts(ctx)...); err != nil {
		t.Fatalf("pull with pull credentials: %v", err)
	}
	img2, _ := random.Image(512, 1)
	if err := remote.Write(ref, img2, pc.opts(ctx)...); err == nil {
		t.Fatal("pull credentials pushed")
	}

	// Revoke blocks pull intents and promotion; outstanding pull credentials stop working.
	admin.Do("POST", base+"/"+id+"/revoke", map[string]string{}).Want(t, 400)
	admin.Do("POST", base+"/"+id+"/revoke", map[string]string{"reason": "compromised build"}).Want(t, 200)
	if r := admin.Do("POST", base+"/"+id+"/pull-intents", map[string]any{}); r.Status != 409 || r.ErrorCode() != "artifact_revoked" {
		t.Fatalf("pull intent after revoke: %d %s", r.Status, r.Body)
	}
	if r := admin.Do("POST", base+"/"+id+"/deprecate", map[string]string{"reason": "x"}); r.Status != 409 {
		t.Fatalf("transition after revoke: %d", r.Status)
	}
	if _, err := remote.Get(byDigest, pc.opts(ctx)...); err == nil {
		t.Fatal("pull credentials still work after revocation")
	}

	// Every transition left one audit row with actor, before, after, reason and correlation id.
	evs, _, err := s.DB.Queries().ListAudit(ctx, store.AuditFilter{ResourceID: id, Outcome: "success"}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.Action]++
		if e.ActorID == "" || e.CorrelationID == "" || e.After == nil || (e.Action != "artifact.register" && (e.Before == nil || e.Reason == "")) {
			t.Fatalf("incomplete audit row %+v", e)
		}
		var after map[string]any
		_ = json.Unmarshal(e.After, &after)
		if after["digest"] != digest || after["repository"] != repo {
			t.Fatalf("audit row lacks repository/digest: %s", e.After)
		}
	}
	want := map[string]int{"artifact.register": 1, "artifact.verify": 3, "artifact.promote": 5, "artifact.revoke": 1}
	for k, v := range want {
		if counts[k] != v {
			t.Fatalf("audit rows %v, want %v", counts, want)
		}
	}

	// Expiry: credentials of a 60-second intent stop working once the
	// clock passes it, and an unused wrapping token cannot be unwrapped late.
	short := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.1", "artifact_name": "runtime", "ttl_seconds": 60}).Want(t, 201)
	sc := unwrap(t, admin, wrapToken(short))
	late := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.2", "artifact_name": "runtime", "ttl_seconds": 60}).Want(t, 201)
	ref2, _ := name.ParseReference(host + "/" + repo + ":1.0.1")
	if err := remote.Write(ref2, fresh, sc.opts(ctx)...); err != nil {
		t.Fatalf("live intent credentials refused: %v", err)
	}
	skew.Store(int64(2 * time.Minute))
	if err := remote.Write(ref2, fresh, sc.opts(ctx)...); err == nil {
		t.Fatal("expired intent credentials still push")
	}
	admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": wrapToken(late)}).Want(t, 409)
}

// A blob goes up in chunks through the API, is registered with its digest
// checked, and comes back byte for byte.
func TestArtifactBlobRoundTrip(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		base := "/api/v1/projects/" + pid + "/app-artifacts"
		pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "2.0.0",
			"artifact_name": "weights", "artifact_kind": "blob", "source_type": "artifact_store"}).Want(t, 201)
		uri := pi.String("source_uri")
		if uri != "artifact_store://projects/"+pid+"/artifacts/demo/2.0.0/weights" || pi.String("upload_path") == "" {
			t.Fatalf("blob intent: %s", pi.Body)
		}
		up := pi.String("upload_url")
		data := bytes.Repeat([]byte("gpuaas-blob-"), 50000)
		sum := sha256.Sum256(data)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		half := len(data) / 2
		admin.Do("PATCH", up, data[:half], "Upload-Offset", "0").Want(t, 200)
		st := admin.Do("GET", up, nil).Want(t, 200)
		if int(st.JSON["offset"].(float64)) != half || st.Header.Get("Upload-Offset") != strconv.Itoa(half) {
			t.Fatalf("status: %s", st.Body)
		}
		if r := admin.Do("PATCH", up, data[half:], "Upload-Offset", "1"); r.Status != 409 {
			t.Fatalf("wrong offset: %d %s", r.Status, r.Body)
		}
		// Registration before the commit finds nothing.
		regBody := map[string]any{"app_slug": "demo", "app_version": "2.0.0", "artifact_name": "weights", "artifact_kind": "blob",
			"source_type": "artifact_store", "source_uri": uri, "digest": digest}
		if r := admin.Do("POST", base, regBody); r.Status != 422 || r.ErrorCode() != "object_not_found" {
			t.Fatalf("register before upload: %d %s", r.Status, r.Body)
		}
		admin.Do("PUT", up+"?digest="+digest, data[half:], "Content-Range", fmt.Sprintf("bytes %d-%d/%d", half, len(data)-1, len(data))).Want(t, 201)
		wrong := map[string]any{}
		for k, v := range regBody {
			wrong[k] = v
		}
		wrong["digest"] = "sha256:" + strings.Repeat("0", 64)
		if r := admin.Do("POST", base, wrong); r.Status != 422 || r.ErrorCode() != "digest_mismatch" {
			t.Fatalf("wrong digest: %d %s", r.Status, r.Body)
		}
		wrong["digest"], wrong["source_uri"] = digest, "artifact_store://projects/"+pid+"/artifacts/demo/2.0.0/other"
		admin.Do("POST", base, wrong).Want(t, 422)
		art := admin.Do("POST", base, regBody).Want(t, 201)
		id := art.String("id")
		got := admin.Do("GET", base+"/"+id+"/content", nil).Want(t, 200)
		if !bytes.Equal(got.Body, data) || got.Header.Get("Docker-Content-Digest") != digest {
			t.Fatalf("round trip: %d bytes, digest header %q", len(got.Body), got.Header.Get("Docker-Content-Digest"))
		}
		v := admin.Do("POST", base+"/"+id+"/verify", nil).Want(t, 200)
		if v.String("trust_state") != "verified" {
			t.Fatalf("blob verify: %s", v.Body)
		}
		pull := admin.Do("POST", base+"/"+id+"/pull-intents", nil).Want(t, 201)
		if pull.String("download_url") == "" {
			t.Fatalf("blob pull intent: %s", pull.Body)
		}
	})
}

// patternReader yields n deterministic pseudo-random bytes without holding them.
type patternReader struct {
	n, off int64
	block  []byte
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	// Whole runs of the block, not a byte at a time: under -race every
	// byte written in a loop is checked, which made this reader most of
	// the test's two minutes.
	for n := 0; n < len(b); {
		n += copy(b[n:], p.block[(p.off+int64(n))%int64(len(p.block)):])
	}
	p.off += int64(len(b))
	return len(b), nil
}

// A 1 GiB blob streams through the HTTP API while the server's heap stays
// far below the blob's size (the server runs in this process).
//
// Serial (no t.Parallel): it samples the whole process's heap, which
// parallel tests' servers would add to.
func TestArtifactBlobOneGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB upload: skipped with -short")
	}
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	base := "/api/v1/projects/" + pid + "/app-artifacts"
	pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "big", "app_version": "1.0.0",
		"artifact_name": "weights", "artifact_kind": "blob"}).Want(t, 201)
	const size = 1 << 30
	block := make([]byte, 64<<10+7)
	for i := range block {
		block[i] = byte(i*31 + i/251)
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	h := sha256.New()
	body := io.TeeReader(&patternReader{n: size, block: block}, h)
	req, _ := http.NewRequest("PATCH", s.URL+pi.String("upload_url"), body)
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+admin.Token)
	req.Header.Set("Upload-Offset", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	commit, _ := http.NewRequest("PUT", s.URL+pi.String("upload_url")+"?digest="+digest, nil)
	commit.Header.Set("Authorization", "Bearer "+admin.Token)
	resp, err = http.DefaultClient.Do(commit)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("commit: %d", resp.StatusCode)
	}
	close(stop)
	<-done
	art := admin.Do("POST", base, map[string]any{"app_slug": "big", "app_version": "1.0.0", "artifact_name": "weights",
		"artifact_kind": "blob", "source_uri": pi.String("source_uri"), "digest": digest}).Want(t, 201)
	if int64(art.JSON["size_bytes"].(float64)) != size {
		t.Fatalf("registered size: %s", art.Body)
	}
	t.Logf("1 GiB upload: peak Go heap %d MiB", peak.Load()>>20)
	if peak.Load() > 128<<20 {
		t.Fatalf("peak heap %d MiB while streaming 1 GiB: the upload is being buffered", peak.Load()>>20)
	}
}

func mustKeyPair(t *testing.T, alg signature.Algorithm) (crypto.Signer, []byte) {
	t.Helper()
	priv, pub, err := signature.GenerateKeyPair(alg)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signature.ParsePrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, pub
}

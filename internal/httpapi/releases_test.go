package httpapi_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	sigstoresig "github.com/sigstore/sigstore/pkg/signature"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

const releaseAdmin = "/api/v1/admin/platform/releases/"
const releasePub = "/api/v1/platform/releases/"

func uploadRelease(c *servertest.Client, version, name, query string, content []byte, headers ...string) *servertest.Response {
	return c.Do("PUT", releaseAdmin+version+"/artifacts/"+name+"?"+query, content, append([]string{"Content-Type", "application/octet-stream"}, headers...)...)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A platform admin uploads and publishes a release; anyone lists it, reads
// its signed manifest and downloads its artifacts (whole, a range, a
// conditional request); the signature verifies under the published key and
// fails on tampered bytes; a published release is immutable; users and
// service accounts cannot publish; the publish left its audit row and event.
func TestPlatformReleases(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin, anon := s.Admin(), s.Anonymous()
		cli := []byte(strings.Repeat("gpuaas cli binary ", 1000))
		agent := []byte("agent bytes")
		uploadRelease(admin, "1.2.0", "gpuaas-linux-amd64", "os=linux&arch=amd64&kind=cli", cli,
			"Digest", "sha-256="+base64.StdEncoding.EncodeToString(func() []byte { h := sha256.Sum256(cli); return h[:] }())).Want(t, 201)
		uploadRelease(admin, "1.2.0", "gpuaas-agent-linux-arm64", "os=linux&arch=arm64&kind=agent", agent).Want(t, 201)

		// Bad input: 4xx in the envelope, nothing stored.
		if r := uploadRelease(admin, "1.2.0", "x", "os=linux&arch=amd64&kind=nope", agent).Want(t, 400); !strings.Contains(string(r.Body), "kind") {
			t.Fatalf("bad kind: %s", r.Body)
		}
		uploadRelease(admin, "not-a-version", "x", "os=linux&arch=amd64&kind=cli", agent).Want(t, 400)
		if r := uploadRelease(admin, "1.2.0", "y", "os=linux&arch=amd64&kind=cli", agent, "Digest", "sha-256="+base64.StdEncoding.EncodeToString(make([]byte, 32))).Want(t, 400); r.ErrorCode() != "digest_mismatch" {
			t.Fatalf("digest mismatch: %s", r.Body)
		}
		// Drafts are invisible to readers.
		anon.Do("GET", releasePub+"1.2.0", nil).Want(t, 404)

		// Least privilege: a signed-in user and a project service account are refused.
		_, user := s.NewUser(admin, "someone@example.com")
		sa := admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts",
			map[string]any{"name": "ci", "slug": "ci", "roles": []string{"project_admin"}}).Want(t, 201)
		bot := s.AsServiceAccount(client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
			PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")})
		for _, c := range []*servertest.Client{user, bot} {
			c.Do("POST", releaseAdmin+"1.2.0/publish", nil).Want(t, 403)
			uploadRelease(c, "1.2.0", "evil", "os=linux&arch=amd64&kind=cli", []byte("x")).Want(t, 403)
		}
		anon.Do("POST", releaseAdmin+"1.2.0/publish", nil).Want(t, 401)

		pub := admin.Do("POST", releaseAdmin+"1.2.0/publish", nil).Want(t, 200)
		if len(pub.JSON["artifacts"].([]any)) != 2 {
			t.Fatalf("published: %s", pub.Body)
		}
		admin.Do("POST", releaseAdmin+"1.2.0/publish", nil).Want(t, 409)
		if r := uploadRelease(admin, "1.2.0", "gpuaas-linux-amd64", "os=linux&arch=amd64&kind=cli", []byte("swapped")).Want(t, 409); r.ErrorCode() != "release_published" {
			t.Fatalf("upload to published: %s", r.Body)
		}

		list := anon.Do("GET", "/api/v1/platform/releases", nil).Want(t, 200)
		if items := list.Items(); len(items) != 1 || items[0]["version"] != "1.2.0" {
			t.Fatalf("list: %s", list.Body)
		}
		rel := anon.Do("GET", releasePub+"1.2.0", nil).Want(t, 200)
		var dl string
		for _, a := range rel.JSON["artifacts"].([]any) {
			m := a.(map[string]any)
			if m["name"] == "gpuaas-linux-amd64" {
				if m["digest"] != "sha256:"+sha256Hex(cli) || m["size"].(float64) != float64(len(cli)) || m["os"] != "linux" || m["kind"] != "cli" {
					t.Fatalf("artifact: %v", m)
				}
				dl = m["download_url"].(string)
			}
		}
		if !strings.HasSuffix(dl, releasePub+"1.2.0/artifacts/gpuaas-linux-amd64") {
			t.Fatalf("download_url %q", dl)
		}

		// Downloads: whole, a range, a conditional request.
		path := releasePub + "1.2.0/artifacts/gpuaas-linux-amd64"
		whole := anon.Do("GET", path, nil).Want(t, 200)
		sum := sha256.Sum256(cli)
		etag := `"sha256:` + sha256Hex(cli) + `"`
		if string(whole.Body) != string(cli) || whole.Header.Get("Digest") != "sha-256="+base64.StdEncoding.EncodeToString(sum[:]) ||
			whole.Header.Get("ETag") != etag || whole.Header.Get("Content-Length") != "18000" {
			t.Fatalf("download: %d bytes, headers %v", len(whole.Body), whole.Header)
		}
		part := anon.Do("GET", path, nil, "Range", "bytes=7-16").Want(t, 206)
		if string(part.Body) != string(cli[7:17]) {
			t.Fatalf("range: %q", part.Body)
		}
		anon.Do("GET", path, nil, "If-None-Match", etag).Want(t, 304)
		anon.Do("GET", releasePub+"1.2.0/artifacts/nope", nil).Want(t, 404)

		// The signature, checked the way `cosign verify-blob --key` checks
		// it (sigstore's key loading and verifier, which cosign calls):
		// the PEM key, the base64 signature, the exact bytes.
		keyPEM := anon.Do("GET", releasePub+"signing-key", nil).Want(t, 200).Body
		manifest := anon.Do("GET", releasePub+"1.2.0/manifest", nil).Want(t, 200).Body
		sigB64 := anon.Do("GET", releasePub+"1.2.0/manifest.sig", nil).Want(t, 200).Body
		releaseKey, err := cryptoutils.UnmarshalPEMToPublicKey(keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		verifier, err := sigstoresig.LoadVerifier(releaseKey, crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := base64.StdEncoding.DecodeString(string(sigB64))
		if err != nil {
			t.Fatal(err)
		}
		if err := verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(manifest)); err != nil {
			t.Fatalf("manifest signature does not verify: %v", err)
		}
		tampered := []byte(strings.Replace(string(manifest), sha256Hex(cli), sha256Hex([]byte("evil")), 1))
		if err := verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(tampered)); err == nil {
			t.Fatal("a tampered manifest verifies")
		}
		var m struct {
			Version   string `json:"version"`
			Artifacts []struct {
				Name, Digest string
			} `json:"artifacts"`
		}
		if err := json.Unmarshal(manifest, &m); err != nil || m.Version != "1.2.0" || len(m.Artifacts) != 2 {
			t.Fatalf("manifest %s (%v)", manifest, err)
		}

		// One audit row and one event for the publish.
		evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "platform.release.publish", Outcome: "success"}, store.Page{Limit: 10})
		if err != nil || len(evs) != 1 || evs[0].ResourceID != "1.2.0" {
			t.Fatalf("publish audit rows: %v (%v)", evs, err)
		}
		s.SettleEvents()
		ev := admin.Do("GET", "/api/v1/admin/events?type=platform.release.published", nil).Want(t, 200)
		if items := ev.Items(); len(items) != 1 || items[0]["subject"] != "platform-releases/1.2.0" {
			t.Fatalf("events: %s", ev.Body)
		}
	})
}

// gpuaas dev serves its own build: the running executable becomes the
// release of its version (once), downloadable without signing in.
func TestDevServesItsOwnBuild(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		ctx := context.Background()
		own, err := s.App.ServeOwnBuild(ctx)
		if err != nil || !own.Published {
			t.Fatalf("first start: %+v, %v", own, err)
		}
		if !strings.HasPrefix(own.Version, "0.0.0-devel+") || own.Artifact != "gpuaas-"+runtime.GOOS+"-"+runtime.GOARCH {
			t.Fatalf("own release %+v", own)
		}
		again, err := s.App.ServeOwnBuild(ctx)
		if err != nil || again.Published || again.Version != own.Version {
			t.Fatalf("second start: %+v, %v", again, err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Anonymous().Do("GET", releasePub+own.Version+"/artifacts/"+own.Artifact, nil).Want(t, 200)
		if sha256Hex(r.Body) != sha256Hex(want) {
			t.Fatal("the served build is not the running executable")
		}
	})
}

package cli

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
)

// An app team signs what it publishes with the CLI alone: keygen, a project
// admin registers the public key, the publishing service account pushes with
// --sign-key (signature and SLSA provenance land next to the image before
// registration), and verify accepts it. A key the project does not know
// fails verification with signature_invalid; keygen never overwrites; a bad
// key file stops the push before any publish intent is minted.
func TestArtifactSigningCLI(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	dir := t.TempDir()
	t.Setenv(envConfigDir, filepath.Join(dir, "config"))
	t.Setenv(envAPIURL, s.URL)
	t.Setenv(envToken, "")
	t.Setenv("GPUAAS_PROJECT_ID", s.Creds.ProjectID)
	run := func(args ...string) (string, string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		root := NewRoot(&out, &errOut)
		root.SetIn(strings.NewReader(s.Creds.AdminPassword + "\n"))
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), errOut.String(), err
	}
	must := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := run(args...)
		if err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out, errOut
	}
	decode := func(out string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
	}
	intents := func() int {
		t.Helper()
		evs, _, err := s.DB.Queries().ListAudit(context.Background(),
			store.AuditFilter{Action: "artifact.publish_intent.create", Outcome: "success"}, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	loginAdmin := func() {
		t.Helper()
		must("login", "--email", s.Creds.AdminEmail, "--password-stdin")
	}

	// keygen is offline: no login yet.
	ci := filepath.Join(dir, "ci")
	out, _ := must("artifact", "keygen", "--out", ci, "-o", "table")
	if strings.TrimSpace(out) != ci+".pub" {
		t.Fatalf("keygen printed %q, want the public key path %s.pub", out, ci)
	}
	st, err := os.Stat(ci + ".key")
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v %v (want mode 0600)", st, err)
	}
	privPEM, _ := os.ReadFile(ci + ".key")
	pubPEM, _ := os.ReadFile(ci + ".pub")
	priv, err := signature.ParsePrivateKeyPEM(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := signature.ParsePublicKeyPEM(pubPEM); err != nil || !priv.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
		t.Fatalf("the .pub file is not the public half of the .key file: %v", err)
	}
	// Never overwritten: the files stay as they were.
	if _, _, err := run("artifact", "keygen", "--out", ci, "--algorithm", "ed25519"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("keygen over an existing key: %v", err)
	}
	if b, _ := os.ReadFile(ci + ".key"); !bytes.Equal(b, privPEM) {
		t.Fatal("keygen overwrote the private key")
	}
	if _, _, err := run("artifact", "keygen", "--out", filepath.Join(dir, "x"), "--algorithm", "rsa"); err == nil || !strings.Contains(err.Error(), "ed25519") {
		t.Fatalf("keygen --algorithm rsa: %v", err)
	}
	rogue := filepath.Join(dir, "rogue")
	must("artifact", "keygen", "--out", rogue, "--algorithm", "ed25519")

	// A project admin registers the ci key (a private key is refused locally).
	loginAdmin()
	if _, _, err := run("artifact", "signing-key", "add", "--name", "oops", "--public-key-file", ci+".key"); err == nil ||
		!strings.Contains(err.Error(), ci+".key is not a usable public key") {
		t.Fatalf("signing-key add of a private key: %v", err)
	}
	out, _ = must("artifact", "signing-key", "add", "--name", "ci", "--public-key-file", ci+".pub")
	var key client.ArtifactSigningKey
	decode(out, &key)
	if key.ID == "" || key.Name != "ci" || key.Algorithm != "ecdsa-p256" {
		t.Fatalf("signing-key add: %s", out)
	}
	out, _ = must("artifact", "signing-key", "list")
	var keys struct{ Items []client.ArtifactSigningKey }
	decode(out, &keys)
	if len(keys.Items) != 1 || keys.Items[0].ID != key.ID || keys.Items[0].Fingerprint != key.Fingerprint {
		t.Fatalf("signing-key list: %s", out)
	}

	// The publishing service account pushes and signs.
	saKey := filepath.Join(dir, "publisher.json")
	must("sa", "create", "--name", "publisher", "--slug", "publisher", "--key-file", saKey)
	must("sa", "token", "--key-file", saKey, "--activate")
	if _, _, err := run("artifact", "signing-key", "add", "--name", "sa", "--public-key-file", rogue+".pub"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("a service account registered a signing key: %v", err)
	}
	image := func(tag string) string {
		t.Helper()
		img, err := random.Image(256<<10, 2)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, tag+".tar")
		ref, err := name.ParseReference("example.com/hello:" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if err := tarball.WriteToFile(p, ref, img); err != nil {
			t.Fatal(err)
		}
		return p
	}
	push := func(tar, version, key string, extra ...string) (client.AppArtifact, string) {
		t.Helper()
		out, errOut := must(append([]string{"artifact", "push", tar, "--app", "hello", "--version", version, "--sign-key", key}, extra...)...)
		var a client.AppArtifact
		decode(out, &a)
		return a, errOut
	}
	signed, errOut := push(image("signed"), "1.0.0", ci+".key", "--require-provenance")
	if !signed.SignatureRequired || !signed.ProvenanceRequired || signed.TrustState != "unverified" ||
		!strings.Contains(errOut, "signed ") || !strings.Contains(errOut, "attested SLSA provenance") || strings.Contains(errOut, "warning") {
		t.Fatalf("signed push: %+v\n%s", signed, errOut)
	}
	unknown, errOut := push(image("rogue"), "1.0.1", rogue+".key")
	if !unknown.SignatureRequired || !strings.Contains(errOut, "warning: the public half of "+rogue+".key is not a signing key") {
		t.Fatalf("push with an unregistered key: %+v\n%s", unknown, errOut)
	}

	// A bad key file is refused before any intent is minted.
	before := intents()
	garbage := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbage, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tar := image("bad")
	for file, want := range map[string]string{
		garbage:                     garbage + " is not a usable private key",
		ci + ".pub":                 ci + ".pub is not a usable private key",
		filepath.Join(dir, "nokey"): filepath.Join(dir, "nokey"),
	} {
		_, _, err := run("artifact", "push", tar, "--app", "hello", "--version", "1.0.2", "--sign-key", file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("push --sign-key %s: %v (want %q)", file, err, want)
		}
	}
	if _, _, err := run("artifact", "push", tar, "--kind", "blob", "--app", "hello", "--version", "1.0.2", "--sign-key", ci+".key"); err == nil ||
		!strings.Contains(err.Error(), "--sign-key applies to OCI images") {
		t.Fatalf("push --kind blob --sign-key: %v", err)
	}
	if n := intents(); n != before {
		t.Fatalf("pushes with bad keys minted %d publish intent(s)", n-before)
	}

	// verify: the registered key's signature and provenance pass; the
	// unknown key's signature does not.
	loginAdmin()
	var a client.AppArtifact
	out, _ = must("artifact", "verify", signed.ID)
	decode(out, &a)
	if a.TrustState != "verified" || a.VerifiedKeyID != key.ID {
		t.Fatalf("verify of the signed image: %s", out)
	}
	// A verification that ends failed exits 1 with the reason, though HTTP said 200.
	out, _, err = run("artifact", "verify", unknown.ID)
	var f failure
	if !errors.As(err, &f) || !strings.Contains(describeError(nil, err), string(signature.ReasonSignatureInvalid)) {
		t.Fatalf("failed verify must be an error naming the reason: %v", err)
	}
	decode(out, &a)
	if a.TrustState != "failed" || a.TrustReason != string(signature.ReasonSignatureInvalid) {
		t.Fatalf("verify of the image signed by an unregistered key: %s", out)
	}
}

// The default --key-id is the registered key whose public half matches.
func TestRegisteredKeyID(t *testing.T) {
	t.Parallel()
	var keys []client.ArtifactSigningKey
	var privs [][]byte
	for i, alg := range []signature.Algorithm{signature.AlgEd25519, signature.AlgECDSAP256, signature.AlgECDSAP256} {
		priv, pub, err := signature.GenerateKeyPair(alg)
		if err != nil {
			t.Fatal(err)
		}
		privs = append(privs, priv)
		if i < 2 {
			keys = append(keys, client.ArtifactSigningKey{ID: "k" + string(rune('0'+i)), PublicKey: string(pub)})
		}
	}
	keys = append(keys, client.ArtifactSigningKey{ID: "junk", PublicKey: "not pem"})
	for i, want := range []string{"k0", "k1", ""} {
		signer, err := signature.ParsePrivateKeyPEM(privs[i])
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := registeredKeyID(keys, signer.Public()); got != want || ok != (want != "") {
			t.Fatalf("key %d: got %q %v, want %q", i, got, ok, want)
		}
	}
}

// The same image pushed again under a new version with --sign-key keeps the
// valid signature by that key (the signature tag of a verified digest can
// no longer be written) and says so; artifact sign signs an image pushed
// without --sign-key, after which verify passes; artifact get shows it.
func TestArtifactRepushAndSign(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	run := exitRunner(t, s)
	t.Setenv("GPUAAS_PROJECT_ID", s.Creds.ProjectID)
	dir := t.TempDir()
	must := func(stdin string, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := run(stdin, args...)
		if code != 0 {
			t.Fatalf("gpuaas %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		return out, errOut
	}
	trust := func(out string) string {
		t.Helper()
		var a client.AppArtifact
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		return a.TrustState
	}
	image := func(file string) string {
		t.Helper()
		img, err := random.Image(2048, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, file+".tar")
		if err := tarball.WriteToFile(p, name.MustParseReference("example.com/hello:local"), img); err != nil {
			t.Fatal(err)
		}
		return p
	}
	must(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin")
	key := filepath.Join(dir, "ci")
	must("", "artifact", "keygen", "--out", key)
	must("", "artifact", "signing-key", "add", "--name", "ci", "--public-key-file", key+".pub")

	// 1.0.0: pushed, signed, verified (its signature tag is now frozen).
	img := image("one")
	out, _ := must("", "artifact", "push", img, "--app", "re", "--version", "1.0.0", "--sign-key", key+".key", "-o", "json")
	first := jsonField(t, out, "id")
	if out, _ := must("", "artifact", "verify", first, "-o", "json"); trust(out) != "verified" {
		t.Fatalf("verify 1.0.0: %s", out)
	}
	// 1.0.1: the same image again with the same key.
	out, errOut := must("", "artifact", "push", img, "--app", "re", "--version", "1.0.1", "--sign-key", key+".key", "-o", "json")
	second := jsonField(t, out, "id")
	if !strings.Contains(errOut, "already carries a valid signature by "+key+".key; not signing it again") {
		t.Fatalf("re-push did not say it kept the signature: %s", errOut)
	}
	if out, _ := must("", "artifact", "verify", second, "-o", "json"); trust(out) != "verified" {
		t.Fatalf("verify 1.0.1: %s", out)
	}

	// 2.0.0: pushed unsigned; artifact sign signs it, then verify passes.
	out, _ = must("", "artifact", "push", image("two"), "--app", "re", "--version", "2.0.0", "-o", "json")
	third := jsonField(t, out, "id")
	if code, _, errOut := run("", "artifact", "verify", third, "-o", "json"); code != exitError || !strings.Contains(errOut, "gpuaas artifact sign "+third) {
		t.Fatalf("verify unsigned: %d %s", code, errOut)
	}
	if code, _, errOut := run("", "artifact", "sign", third); code != exitUsage || !strings.Contains(errOut, "--sign-key is required") {
		t.Fatalf("sign without a key: %d %s", code, errOut)
	}
	_, errOut = must("", "artifact", "sign", "re/2.0.0/runtime", "--sign-key", key+".key", "-o", "json")
	if !strings.Contains(errOut, "signed ") || !strings.Contains(errOut, "next: gpuaas artifact verify "+third) {
		t.Fatalf("sign: %s", errOut)
	}
	if out, _ := must("", "artifact", "verify", third, "-o", "json"); trust(out) != "verified" {
		t.Fatalf("verify after sign: %s", out)
	}
	// Signing again with the same key keeps the (now frozen) signature.
	if _, errOut := must("", "artifact", "sign", third, "--sign-key", key+".key", "-o", "json"); !strings.Contains(errOut, "not signing it again") {
		t.Fatalf("sign again: %s", errOut)
	}
	if out, _ := must("", "artifact", "get", third, "-o", "json"); jsonField(t, out, "id") != third {
		t.Fatalf("get: %s", out)
	}
}

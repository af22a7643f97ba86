package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The CLI path of the quickstart: a person signs in, creates a service
// account with its key written to a 0600 file, and automation mints a token
// from that file alone.
func TestServiceAccountCommands(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	dir := t.TempDir()
	run := cliAgainst(t, s)
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	cache, _ := credentialsPath()

	if _, _, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); err != nil {
		t.Fatal(err)
	}
	if m := mode(cache); m != 0o600 {
		t.Fatalf("credentials cache mode %v", m)
	}

	// Without somewhere to put the private key, nothing is created.
	if _, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "ci", "--slug", "ci"); err == nil || !strings.Contains(err.Error(), "--key-file") {
		t.Fatalf("create without --key-file: %v", err)
	}
	keyFile := filepath.Join(dir, "ci.json")
	out, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "ci", "--slug", "ci", "--role", "project_member", "--key-file", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "PRIVATE") || mode(keyFile) != 0o600 {
		t.Fatalf("create printed the key or wrote it world-readable (%v): %s", mode(keyFile), out)
	}
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID == "" {
		t.Fatalf("create output: %v %s", err, out)
	}
	// A second create to the same file is refused before any API call.
	if _, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "ci2", "--slug", "ci2", "--key-file", keyFile); err == nil {
		t.Fatal("overwrote a key file")
	}

	// The key file alone mints a token, stored in its own profile ("ci",
	// after the key file's name) beside the person's, which stays active.
	if _, _, err := run("", "sa", "token", "--key-file", keyFile); err != nil {
		t.Fatal(err)
	}
	c, err := loadCredentials()
	if err != nil || c.Principal != "user:"+s.Creds.AdminEmail {
		t.Fatalf("active profile after sa token: %+v %v", c, err)
	}
	out, _, err = run("", "auth", "status", "-o", "json")
	if err != nil || !strings.Contains(out, `"principal": "service_account:`+created.ID+`"`) || !strings.Contains(out, `"principal": "user:`+s.Creds.AdminEmail+`"`) || !strings.Contains(out, `"active": "default"`) {
		t.Fatalf("auth status shows both profiles: %v %s", err, out)
	}
	// An admin command still runs as the person.
	if _, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "yy", "--slug", "yy", "--print-private-key"); err != nil {
		t.Fatalf("admin command after sa token: %v", err)
	}
	out, _, err = run("", "sa", "list", "--project", s.Creds.ProjectID, "--as", "ci")
	if err != nil || !strings.Contains(out, `"slug": "ci"`) {
		t.Fatalf("list as the service account: %v %s", err, out)
	}
	// ... which cannot create service accounts (project_member lacks the permission);
	// GPUAAS_PROFILE picks the profile as --as does.
	t.Setenv(envProfile, "ci")
	if out, _, err := run("", "whoami", "-o", "json"); err != nil || !strings.Contains(out, `"type": "service_account"`) || !strings.Contains(out, `"profile": "ci"`) {
		t.Fatalf("whoami as ci: %v %s", err, out)
	}
	if _, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "x", "--slug", "x", "--print-private-key"); err == nil || !strings.Contains(err.Error(), "service_accounts.write") {
		t.Fatalf("service account created an account: %v", err)
	}
	t.Setenv(envProfile, "")
	if _, _, err := run("", "sa", "list", "--as", "nope", "--project", s.Creds.ProjectID); err == nil || !strings.Contains(err.Error(), `no profile "nope"`) {
		t.Fatalf("unknown profile: %v", err)
	}
	tok, _, err := run("", "sa", "token", "--key-file", keyFile, "--print")
	if err != nil || strings.Count(strings.TrimSpace(tok), ".") != 2 {
		t.Fatalf("sa token --print: %v %q", err, tok)
	}

	// Back as the admin: rotate (grace 0) into a new file, then the old file is refused.
	if _, _, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); err != nil {
		t.Fatal(err)
	}
	newKey := filepath.Join(dir, "ci-2.json")
	if _, _, err := run("", "sa", "rotate-key", created.ID, "--project", s.Creds.ProjectID, "--key-file", newKey); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("", "sa", "token", "--key-file", keyFile, "--print"); err == nil || !strings.Contains(err.Error(), "rotated out") {
		t.Fatalf("old key after rotation: %v", err)
	}
	if _, _, err := run("", "sa", "token", "--key-file", newKey, "--print"); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"disable", "enable", "delete"} {
		if _, _, err := run("", "sa", verb, created.ID, "--project", s.Creds.ProjectID); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
	}
}

// An expired cached token does not stand in the way of signing in again.
func TestLoginOverExpiredCachedToken(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	t.Setenv(envConfigDir, t.TempDir())
	t.Setenv(envAPIURL, s.URL)
	t.Setenv(envToken, "")
	if _, err := saveConfig(clientConfig{Active: defaultProfile, Profiles: map[string]cachedCredentials{defaultProfile: {APIURL: s.URL, AccessToken: "expired", ExpiresAt: time.Now().Add(-time.Hour), Principal: "user:x"}}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetIn(strings.NewReader(s.Creds.AdminPassword + "\n"))
	root.SetArgs([]string{"login", "--email", s.Creds.AdminEmail, "--password-stdin"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("login over an expired cached token: %v", err)
	}
	if c, err := loadCredentials(); err != nil || c.AccessToken == "expired" || !time.Now().Before(c.ExpiresAt) {
		t.Fatalf("cache after login: %+v %v", c, err)
	}
	// logout forgets the acting profile; then commands say how to sign in.
	root = NewRoot(&out, &errOut)
	root.SetArgs([]string{"logout"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, err := loadCredentials(); err != nil || c.AccessToken != "" {
		t.Fatalf("after logout: %+v %v", c, err)
	}
}

// A profile made from a key file outlives its token: an expired token is
// minted again from the key file, the CLI says so, and the command runs.
// A person's expired login is not re-minted (there is no key to mint from).
func TestKeyFileProfileRemintsExpiredToken(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	run := cliAgainst(t, s)
	if _, _, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "reader.json")
	if _, _, err := run("", "sa", "create", "--project", s.Creds.ProjectID, "--name", "reader", "--slug", "reader", "--key-file", keyFile); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("", "sa", "token", "--key-file", keyFile); err != nil {
		t.Fatal(err)
	}
	expire := func(profile string) string {
		cfg, err := loadConfig()
		if err != nil {
			t.Fatal(err)
		}
		p := cfg.Profiles[profile]
		p.ExpiresAt = time.Now().Add(-time.Minute)
		cfg.Profiles[profile] = p
		if _, err := saveConfig(cfg); err != nil {
			t.Fatal(err)
		}
		return p.AccessToken
	}
	old := expire("reader")
	out, stderr, err := run("", "whoami", "--as", "reader", "-o", "json")
	if err != nil || !strings.Contains(out, "service_account") {
		t.Fatalf("whoami after expiry: %v %s %s", err, out, stderr)
	}
	if !strings.Contains(stderr, `The token of profile "reader" expired; minted a new one from `+keyFile) {
		t.Fatalf("the CLI did not say it minted a new token: %q", stderr)
	}
	cfg, _ := loadConfig()
	if p := cfg.Profiles["reader"]; p.AccessToken == old || time.Until(p.ExpiresAt) < time.Minute || p.KeyFile != keyFile {
		t.Fatalf("profile after the new token: expires %v, key file %q", p.ExpiresAt, p.KeyFile)
	}
	// The next command uses the stored token quietly.
	if _, stderr, err := run("", "whoami", "--as", "reader", "-o", "json"); err != nil || strings.Contains(stderr, "minted") {
		t.Fatalf("second whoami: %v %q", err, stderr)
	}
	expire("default")
	if _, _, err := run("", "whoami"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a person's expired login: %v", err)
	}
}

// With your own public key no private key comes back, so --key-file and
// --print-private-key cannot be honoured: the command line is refused
// before anything is created, not run with the flags ignored.
func TestSAOwnPublicKeyRefusesKeyOutputFlags(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the API was called: %s %s", r.Method, r.URL.Path)
	}))
	defer api.Close()
	dir := t.TempDir()
	t.Setenv(envConfigDir, filepath.Join(dir, "config"))
	t.Setenv(envAPIURL, api.URL)
	t.Setenv(envToken, "token")
	t.Setenv(envProfile, "")
	pub := filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(pub, []byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	project := "11111111-1111-1111-1111-111111111111"
	for _, args := range [][]string{
		{"sa", "create", "--project", project, "--name", "n", "--slug", "n", "--public-key-file", pub, "--key-file", filepath.Join(dir, "k.json")},
		{"sa", "create", "--project", project, "--name", "n", "--slug", "n", "--public-key-file", pub, "--print-private-key"},
		{"sa", "rotate-key", "11111111-1111-1111-1111-111111111112", "--project", project, "--public-key-file", pub, "--key-file", filepath.Join(dir, "k.json")},
	} {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "drop --key-file") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

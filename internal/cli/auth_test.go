package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// A credentials file from before profiles (one token at the top level)
// reads as the active profile "default".
func TestLegacyCredentialsBecomeDefaultProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envConfigDir, dir)
	legacy := `{"api_url":"http://127.0.0.1:8080","access_token":"tok","expires_at":"2099-01-01T00:00:00Z","principal":"user:a@b.c"}`
	if err := os.WriteFile(filepath.Join(dir, "credentials.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig()
	if err != nil || c.Active != defaultProfile || c.Profiles[defaultProfile].AccessToken != "tok" {
		t.Fatalf("legacy file: %+v %v", c, err)
	}
	if _, err := saveConfig(c); err != nil {
		t.Fatal(err)
	}
	if p, err := loadCredentials(); err != nil || p.Principal != "user:a@b.c" {
		t.Fatalf("after rewrite: %+v %v", p, err)
	}
}

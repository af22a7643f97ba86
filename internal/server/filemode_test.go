package server_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// Everything the server writes under its data dir — the SQLite database and
// its WAL, keys, registry and blob storage — is owner-only.
func TestDataDirIsOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	s := servertest.Start(t, "sqlite", func(c *config.Config) {
		c.DataDir = dir
		c.DatabaseURL = "sqlite://" + filepath.Join(dir, "gpuaas.db")
	})
	s.Admin().Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "modes", "name": "Modes"}).Want(t, 201)
	var files int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if info.Mode().Perm()&^want != 0 {
			t.Errorf("%s has mode %v, want at most %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("nothing under the data dir")
	}
}

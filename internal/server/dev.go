package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/gpuaas/gpuaas/internal/buildinfo"
	"github.com/gpuaas/gpuaas/internal/fsutil"
	"github.com/gpuaas/gpuaas/internal/releases"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/store"
)

// DevCredentials is what `gpuaas dev` writes for clients and tests.
type DevCredentials struct {
	APIURL        string `json:"api_url"`
	OrgID         string `json:"org_id"`
	ProjectID     string `json:"project_id"`
	AdminEmail    string `json:"admin_email"`
	AdminPassword string `json:"admin_password"`
}

// DevAdminEmail is the seeded admin of dev mode.
const DevAdminEmail = "admin@gpuaas.dev"

// DevConfig fills a config for single-machine dev mode: the data dir is
// created, and SQLite and a master key file (minted on first run) live in it.
func DevConfig(cfg config.Config) (config.Config, error) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return cfg, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cfg, fmt.Errorf("create data dir: %w", err)
	}
	cfg.DataDir = dir
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = "sqlite://" + filepath.Join(dir, "gpuaas.db")
	}
	// Instance UIs on their own origins with no DNS to set up: browsers
	// resolve every *.localhost name to this machine.
	if cfg.AppsDomain == "" {
		cfg.AppsDomain = "apps.localhost"
	}
	// App origins on the gateway's own engine, on a free port beside the
	// console's: gpuaas dev runs what production is advised to.
	if cfg.AppsListen == "" {
		if host, _, err := net.SplitHostPort(cfg.Listen); err == nil {
			cfg.AppsListen = net.JoinHostPort(host, "0")
		}
	}
	if cfg.SecretKey == "" && cfg.SecretKeyFile == "" {
		key, err := sealer.LoadOrCreateKeyFile(filepath.Join(dir, "secret.key"))
		if err != nil {
			return cfg, fmt.Errorf("dev master key: %w", err)
		}
		cfg.SecretKey = base64.StdEncoding.EncodeToString(key)
	}
	return cfg, nil
}

// CredentialsPath is where dev mode writes its credentials file.
func CredentialsPath(dataDir string) string { return filepath.Join(dataDir, "dev-credentials.json") }

// SeedDev creates (once) a dev org, project and platform admin, and writes
// the credentials file (mode 0600). A restart keeps everything; if the file
// was lost, the admin's password is reset so the new file works.
func (a *App) SeedDev(ctx context.Context) (DevCredentials, error) {
	ctx = principal.With(ctx, principal.SystemActor)
	path := CredentialsPath(a.Config.DataDir)
	var creds DevCredentials
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &creds) == nil && creds.AdminPassword != "" {
		if _, err := a.DB.Queries().GetUserByEmail(ctx, creds.AdminEmail); err == nil {
			creds.APIURL = a.Config.PublicURL
			return creds, writeCreds(path, creds)
		}
	}
	q := a.DB.Queries()
	org, err := q.GetOrgBySlug(ctx, "dev")
	if errors.Is(err, store.ErrNotFound) {
		org = iam.Org{ID: iam.NewID(), Slug: "dev", Name: "Dev Org", CreatedAt: a.now()}
		err = a.DB.Mutate(ctx, func(tx *store.Tx) error {
			if err := tx.CreateOrg(ctx, org); err != nil {
				return err
			}
			return tx.Audit(store.AuditEvent{Action: "org.create", ResourceType: "org", ResourceID: org.ID, OrgID: org.ID, Reason: "dev seed"}, nil, org)
		})
	}
	if err != nil {
		return creds, fmt.Errorf("seed org: %w", err)
	}
	proj, err := q.GetProjectBySlug(ctx, org.ID, "dev")
	if errors.Is(err, store.ErrNotFound) {
		proj = iam.Project{ID: iam.NewID(), OrgID: org.ID, Slug: "dev", Name: "Dev Project", CreatedAt: a.now()}
		err = a.DB.Mutate(ctx, func(tx *store.Tx) error {
			if err := tx.CreateProject(ctx, proj); err != nil {
				return err
			}
			return tx.Audit(store.AuditEvent{Action: "project.create", ResourceType: "project", ResourceID: proj.ID, OrgID: org.ID, ProjectID: proj.ID, Reason: "dev seed"}, nil, proj)
		})
	}
	if err != nil {
		return creds, fmt.Errorf("seed project: %w", err)
	}
	password := iam.GeneratePassword()
	if err := a.IAM.SeedPlatformAdmin(ctx, DevAdminEmail, password); err != nil {
		return creds, fmt.Errorf("seed admin: %w", err)
	}
	creds = DevCredentials{APIURL: a.Config.PublicURL, OrgID: org.ID, ProjectID: proj.ID, AdminEmail: DevAdminEmail, AdminPassword: password}
	return creds, writeCreds(path, creds)
}

func writeCreds(path string, c DevCredentials) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFile(path, append(b, '\n'), 0o600)
}

// OwnRelease is what ServeOwnBuild did.
type OwnRelease struct {
	Version   string // the release version of the running build
	Artifact  string // gpuaas-<GOOS>-<GOARCH>
	Published bool   // false: a release of this version already existed
}

// OwnReleaseVersion is the release version of the running build: its
// stamped version, or for a devel build 0.0.0-devel+<commit>.<exe digest>
// (build metadata: every distinct devel binary is its own release, and
// semver precedence ignores it, so a devel build never looks newer).
func OwnReleaseVersion(stamped, commit, exeDigestHex string) string {
	if releases.ValidVersion(stamped) {
		return stamped
	}
	v := "0.0.0-devel+"
	if len(commit) >= 12 && commit != "unknown" {
		v += commit[:12] + "."
	}
	return v + exeDigestHex[:12]
}

// ServeOwnBuild makes `gpuaas dev` serve its own binary: unless a release
// of the running build's version exists, it publishes one holding the
// running executable as gpuaas-<GOOS>-<GOARCH> (kind cli), so a fresh
// machine can `curl -fO <api>/api/v1/platform/releases/<v>/artifacts/gpuaas-linux-amd64`.
func (a *App) ServeOwnBuild(ctx context.Context) (OwnRelease, error) {
	exe, err := os.Executable()
	if err != nil {
		return OwnRelease{}, fmt.Errorf("own build: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return OwnRelease{}, fmt.Errorf("own build: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return OwnRelease{}, fmt.Errorf("own build: %w", err)
	}
	bi := buildinfo.Read()
	out := OwnRelease{Version: OwnReleaseVersion(bi.Version, bi.Commit, hex.EncodeToString(h.Sum(nil))),
		Artifact: "gpuaas-" + runtime.GOOS + "-" + runtime.GOARCH}
	out.Published, err = a.Releases.EnsureLocal(ctx, out.Version, []releases.LocalFile{{
		Path: exe, Name: out.Artifact, OS: runtime.GOOS, Arch: runtime.GOARCH, Kind: releases.KindCLI}})
	return out, err
}

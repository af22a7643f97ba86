package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/releases"
)

var (
	_ releases.Tx      = (*Tx)(nil)
	_ releases.Queries = (*Queries)(nil)
)

// Releases is the platform releases domain's storage.
func Releases(db *DB) releases.Store { return NewPort[releases.Tx, releases.Queries](db) }

const releaseCols = `version, state, manifest, signature, signing_kid, created_by, created_at, published_by, published_at`

func scanRelease(s interface{ Scan(...any) error }) (releases.Release, error) {
	var r releases.Release
	var manifest string
	err := s.Scan(&r.Version, &r.State, &manifest, &r.Signature, &r.SigningKID, &r.CreatedBy, scanTime(&r.CreatedAt),
		&r.PublishedBy, scanTime(&r.PublishedAt))
	if manifest != "" {
		r.Manifest = []byte(manifest)
	}
	return r, err
}

func (q *Queries) GetRelease(ctx context.Context, version string) (releases.Release, error) {
	r, err := scanRelease(q.queryRow(ctx, `SELECT `+releaseCols+` FROM platform_releases WHERE version = ?`, version))
	return r, scanOne(err)
}

func (q *Queries) LockRelease(ctx context.Context, version string) (releases.Release, error) {
	r, err := scanRelease(q.queryRow(ctx, `SELECT `+releaseCols+` FROM platform_releases WHERE version = ?`+q.forUpdate(), version))
	return r, scanOne(err)
}

func (q *Queries) ListPublishedReleases(ctx context.Context, limit int) ([]releases.Release, error) {
	rows, err := q.query(ctx, `SELECT `+releaseCols+` FROM platform_releases WHERE state = ?
 ORDER BY published_at DESC, version DESC LIMIT `+fmt.Sprint(limit), string(releases.StatePublished))
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRelease)
}

func (q *Queries) InsertRelease(ctx context.Context, r releases.Release) error {
	_, err := q.exec(ctx, `INSERT INTO platform_releases (`+releaseCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Version, string(r.State), string(r.Manifest), r.Signature, r.SigningKID, r.CreatedBy, ts(r.CreatedAt), r.PublishedBy, nullTS(r.PublishedAt))
	return err
}

func (q *Queries) PublishRelease(ctx context.Context, r releases.Release) error {
	err := q.execOne(ctx, `UPDATE platform_releases SET state = ?, manifest = ?, signature = ?, signing_kid = ?, published_by = ?, published_at = ?
 WHERE version = ? AND state = ?`, string(releases.StatePublished), string(r.Manifest), r.Signature, r.SigningKID, r.PublishedBy, ts(r.PublishedAt),
		r.Version, string(releases.StateDraft))
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("release %s is not a draft: %w", r.Version, ErrConflict)
	}
	return err
}

const releaseArtifactCols = `version, name, os, arch, kind, media_type, digest, size_bytes, location, uploaded_by, uploaded_at`

func scanReleaseArtifact(s interface{ Scan(...any) error }) (releases.Artifact, error) {
	var a releases.Artifact
	err := s.Scan(&a.Version, &a.Name, &a.OS, &a.Arch, &a.Kind, &a.MediaType, &a.Digest, &a.Size, &a.Location, &a.UploadedBy, scanTime(&a.UploadedAt))
	return a, err
}

func (q *Queries) PutReleaseArtifact(ctx context.Context, a releases.Artifact) error {
	_, err := q.exec(ctx, `INSERT INTO platform_release_artifacts (`+releaseArtifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
 ON CONFLICT (version, name) DO UPDATE SET os = excluded.os, arch = excluded.arch, kind = excluded.kind, media_type = excluded.media_type,
 digest = excluded.digest, size_bytes = excluded.size_bytes, location = excluded.location, uploaded_by = excluded.uploaded_by, uploaded_at = excluded.uploaded_at`,
		a.Version, a.Name, a.OS, a.Arch, string(a.Kind), a.MediaType, a.Digest, a.Size, a.Location, a.UploadedBy, ts(a.UploadedAt))
	return err
}

func (q *Queries) ListReleaseArtifacts(ctx context.Context, version string) ([]releases.Artifact, error) {
	rows, err := q.query(ctx, `SELECT `+releaseArtifactCols+` FROM platform_release_artifacts WHERE version = ? ORDER BY name`, version)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanReleaseArtifact)
}

package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// StorageQuota is a platform admin's override of one project's storage
// quotas. A nil override leaves the platform's flag in force for that
// quota; a value caps the project at that many bytes, 0 meaning nothing
// more may be stored (a platform flag of 0 means no quota instead, so an
// override is how one project is given "none").
type StorageQuota struct {
	ProjectID     string
	BlobBytes     *int64
	RegistryBytes *int64
	UpdatedBy     string
	UpdatedAt     time.Time
}

// BlobUsage is what counts against a project's blob quota, in its parts.
type BlobUsage struct {
	Registered   int64 // registered blob artifacts (revoked and retired ones too)
	Unregistered int64 // committed uploads no artifact references yet
	Uploading    int64 // reservations of uploads in progress
}

// StorageQuotaQueries are the reads and writes of the per-project quota
// overrides.
type StorageQuotaQueries interface {
	// GetStorageQuota returns the project's override; ErrNotFound if none.
	GetStorageQuota(ctx context.Context, projectID string) (StorageQuota, error)
	// PutStorageQuota creates or replaces the project's override.
	PutStorageQuota(ctx context.Context, q StorageQuota) error
	// DeleteStorageQuota forgets the project's override; none is fine.
	DeleteStorageQuota(ctx context.Context, projectID string) error
	// ProjectBlobUsageParts is ProjectBlobUsage (with no upload left out)
	// in its parts.
	ProjectBlobUsageParts(ctx context.Context, projectID string) (BlobUsage, error)
}

// Where an effective quota comes from.
const (
	QuotaSourceProject  = "project"
	QuotaSourcePlatform = "platform"
)

// effectiveQuota is the cap in force: the override when there is one,
// else the platform's flag, where 0 means none (limited false).
func effectiveQuota(override *int64, platform int64) (limit int64, limited bool, source string) {
	if override != nil {
		return *override, true, QuotaSourceProject
	}
	return platform, platform > 0, QuotaSourcePlatform
}

// storageQuota reads the project's override (the zero value if none) with
// q, so a check reads it in the transaction that holds the usage lock.
func storageQuota(ctx context.Context, q Queries, projectID string) (StorageQuota, error) {
	o, err := q.GetStorageQuota(ctx, projectID)
	if errors.Is(err, storage.ErrNotFound) {
		return StorageQuota{ProjectID: projectID}, nil
	}
	return o, err
}

// blobQuota is the project's blob quota in force.
func (s *Service) blobQuota(ctx context.Context, q Queries, projectID string) (int64, bool, error) {
	o, err := storageQuota(ctx, q, projectID)
	limit, limited, _ := effectiveQuota(o.BlobBytes, s.BlobQuota)
	return limit, limited, err
}

// registryQuota is the project's registry quota in force.
func (s *Service) registryQuota(ctx context.Context, q Queries, projectID string) (int64, bool, error) {
	o, err := storageQuota(ctx, q, projectID)
	limit, limited, _ := effectiveQuota(o.RegistryBytes, s.RegistryQuota)
	return limit, limited, err
}

// StorageQuotaInput is the body of PUT
// /api/v1/projects/{project_id}/storage/quota: the project's overrides,
// replacing both; a null (or absent) one means the platform's flag.
type StorageQuotaInput struct {
	BlobQuotaBytes     *int64 `json:"blob_quota_bytes"`
	RegistryQuotaBytes *int64 `json:"registry_quota_bytes"`
}

// StorageView is a project's storage quotas and what it uses of them.
type StorageView struct {
	// ETag is the version of the project's quota overrides this view was
	// read with (the ETag header, not in the body): a PUT with it in
	// If-Match is refused if they changed since.
	ETag      string              `json:"-"`
	ProjectID string              `json:"project_id"`
	Blobs     BlobStorageView     `json:"blobs"`
	Registry  RegistryStorageView `json:"registry"`
}

// QuotaView is one quota in force. QuotaBytes is nil when the project has
// none. OverQuota is true when a quota was lowered below what the project
// already holds: nothing is deleted, new writes are refused.
type QuotaView struct {
	QuotaBytes  *int64 `json:"quota_bytes"`
	QuotaSource string `json:"quota_source"`
	UsedBytes   int64  `json:"used_bytes"`
	OverQuota   bool   `json:"over_quota"`
}

// BlobStorageView is the blob quota; used_bytes is the sum of the parts.
type BlobStorageView struct {
	QuotaView
	RegisteredBytes   int64 `json:"registered_bytes"`
	UnregisteredBytes int64 `json:"unregistered_bytes"`
	UploadingBytes    int64 `json:"uploading_bytes"`
}

// RegistryStorageView is the registry quota; used_bytes is committed plus
// held.
type RegistryStorageView struct {
	QuotaView
	CommittedBytes int64 `json:"committed_bytes"`
	HeldBytes      int64 `json:"held_bytes"`
}

// Storage returns the project's storage quotas and usage to anyone who
// may read its artifacts.
func (s *Service) Storage(ctx context.Context, g *iam.Grants, projectID string) (StorageView, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermArtifactRead)
	if err != nil {
		return StorageView{}, err
	}
	q := s.Store.Read()
	o, err := storageQuota(ctx, q, p.ID)
	if err != nil {
		return StorageView{}, err
	}
	return s.viewStorage(ctx, q, o)
}

func (s *Service) viewStorage(ctx context.Context, q Queries, o StorageQuota) (StorageView, error) {
	blobs, err := q.ProjectBlobUsageParts(ctx, o.ProjectID)
	if err != nil {
		return StorageView{}, err
	}
	committed, held, err := q.RegistryUsage(ctx, o.ProjectID)
	if err != nil {
		return StorageView{}, err
	}
	return StorageView{ProjectID: o.ProjectID, ETag: StorageQuotaETag(o),
		Blobs: BlobStorageView{QuotaView: quotaView(o.BlobBytes, s.BlobQuota, blobs.Registered+blobs.Unregistered+blobs.Uploading),
			RegisteredBytes: blobs.Registered, UnregisteredBytes: blobs.Unregistered, UploadingBytes: blobs.Uploading},
		Registry: RegistryStorageView{QuotaView: quotaView(o.RegistryBytes, s.RegistryQuota, committed+held),
			CommittedBytes: committed, HeldBytes: held},
	}, nil
}

func quotaView(override *int64, platform, used int64) QuotaView {
	limit, limited, source := effectiveQuota(override, platform)
	v := QuotaView{QuotaSource: source, UsedBytes: used}
	if limited {
		v.QuotaBytes, v.OverQuota = &limit, used > limit
	}
	return v
}

// StorageQuotaETag is the entity tag of a project's quota overrides. It is
// taken from the two values rather than from a counter or updated_at: it
// changes whenever either does, a project without a row has one too, and
// clearing then setting the same values again yields the same tag, which
// is right, since a change based on those values then loses nothing.
func StorageQuotaETag(o StorageQuota) string {
	text := func(v *int64) string {
		if v == nil {
			return "none"
		}
		return strconv.FormatInt(*v, 10)
	}
	sum := sha256.Sum256([]byte("blob=" + text(o.BlobBytes) + ";registry=" + text(o.RegistryBytes)))
	return `"sq-` + hex.EncodeToString(sum[:12]) + `"`
}

// SetStorageQuota replaces the project's quota overrides (platform admins
// only), audited. A quota below what the project holds is allowed: its
// next writes are refused, and nothing it holds is deleted.
//
// ifMatch is the request's If-Match entity tags (nil: no precondition,
// the last writer wins): unless one of them is the overrides' ETag now
// (or "*"), nothing changes and the answer is a PreconditionFailed error,
// so an admin who read the quotas, then changed one, does not silently
// overwrite what another admin set in between.
func (s *Service) SetStorageQuota(ctx context.Context, g *iam.Grants, projectID string, in StorageQuotaInput, ifMatch []string) (StorageView, error) {
	// Only a platform admin holds platform.admin: a project's own admins
	// must not raise their own quota.
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermPlatformAdminOnly)
	if err != nil {
		return StorageView{}, err
	}
	var fe []errdefs.FieldError
	for _, f := range []struct {
		field string
		v     *int64
	}{{"/blob_quota_bytes", in.BlobQuotaBytes}, {"/registry_quota_bytes", in.RegistryQuotaBytes}} {
		if f.v != nil && *f.v < 0 {
			fe = append(fe, errdefs.FieldError{Field: f.field, Code: "out_of_range",
				Message: "must be 0 or more bytes (0: nothing may be stored), or null for the platform's quota"})
		}
	}
	if fe != nil {
		return StorageView{}, errdefs.Validation(fe)
	}
	o := StorageQuota{ProjectID: p.ID, BlobBytes: in.BlobQuotaBytes, RegistryBytes: in.RegistryQuotaBytes,
		UpdatedBy: actor(ctx), UpdatedAt: s.Now().UTC()}
	var out StorageView
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// The project's blob usage lock (the one blob uploads read the
		// override under; registry pushes read it under the registry
		// quota's lock) makes two changes take turns, so the second
		// compares its If-Match with what the first wrote, even where
		// the project has no override row yet to lock.
		if err := tx.LockProjectBlobUsage(ctx, p.ID); err != nil {
			return err
		}
		cur, err := tx.GetStorageQuota(ctx, p.ID)
		var before any
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cur = StorageQuota{ProjectID: p.ID}
		case err != nil:
			return err
		default:
			before = storageQuotaState(cur)
		}
		if err := checkIfMatch(ifMatch, StorageQuotaETag(cur), p.ID); err != nil {
			return err
		}
		if o.BlobBytes == nil && o.RegistryBytes == nil {
			err = tx.DeleteStorageQuota(ctx, p.ID)
		} else {
			err = tx.PutStorageQuota(ctx, o)
		}
		if err != nil {
			return err
		}
		if out, err = s.viewStorage(ctx, tx, o); err != nil {
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventStorageQuotaUpdated, Subject: "projects/" + p.ID + "/storage", OrgID: p.OrgID, ProjectID: p.ID},
			storageQuotaState(o)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "artifact.storage_quota.put", ResourceType: "project_storage_quota", ResourceID: p.ID,
			OrgID: p.OrgID, ProjectID: p.ID}, before, storageQuotaState(o))
	})
	return out, err
}

func storageQuotaState(o StorageQuota) map[string]any {
	return map[string]any{"project_id": o.ProjectID, "blob_quota_bytes": o.BlobBytes, "registry_quota_bytes": o.RegistryBytes}
}

// checkIfMatch refuses a change whose If-Match names none of the current
// tag (strong comparison; "*" matches any, since the quotas always exist).
func checkIfMatch(ifMatch []string, etag, projectID string) error {
	if ifMatch == nil {
		return nil
	}
	for _, t := range ifMatch {
		if t == "*" || t == etag {
			return nil
		}
	}
	return errdefs.PreconditionFailed("storage_quota_changed",
		"the project's storage quota changed since it was read (If-Match %s, now %s), so nothing was changed: "+
			"read it again (gpuaas project storage, or GET /api/v1/projects/%s/storage), check the quotas in force "+
			"and repeat the change with the ETag of that answer", strings.Join(ifMatch, ", "), etag, projectID).
		WithDetails(map[string]any{"etag": etag})
}

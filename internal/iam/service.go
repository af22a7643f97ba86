package iam

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Service is the IAM domain: tenancy, people, memberships and sign-in.
type Service struct {
	Store  Store
	Tokens *Tokens
	Logger *slog.Logger
	Now    func() time.Time
	// OnAccessChanged, when set, is called after a change that may end
	// someone's access (a role binding removed, an account disabled or
	// deleted, a service-account key revoked): open event streams
	// re-check their reader at once.
	OnAccessChanged func()
	// LoginKey keys the hash failed sign-ins are counted under
	// (loginthrottle.go); every replica must have the same one. Sign-in
	// refuses to work without it.
	LoginKey []byte
}

// NewID returns a time-ordered id (UUIDv7): list order is creation order.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

var slugRE = regexp.MustCompile(`^[a-z][a-z0-9-]{1,62}$`)

// ValidSlug reports whether s is a well-formed slug.
func ValidSlug(s string) bool { return slugRE.MatchString(s) && !strings.HasSuffix(s, "-") }

// AccessChanged reports a committed change that may end someone's access
// (see OnAccessChanged).
func (s *Service) AccessChanged() {
	if s.OnAccessChanged != nil {
		s.OnAccessChanged()
	}
}

func (s *Service) now() time.Time { return clock.Or(s.Now)() }

// ErrProjectNotFound is what a principal gets for a project it cannot see,
// whether or not it exists.
func errProjectNotFound(id string) error {
	return errdefs.NotFound("project_not_found", "project %q does not exist or you have no access to it", id)
}

func errOrgNotFound(id string) error {
	return errdefs.NotFound("org_not_found", "org %q does not exist or you have no access to it", id)
}

// Deny returns a permission error and, for anything but a read, records the
// refused attempt in the audit log.
func (s *Service) Deny(ctx context.Context, perm string, sc Scope, resourceType, resourceID string) error {
	if !strings.HasSuffix(perm, ".read") {
		err := s.Store.RecordOutcome(ctx, storage.AuditEvent{
			Action: perm, ResourceType: resourceType, ResourceID: resourceID, OrgID: sc.OrgID, ProjectID: sc.ProjectID,
		}, "denied")
		if err != nil {
			s.Logger.ErrorContext(ctx, "could not audit a denied attempt", "err", err)
		}
	}
	return errdefs.PermissionDenied("permission_denied", "you lack the %q permission here; ask an admin of this scope for a role that grants it", perm)
}

// Project resolves a project the principal may see and checks perm on it.
// A project it cannot see is reported as not found.
func (s *Service) Project(ctx context.Context, g *Grants, projectID, perm string) (Project, error) {
	if _, err := uuid.Parse(projectID); err != nil {
		return Project{}, errProjectNotFound(projectID)
	}
	p, err := s.Store.Read().GetProject(ctx, projectID)
	if errors.Is(err, storage.ErrNotFound) {
		return Project{}, errProjectNotFound(projectID)
	}
	if err != nil {
		return Project{}, err
	}
	sc := Scope{OrgID: p.OrgID, ProjectID: p.ID}
	if !g.Sees(sc) {
		return Project{}, errProjectNotFound(projectID)
	}
	if perm != "" && !g.Can(perm, sc) {
		return Project{}, s.Deny(ctx, perm, sc, "project", p.ID)
	}
	return p, nil
}

// Org resolves an org the principal may see and checks perm on it.
func (s *Service) Org(ctx context.Context, g *Grants, orgID, perm string) (Org, error) {
	if _, err := uuid.Parse(orgID); err != nil {
		return Org{}, errOrgNotFound(orgID)
	}
	o, err := s.Store.Read().GetOrg(ctx, orgID)
	if errors.Is(err, storage.ErrNotFound) {
		return Org{}, errOrgNotFound(orgID)
	}
	if err != nil {
		return Org{}, err
	}
	sc := Scope{OrgID: o.ID}
	if !g.Sees(sc) {
		return Org{}, errOrgNotFound(orgID)
	}
	if perm != "" && !g.Can(perm, sc) {
		return Org{}, s.Deny(ctx, perm, sc, "org", o.ID)
	}
	return o, nil
}

// RequirePlatform checks a platform-level permission.
func (s *Service) RequirePlatform(ctx context.Context, g *Grants, perm, resourceType string) error {
	if g.Can(perm, Scope{}) {
		return nil
	}
	return s.Deny(ctx, perm, Scope{}, resourceType, "")
}

// logThrottleError logs the cause of a sign-in refused because the database
// could not count the attempt: the client's envelope names none.
func (s *Service) logThrottleError(ctx context.Context, err error) {
	if e, ok := errdefs.As(err); ok && e.Code == "login_throttle_unavailable" {
		s.Logger.ErrorContext(ctx, "sign-in refused: the attempt could not be counted", "err", e.Cause)
	}
}

// Login checks a password and issues an access token. Unknown email, wrong
// password and disabled account all get the same answer and take the same
// time, so the endpoint does not reveal which accounts exist.
func (s *Service) Login(ctx context.Context, email, password string) (Issued, error) {
	email, bad := NormalizeEmail(email)
	if bad != nil {
		return Issued{}, errdefs.Validation([]errdefs.FieldError{*bad})
	}
	account, err := s.loginAccount(email)
	if err != nil {
		return Issued{}, err
	}
	// The attempt is counted as a failure before its password is checked
	// (loginthrottle.go): what is not counted is not checked. From here on
	// it stays counted unless the right password clears it, also when an
	// error or a panic ends it before its verdict.
	if err := beginLogin(ctx, s.Store.Read(), account, s.now()); err != nil {
		s.logThrottleError(ctx, err)
		return Issued{}, err
	}
	checked := s.now() // the account as read now is what the token stands on
	u, err := s.Store.Read().GetUserByEmail(ctx, email)
	hash := dummyHash
	if err == nil {
		hash = u.PasswordHash
	} else if !errors.Is(err, storage.ErrNotFound) {
		return Issued{}, err
	}
	ok, verr := VerifyPassword(hash, password)
	if err != nil || verr != nil || !ok || u.Status != UserActive {
		resID := ""
		if err == nil {
			resID = u.ID
		}
		if aerr := s.Store.RecordOutcome(ctx, storage.AuditEvent{Action: "auth.login", ResourceType: "user", ResourceID: resID}, "failure"); aerr != nil {
			s.Logger.ErrorContext(ctx, "could not audit a failed login", "err", aerr)
		}
		if perr := pruneLogins(ctx, s.Store.Read(), s.now()); perr != nil {
			// The next failure prunes again; nothing waits on this one.
			s.Logger.WarnContext(ctx, "could not prune lapsed failed sign-ins", "err", perr)
		}
		return Issued{}, errdefs.Unauthenticated("invalid_credentials", "email or password is wrong, or the account is disabled")
	}
	if err := clearLogins(ctx, s.Store.Read(), account); err != nil {
		// Answered all the same: the check was counted before it ran, so
		// the count left behind only refuses sooner, and withholding a
		// token the right password earned would lock its owner out while
		// the database takes no writes.
		s.Logger.ErrorContext(ctx, "could not clear the failed sign-ins of a successful sign-in", "err", err)
	}
	return s.Tokens.IssueChecked(principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email}, "", checked)
}

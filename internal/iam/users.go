package iam

import (
	"context"
	"errors"
	"net/mail"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// CreateUserInput is the body of a user creation.
type CreateUserInput struct {
	Email       string `json:"email"`
	DisplayName string `json:"display_name"`
	Password    string `json:"password"`
}

// MinPasswordLen is the shortest password accepted.
const MinPasswordLen = 12

// CreateUser creates a person who can sign in (platform admins only).
func (s *Service) CreateUser(ctx context.Context, g *Grants, in CreateUserInput) (User, error) {
	if err := s.RequirePlatform(ctx, g, PermUsersWrite, "user"); err != nil {
		return User{}, err
	}
	return s.createUser(ctx, in)
}

func (s *Service) createUser(ctx context.Context, in CreateUserInput) (User, error) {
	email, bad := NormalizeEmail(in.Email)
	var fe []errdefs.FieldError
	if bad != nil {
		fe = append(fe, *bad)
	} else if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		fe = append(fe, errdefs.FieldError{Field: "/email", Code: "invalid_email", Message: "must be a plain email address such as ada@example.com"})
	}
	if len(in.Password) < MinPasswordLen || len(in.Password) > 256 {
		fe = append(fe, errdefs.FieldError{Field: "/password", Code: "weak_password", Message: "must be 12-256 characters"})
	}
	if fe != nil {
		return User{}, errdefs.Validation(fe)
	}
	hash, err := HashPassword(in.Password)
	if err != nil {
		return User{}, err
	}
	now := s.now()
	u := User{ID: NewID(), Email: email, DisplayName: in.DisplayName, PasswordHash: hash, Status: UserActive, CreatedAt: now}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.CreateUser(ctx, u); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "user.create", ResourceType: "user", ResourceID: u.ID}, nil, PublicUser(u))
	})
	if errors.Is(err, storage.ErrAlreadyExists) {
		return User{}, errdefs.AlreadyExists("user_exists", "a user with email %q already exists", email)
	}
	return u, err
}

// UserView is what the API shows of a user: never the password hash.
type UserView struct {
	ID          string     `json:"id"`
	Email       string     `json:"email"`
	DisplayName string     `json:"display_name"`
	Status      UserStatus `json:"status"`
	CreatedAt   string     `json:"created_at"`
}

// PublicUser strips secrets from a user.
func PublicUser(u User) UserView {
	return UserView{ID: u.ID, Email: u.Email, DisplayName: u.DisplayName, Status: u.Status, CreatedAt: u.CreatedAt.UTC().Format("2006-01-02T15:04:05Z07:00")}
}

// SetUserStatus enables or disables a user; disabling ends their tokens now.
func (s *Service) SetUserStatus(ctx context.Context, g *Grants, userID string, status UserStatus) (User, error) {
	if err := s.RequirePlatform(ctx, g, PermUsersWrite, "user"); err != nil {
		return User{}, err
	}
	var after User
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		before, err := tx.GetUser(ctx, userID)
		if err != nil {
			return err
		}
		if before.ID == principal.From(ctx).ID && status == UserDisabled {
			return errdefs.FailedPrecondition("cannot_disable_self", "you cannot disable your own account")
		}
		// Disabling ends every live token; enabling revives none of them,
		// and cuts again: a sign-in that checked the account just before
		// the disable committed mints its token just after (past the first
		// cut; the password check alone takes a tenth of a second). Enabling
		// an account that is not disabled changes nothing.
		var cut time.Time
		if status == UserDisabled || before.Status != status {
			cut = s.now()
		}
		if err := tx.SetUserStatus(ctx, userID, status, cut); err != nil {
			return err
		}
		after = before
		after.Status = status
		return tx.Audit(storage.AuditEvent{Action: "user." + map[UserStatus]string{UserActive: "enable", UserDisabled: "disable"}[status],
			ResourceType: "user", ResourceID: userID}, PublicUser(before), PublicUser(after))
	})
	if errors.Is(err, storage.ErrNotFound) {
		return User{}, errdefs.NotFound("user_not_found", "user %q does not exist", userID)
	}
	if err == nil && status == UserDisabled {
		s.AccessChanged()
	}
	return after, err
}

// SeedUser creates a user without a permission check (dev seeding only).
func (s *Service) SeedUser(ctx context.Context, in CreateUserInput) (User, error) {
	return s.createUser(principal.With(ctx, principal.SystemActor), in)
}

// SeedPlatformAdmin makes sure a platform admin with this email exists and
// has this password (dev seeding only; audited as the system actor).
func (s *Service) SeedPlatformAdmin(ctx context.Context, email, password string) error {
	ctx = principal.With(ctx, principal.SystemActor)
	u, err := s.Store.Read().GetUserByEmail(ctx, email)
	if errors.Is(err, storage.ErrNotFound) {
		u, err = s.createUser(ctx, CreateUserInput{Email: email, DisplayName: "Dev Admin", Password: password})
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else {
		hash, err := HashPassword(password)
		if err != nil {
			return err
		}
		if err := s.Store.Mutate(ctx, func(tx Tx) error {
			if err := tx.SetUserPassword(ctx, u.ID, hash, s.now()); err != nil {
				return err
			}
			return tx.Audit(storage.AuditEvent{Action: "user.password_reset", ResourceType: "user", ResourceID: u.ID, Reason: "dev seed: credentials file was missing"}, nil, nil)
		}); err != nil {
			return err
		}
	}
	bs, err := s.Store.Read().BindingsOfPrincipal(ctx, string(principal.User), u.ID)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.Role == RolePlatformAdmin {
			return nil
		}
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		b, err := Bind(ctx, tx, s.now(), principal.User, u.ID, RolePlatformAdmin, ScopePlatform, "", "")
		if err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "role_binding.create", ResourceType: "role_binding", ResourceID: b.ID, Reason: "dev seed"}, nil, b)
	})
}

package artifacts

import (
	"context"
	"errors"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// ownerStore holds one active user bound as app_operator on project p1.
type ownerStore struct{}

func (ownerStore) BindingsOfPrincipal(_ context.Context, typ, id string) ([]iam.RoleBinding, error) {
	return []iam.RoleBinding{{PrincipalType: typ, PrincipalID: id, Role: iam.RoleAppOperator,
		ScopeType: iam.ScopeProject, ScopeID: "p1", OrgID: "o1"}}, nil
}

func (ownerStore) GetUser(_ context.Context, id string) (iam.User, error) {
	return iam.User{ID: id, Status: iam.UserActive}, nil
}

func (ownerStore) ArtifactOwnerAccount(_ context.Context, id string) (OwnerAccount, error) {
	return OwnerAccount{ID: id, OrgID: "o1", ProjectID: "p1", Status: serviceaccounts.AccountActive}, nil
}

func (ownerStore) ArtifactOwnerNodeState(context.Context, string) (nodes.NodeState, error) {
	return "", storage.ErrNotFound
}

// fakeChecker records the claims it was asked about and answers err.
type fakeChecker struct {
	got   []iam.AccessClaims
	err   error
	calls int
}

func (f *fakeChecker) Check(_ context.Context, c iam.AccessClaims) (principal.Principal, error) {
	f.got = append(f.got, c)
	if f.err != nil {
		return principal.Principal{}, f.err
	}
	p := principal.Principal{Type: principal.Type(c.Type), ID: c.Subject}
	if p.Type == principal.ServiceAccount {
		p.OrgID, p.ProjectID = "o1", "p1"
	}
	return p, nil
}

// An intent that recorded the token it was created with is judged by the
// REST API's token check on that token's claims; one that did not (created
// before they were recorded) by its creator alone, as before.
func TestOwnerMayRunsTheTokenCheckOnRecordedTokens(t *testing.T) {
	ctx := context.Background()
	legacy := ArtifactIntent{ID: "i1", OrgID: "o1", ProjectID: "p1", CreatedBy: "user:u1"}
	recorded := legacy
	recorded.CreatedBy, recorded.CreatorTokenIssuedUS, recorded.CreatorKeyID = "service_account:sa1", 1_700_000_000_123_456, "k1"

	ok, err := ownerMay(ctx, ownerStore{}, nil, legacy, iam.PermArtifactWrite)
	if err != nil || !ok {
		t.Fatalf("intent without a recorded token: %v, %v; want true", ok, err)
	}
	if _, err := ownerMay(ctx, ownerStore{}, nil, recorded, iam.PermArtifactWrite); err == nil {
		t.Fatal("a recorded token with no check to run passed")
	}

	f := &fakeChecker{}
	if ok, err := ownerMay(ctx, ownerStore{}, f, recorded, iam.PermArtifactWrite); err != nil || !ok {
		t.Fatalf("recorded token that passes: %v, %v; want true", ok, err)
	}
	want := iam.AccessClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: "sa1"}, Type: "service_account",
		IssuedAtMS: 1_700_000_000_123, IssuedAtUS: 1_700_000_000_123_456, KeyID: "k1"}
	if len(f.got) != 1 || f.got[0].Subject != want.Subject || f.got[0].Type != want.Type || f.got[0].IssuedAtMS != want.IssuedAtMS ||
		f.got[0].IssuedAtUS != want.IssuedAtUS || f.got[0].KeyID != want.KeyID {
		t.Fatalf("checked claims %+v, want %+v", f.got, want)
	}
	if _, err := ownerMay(ctx, ownerStore{}, &fakeChecker{}, legacy, iam.PermArtifactWrite); err != nil {
		t.Fatal(err)
	}

	f = &fakeChecker{err: iam.BadToken(iam.ErrTokenRevoked)}
	if ok, err := ownerMay(ctx, ownerStore{}, f, recorded, iam.PermArtifactWrite); err != nil || ok {
		t.Fatalf("recorded token the check refuses: %v, %v; want false, nil", ok, err)
	}
	boom := errors.New("database down")
	if _, err := ownerMay(ctx, ownerStore{}, &fakeChecker{err: boom}, recorded, iam.PermArtifactWrite); !errors.Is(err, boom) {
		t.Fatalf("check failure: %v, want it passed on", err)
	}
	// The role is still needed after the token check.
	if ok, _ := ownerMay(ctx, ownerStore{}, &fakeChecker{}, recorded, iam.PermArtifactPromote); ok {
		t.Fatal("a passing token check granted a permission the owner lacks")
	}
}

// creatorToken records the request token's issue time and key only when it
// is the acting user's or service account's own token.
func TestCreatorTokenRecordsTheRequestToken(t *testing.T) {
	sa := principal.Principal{Type: principal.ServiceAccount, ID: "sa1"}
	c := iam.AccessClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: "sa1"}, Type: "service_account",
		IssuedAtMS: 1_700_000_000_123, IssuedAtUS: 1_700_000_000_123_456, KeyID: "k1"}
	ctx := iam.WithClaims(principal.With(context.Background(), sa), c)
	if us, k := creatorToken(ctx); us != c.IssuedAtUS || k != "k1" {
		t.Fatalf("recorded %d %q", us, k)
	}
	old := c
	old.IssuedAtUS = 0 // minted before iat_us
	if us, _ := creatorToken(iam.WithClaims(principal.With(context.Background(), sa), old)); us != 1_700_000_000_123_000 {
		t.Fatalf("millisecond-only token recorded as %d", us)
	}
	other := c
	other.Subject = "sa2"
	node := c
	node.Type = string(principal.Node)
	for name, ctx := range map[string]context.Context{
		"no claims":        principal.With(context.Background(), sa),
		"another's claims": iam.WithClaims(principal.With(context.Background(), sa), other),
		"a node":           iam.WithClaims(principal.With(context.Background(), principal.Principal{Type: principal.Node, ID: "sa1"}), node),
	} {
		if us, k := creatorToken(ctx); us != 0 || k != "" {
			t.Fatalf("%s: recorded %d %q", name, us, k)
		}
	}
}

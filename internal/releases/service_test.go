package releases_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// platformAdmin is a GrantReader that makes everyone a platform admin.
type platformAdmin struct{}

func (platformAdmin) BindingsOfPrincipal(context.Context, string, string) ([]iam.RoleBinding, error) {
	return []iam.RoleBinding{{Role: "platform_admin", ScopeType: iam.ScopePlatform}}, nil
}

// A published release serves what its signed manifest names, whatever its
// artifact rows say. On PostgreSQL an upload that read the release as a
// draft commits its row after the publish that froze it (two transactions
// at read committed: a review reproduced it by holding the upload between
// its read and its write), replacing the artifact's digest with bytes no
// signature covers; the late row is written here directly.
func TestPublishedReleaseServesWhatItsManifestSigned(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		p := principal.Principal{Type: principal.User, ID: "admin"}
		ctx := principal.With(context.Background(), p)
		seal, err := sealer.New(make([]byte, sealer.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		key, err := releases.LoadSigningKey(ctx, db.Queries(), seal, nil)
		if err != nil {
			t.Fatal(err)
		}
		blobs, err := blobstore.New(t.TempDir(), blobstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := store.Releases(db)
		svc := releases.New(releases.Deps{Store: st, IAM: &iam.Service{Store: store.IAM(db)}, Blobs: blobs, Key: key})
		g, err := iam.LoadGrants(ctx, platformAdmin{}, p)
		if err != nil {
			t.Fatal(err)
		}
		in := releases.UploadInput{Version: "1.0.0", Name: "gpuaas-linux-amd64", OS: "linux", Arch: "amd64", Kind: releases.KindCLI, Body: strings.NewReader("signed")}
		signed, err := svc.Upload(ctx, g, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.Publish(ctx, g, "1.0.0"); err != nil {
			t.Fatal(err)
		}
		late, _, err := blobs.PutContent(ctx, strings.NewReader("unsigned"), 1<<20, "")
		if err != nil {
			t.Fatal(err)
		}
		stray := signed
		stray.Digest, stray.Size, stray.Location = late, int64(len("unsigned")), "blobstore:"+late
		if err := st.Read().PutReleaseArtifact(ctx, stray); err != nil {
			t.Fatal(err)
		}

		rel, arts, err := svc.Get(ctx, "1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if len(arts) != 1 || arts[0].Digest != signed.Digest || !strings.Contains(string(rel.Manifest), signed.Digest) {
			t.Fatalf("listed %+v, want the signed %s (manifest %s)", arts, signed.Digest, rel.Manifest)
		}
		a, rc, err := svc.Open(ctx, "1.0.0", in.Name)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "signed" || a.Digest != signed.Digest {
			t.Fatalf("served %q as %s, want the signed bytes as %s", b, a.Digest, signed.Digest)
		}
	})
}

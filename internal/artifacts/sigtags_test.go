package artifacts

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/registry"
)

type recordingLocker struct{ held []string }

func (l *recordingLocker) Hold(_ context.Context, keys ...registry.Key) (func(), error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.String()
	}
	l.held = append(l.held, strings.Join(names, " "))
	return func() {}, nil
}

// The registry's content gate and verification hold one lock: the
// service's, with the lock replicas share (Deps.SignatureTags) under it.
func TestSignatureTagsHeldThroughTheService(t *testing.T) {
	ctx := context.Background()
	shared := &recordingLocker{}
	s := New(Deps{SignatureTags: shared})
	gate, ok := s.RegistryAuthorizer().(registry.KeyHolder)
	if !ok {
		t.Fatal("the registry authorizer does not say how to hold signature tags")
	}
	release, err := gate.HoldKeys(ctx, registry.DigestKey("p/app/runtime", "sha256:d"))
	if err != nil {
		t.Fatal(err)
	}
	release()
	release, err = s.holdKeys(ctx, registry.DigestKey("p/app/runtime", "sha256:d")) // Verify's
	if err != nil {
		t.Fatal(err)
	}
	release()
	if want := []string{"p/app/runtime@sha256:d", "p/app/runtime@sha256:d"}; !slices.Equal(shared.held, want) {
		t.Fatalf("shared lock held %v, want %v", shared.held, want)
	}
}

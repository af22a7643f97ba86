package compose

import (
	"context"
	"slices"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// Images lists what Up pulls or uses: the images the task lists and those
// only a service names, each once; Up pulls the services' images in
// service name order, a listed one with the task's credentials.
func TestImagesNamesEveryServiceImage(t *testing.T) {
	const (
		listed = "registry.test/web@sha256:1111111111111111111111111111111111111111111111111111111111111111"
		side   = "registry.test/side@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	web := nodeapi.ImagePull{Repository: "registry.test/web", Digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", WrappingToken: "tok"}
	u := nodeapi.ComposeUp{Project: "p", Images: []nodeapi.ImagePull{web},
		YAML: []byte("services:\n  web:\n    image: " + listed + "\n  sidecar:\n    image: " + side + "\n  more:\n    image: " + side + "\n")}
	refs, err := Images(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{side, listed}; !slices.Equal(refs, want) {
		t.Fatalf("images %v, want %v (an image only a service names is pulled by Up, and must be held)", refs, want)
	}
	p, err := Load(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	want := []nodeapi.ImagePull{{Repository: "registry.test/side", Digest: "sha256:2222222222222222222222222222222222222222222222222222222222222222"}, web}
	if got := pulls(p, u.Images); !slices.Equal(got, want) {
		t.Fatalf("pulls %+v, want %+v", got, want)
	}
}

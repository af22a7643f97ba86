package docker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
)

// An unwrapper that says why it failed is believed: the agent's unwrap,
// having waited out the control plane's rate limit, fails the pull as
// image_pull_failed, and the driver must not turn that into
// credential_refused. Any other unwrap error still is refused credentials.
func TestPullKeepsTheUnwrappersReason(t *testing.T) {
	agenttest.RequireDocker(t)
	for _, c := range []struct {
		err  error
		want string
	}{
		{driver.Fail(nodeapi.ReasonImagePullFailed, "rate limited for 2m0s"), nodeapi.ReasonImagePullFailed},
		{errors.New("wrapping_token_invalid"), nodeapi.ReasonCredentialRefused},
	} {
		d, err := docker.New(docker.Config{NodeID: "unwrap-node", DataDir: t.TempDir(), Unwrap: func(context.Context, string) (docker.Credentials, error) {
			return docker.Credentials{}, c.err
		}})
		if err != nil {
			t.Fatal(err)
		}
		// A digest no engine holds, so the driver asks for credentials.
		_, err = d.Pull(context.Background(), nodeapi.ImagePull{Repository: "registry.invalid/app",
			Digest: "sha256:3333333333333333333333333333333333333333333333333333333333333333", WrappingToken: "gpw_1"})
		d.Close()
		if f := docker.AsFailure(err); f.Reason != c.want {
			t.Fatalf("unwrap failed with %v: the pull failed %v, want %s", c.err, err, c.want)
		}
	}
}

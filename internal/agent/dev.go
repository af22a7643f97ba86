package agent

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/server"
)

// DevStarter is the in-process agent of `gpuaas dev`: one agent joining the
// dev server with the token dev mode minted, its state under dataDir.
func DevStarter(version string) server.DevAgentStarter {
	return func(ctx context.Context, apiURL, joinToken, dataDir string) (func(), error) {
		a, err := New(Config{Server: apiURL, JoinToken: joinToken, DataDir: dataDir, Name: "dev-node", Version: version,
			AdvertiseAddress: "127.0.0.1"}) // the dev node is this machine
		if err != nil {
			return nil, err
		}
		if err := a.Start(ctx); err != nil {
			return nil, err
		}
		return a.Stop, nil
	}
}

package servertest

import "github.com/gpuaas/gpuaas/internal/config"

// workloadsOnBridge marks a server started WithWorkloadsOnBridge.
const workloadsOnBridge = "http://servertest-workloads-on-bridge.invalid"

// WithWorkloadsOnBridge lets the app instances real agents run on this
// machine's Docker engine call the API back, as under `gpuaas dev`: the
// server also listens on the Docker bridge's gateway address and hands
// instances that URL (server.App.ListenForWorkloads). Without it their
// API base URL is the test server's loopback address, which a container
// cannot reach.
func WithWorkloadsOnBridge() Option {
	return func(c *config.Config) { c.WorkloadAPIURL = workloadsOnBridge }
}

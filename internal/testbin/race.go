//go:build race

package testbin

// raceEnabled: this test binary runs under the race detector, so the
// gpuaas it starts is built with -race too. The two builds then share
// every compiled package (a cold CI compiles the tree once, not twice), and
// the child processes the acceptance tests drive report races as well.
const raceEnabled = true

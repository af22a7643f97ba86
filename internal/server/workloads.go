package server

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	docker "github.com/moby/moby/client"
)

// workloadAPIURL is the API base URL app instances are given
// (GPUAAS_API_BASE_URL, and api_base_url in their identity file).
func (a *App) workloadAPIURL() string {
	if a.Config.WorkloadAPIURL != "" {
		return a.Config.WorkloadAPIURL
	}
	return a.Config.PublicURL
}

// ListenForWorkloads gives the app instances of a one-host install a way
// back to the API. A container on Docker's default bridge cannot reach the
// host's loopback, where `gpuaas dev` listens, so the API also listens on
// the bridge's gateway address (reachable from the host and its containers
// only, not from other machines), and instances are handed that URL. It
// does nothing when --workload-api-url is set or the API does not listen
// on loopback. Call after Listen; Serve serves both listeners.
func (a *App) ListenForWorkloads(ctx context.Context, socket string) error {
	if a.Config.WorkloadAPIURL != "" || a.listener == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(a.Addr())
	if err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil
	}
	gw, err := bridgeGateway(ctx, socket)
	if err != nil {
		return fmt.Errorf("find the Docker bridge for app instances to reach the API: %w", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
	if err != nil {
		return fmt.Errorf("listen on the Docker bridge %s for app instances: %w", gw, err)
	}
	a.workloadListener = l
	a.Config.WorkloadAPIURL = "http://" + l.Addr().String()
	a.Logger.Info("app instances reach the API on the Docker bridge", "url", a.Config.WorkloadAPIURL)
	return nil
}

// bridgeGateway is the IPv4 gateway of Docker's default bridge network.
func bridgeGateway(ctx context.Context, socket string) (netip.Addr, error) {
	c, err := docker.New(docker.WithHost("unix://"+strings.TrimPrefix(socket, "unix://")), docker.WithAPIVersionNegotiation())
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	res, err := c.NetworkInspect(ctx, "bridge", docker.NetworkInspectOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	for _, cfg := range res.Network.IPAM.Config {
		if cfg.Gateway.Is4() {
			return cfg.Gateway, nil
		}
		// The default bridge often names only its subnet: the gateway is
		// then this host's own address in it (docker0's).
		if cfg.Subnet.Addr().Is4() {
			if ip, ok := hostAddrIn(cfg.Subnet); ok {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("the bridge network names no IPv4 gateway, and no address of this host is in its subnet")
}

// hostAddrIn is an address of this host's interfaces inside prefix.
func hostAddrIn(prefix netip.Prefix) (netip.Addr, bool) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && prefix.Contains(ip.Unmap()) {
				return ip.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}

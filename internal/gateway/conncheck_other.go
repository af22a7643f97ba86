//go:build !unix

package gateway

import "net"

// connCheck cannot look at a socket without blocking here; a stale
// connection is caught by the retry in RoundTrip instead.
func connCheck(net.Conn) error { return nil }

// waitPeerGone cannot watch a socket here.
func waitPeerGone(net.Conn) bool { return false }

func canWatch(net.Conn) bool { return false }

func pending(net.Conn) bool { return false }

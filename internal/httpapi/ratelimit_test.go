package httpapi

import (
	"fmt"
	"net/http"
	"testing"
)

func fromAddr(addr string) *http.Request {
	r, _ := http.NewRequest("POST", "/api/v1/auth/login", nil)
	r.RemoteAddr = addr
	return r
}

// One IPv6 host holds a whole /64: a fresh address per attempt must not
// buy a fresh bucket.
func TestCredentialLimiterCountsAnIPv6PrefixAsOneClient(t *testing.T) {
	l := newClientLimiter(0.001, 2)
	for i, addr := range []string{"[2001:db8:1:2::1]:5000", "[2001:db8:1:2::abcd]:5001"} {
		if !l.allow(fromAddr(addr)) {
			t.Fatalf("attempt %d refused within the burst", i)
		}
	}
	if l.allow(fromAddr("[2001:db8:1:2:ffff::9]:5002")) {
		t.Fatal("another address of the same /64 got a fresh bucket")
	}
	if !l.allow(fromAddr("[2001:db8:1:3::1]:5000")) {
		t.Fatal("another /64 shares the bucket")
	}
	// IPv4 (also written as IPv4-mapped IPv6) is one client per address.
	if !l.allow(fromAddr("192.0.2.7:1")) || !l.allow(fromAddr("[::ffff:192.0.2.7]:2")) || l.allow(fromAddr("192.0.2.7:3")) {
		t.Fatal("an IPv4 client's bucket is not its address")
	}
	if !l.allow(fromAddr("192.0.2.8:1")) {
		t.Fatal("the neighbouring IPv4 address shares the bucket")
	}
}

// A flood from many addresses, all of them recent, must not grow the
// table without bound.
func TestCredentialLimiterTableStaysBounded(t *testing.T) {
	l := newClientLimiter(1, 1)
	for i := range maxTrackedClients + 500 {
		l.allow(fromAddr(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255)))
	}
	if n := l.clients.Len(); n > maxTrackedClients {
		t.Fatalf("%d clients tracked, want at most %d", n, maxTrackedClients)
	}
}

package instances

import "testing"

func TestUIHost(t *testing.T) {
	for _, c := range []struct {
		bind, node, want string
	}{
		{"", "", "127.0.0.1"},
		{"127.0.0.1", "127.0.0.1", "127.0.0.1"},
		{"0.0.0.0", "localhost", "127.0.0.1"},
		{"10.0.0.5", "gpu-7.example.com", "10.0.0.5"},
		{"0.0.0.0", "10.0.0.7", "10.0.0.7"},
		{"127.0.0.1", "10.0.0.7", "10.0.0.7"},
	} {
		if got := uiHost(&Access{BindAddress: c.bind, NodeAddress: c.node}); got != c.want {
			t.Errorf("bind %q node %q: %q, want %q", c.bind, c.node, got, c.want)
		}
	}
}

package agenttest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Capability bits of CapEff (linux/capability.h).
const (
	CapChown          = 0
	CapNetBindService = 10
	CapNetRaw         = 13
)

// ProcStatus is /proc/self/status as the test server's own process reads
// it inside its container, fetched through the server's /file endpoint on
// hostPort of the node's loopback: what the kernel holds for the workload
// (NoNewPrivs, CapEff, …), not what the engine was asked for. A workload
// that is still starting is waited for, up to 30 seconds.
func ProcStatus(t testing.TB, hostPort int) map[string]string {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/file?path=/proc/self/status", hostPort)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), "CapEff:") {
				out := map[string]string{}
				sc := bufio.NewScanner(strings.NewReader(string(body)))
				for sc.Scan() {
					if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
						out[k] = strings.TrimSpace(v)
					}
				}
				return out
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("read the workload's /proc/self/status on port %d: %v", hostPort, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CheckHardened fails the test unless the workload that answers on
// hostPort runs with no_new_privs set and without CAP_NET_RAW, and keeps
// the default capabilities apps rely on (CAP_CHOWN, CAP_NET_BIND_SERVICE).
// what names the workload in failures.
func CheckHardened(t testing.TB, what string, hostPort int) {
	t.Helper()
	st := ProcStatus(t, hostPort)
	if st["NoNewPrivs"] != "1" {
		t.Errorf("%s: NoNewPrivs is %q, want 1: a setuid binary in the image would gain privileges", what, st["NoNewPrivs"])
	}
	t.Logf("%s: NoNewPrivs %s, CapEff %s", what, st["NoNewPrivs"], st["CapEff"])
	capEff, err := strconv.ParseUint(st["CapEff"], 16, 64)
	if err != nil {
		t.Fatalf("%s: CapEff %q: %v", what, st["CapEff"], err)
	}
	if capEff&(1<<CapNetRaw) != 0 {
		t.Errorf("%s: CapEff %016x has CAP_NET_RAW (bit %d): the workload may open raw sockets on the shared bridge", what, capEff, CapNetRaw)
	}
	for _, bit := range []uint{CapChown, CapNetBindService} {
		if capEff&(1<<bit) == 0 {
			t.Errorf("%s: CapEff %016x lacks default capability bit %d", what, capEff, bit)
		}
	}
}

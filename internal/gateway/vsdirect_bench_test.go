package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/testbin"
)

// BenchmarkGatewayVsDirect: the example app (examples/my-app) as a process
// of its own, as it is in its container, reached straight and through the
// gateway, side by side in one run, with 16 GETs in flight. Unlike
// internal/doctest's BenchmarkUIGateway it needs no Docker, so it also runs
// where the gateway has cores of its own rather than sharing two with the
// client, Docker's port proxy and the app. GPUAAS_BENCH_APP names a
// prebuilt my-app binary; without it the benchmark builds one. Where nginx
// is installed, the same GETs through nginx (a keep-alive proxy_pass) run
// beside them, as a reference for the cost of a proxy hop as such.
//
//	go test ./internal/gateway -run '^$' -bench BenchmarkGatewayVsDirect -benchtime 20000x
//
// In production the gateway runs in the control plane, not on the GPU node
// beside the app, and the browsers are elsewhere again. With
// GPUAAS_BENCH_GATEWAY_CPUS set (a taskset list), the gateway (on each of
// its listeners) and nginx run as processes of their own on those CPUs,
// while the client and the app stay where the benchmark runs; start it on
// the other CPUs, so that the client and the app have the same CPUs in
// every row:
//
//	go test -c -o gw.test ./internal/gateway
//	cd internal/gateway && GPUAAS_BENCH_GATEWAY_CPUS=1 taskset -c 0 ../../gw.test -test.run '^$' -test.bench BenchmarkGatewayVsDirect -test.benchtime 20000x
//
// (run from the package's directory, where the test binary finds
// examples/my-app to build).
func BenchmarkGatewayVsDirect(b *testing.B) {
	addr := startExampleApp(b)
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if cpus := os.Getenv("GPUAAS_BENCH_GATEWAY_CPUS"); cpus != "" {
		to := func(gwAddr string) *http.Client {
			c := clientTo(gwAddr)
			c.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
			return c
		}
		gwAddr, cookie := startGatewayProcess(b, addr, cpus, false)
		gw := to(gwAddr)
		appsAddr, appsCookie := startGatewayProcess(b, addr, cpus, true)
		apps := to(appsAddr)
		ngx := startNginx(b, addr, cpus)
		for round := 1; round <= 2; round++ {
			b.Run(fmt.Sprintf("GET-16/direct/%d", round), func(b *testing.B) {
				load(b, direct, "http://"+addr+"/", "", 16)
			})
			b.Run(fmt.Sprintf("GET-16/gateway-apps-listener-own-cpus/%d", round), func(b *testing.B) {
				load(b, apps, "http://"+inst+".apps.test:8080/", appsCookie, 16)
			})
			b.Run(fmt.Sprintf("GET-16/gateway-own-cpus/%d", round), func(b *testing.B) {
				load(b, gw, "http://"+inst+".apps.test:8080/", cookie, 16)
			})
			if ngx != "" {
				b.Run(fmt.Sprintf("GET-16/nginx-own-cpus/%d", round), func(b *testing.B) {
					load(b, direct, "http://"+ngx+"/", "", 16)
				})
			}
		}
		return
	}
	r := newRig(b, addr)
	app := r.open(b)
	gw := r.client()
	gw.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	// The same gateway on an apps listener (AppsServer, fasthttp).
	ra := newRigOn(b, true, addr)
	appsApp := ra.open(b)
	apps := ra.client()
	apps.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	// The same gateway with net/http's Transport to the app, as it had
	// before upstreamTransport: what carrying the GETs in the handler's
	// own goroutine gains.
	old := newRig(b, addr, func(c *Config) { c.Transport = &http.Transport{MaxIdleConnsPerHost: 256} })
	oldApp := old.open(b)
	oldGW := old.client()
	oldGW.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	ngx := startNginx(b, addr, "")
	// The standard library's reverse proxy with nothing of the gateway's
	// own (no token, no lookup, no header policy), in the same process as
	// the gateway runs here: what net/http's proxying costs by itself.
	up, _ := url.Parse("http://" + addr)
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	bareSrv := httptest.NewServer(rp)
	b.Cleanup(bareSrv.Close)
	bare := bareSrv.URL
	for round := 1; round <= 2; round++ {
		b.Run(fmt.Sprintf("GET-16/direct/%d", round), func(b *testing.B) {
			load(b, direct, "http://"+addr+"/", "", 16)
		})
		b.Run(fmt.Sprintf("GET-16/gateway-apps-listener/%d", round), func(b *testing.B) {
			load(b, apps, "http://"+inst+".apps.test:8080/", appsApp.Value, 16)
		})
		b.Run(fmt.Sprintf("GET-16/gateway/%d", round), func(b *testing.B) {
			load(b, gw, "http://"+inst+".apps.test:8080/", app.Value, 16)
		})
		b.Run(fmt.Sprintf("GET-16/gateway-nethttp-transport/%d", round), func(b *testing.B) {
			load(b, oldGW, "http://"+inst+".apps.test:8080/", oldApp.Value, 16)
		})
		b.Run(fmt.Sprintf("GET-16/reverseproxy/%d", round), func(b *testing.B) {
			load(b, direct, bare+"/", "", 16)
		})
		if ngx != "" {
			b.Run(fmt.Sprintf("GET-16/nginx/%d", round), func(b *testing.B) {
				load(b, direct, "http://"+ngx+"/", "", 16)
			})
		}
	}
}

// startNginx runs nginx, when it is installed, as a plain keep-alive
// reverse proxy in front of upstream: a reference for what any proxy hop
// costs on the same machine. With cpus, it runs on those CPUs (taskset). It
// returns "" without nginx.
func startNginx(b *testing.B, upstream, cpus string) string {
	b.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		b.Log("nginx is not installed: no reference proxy in this run")
		return ""
	}
	dir := b.TempDir()
	addr := freeAddr(b)
	conf := fmt.Sprintf(`worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s; proxy_temp_path %[1]s; fastcgi_temp_path %[1]s; uwsgi_temp_path %[1]s; scgi_temp_path %[1]s;
  upstream app { server %[2]s; keepalive 64; }
  server {
    listen %[3]s;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`, dir, upstream, addr)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	args := []string{bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;"}
	if cpus != "" {
		args = append([]string{"taskset", "-c", cpus}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitUp(b, "http://"+addr+"/healthz")
	return addr
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startGatewayProcess runs the gateway in front of upstream in a process of
// its own on cpus: this test binary again, running
// TestGatewayProcessForBench. It returns the gateway's address and an app
// cookie it accepts.
func startGatewayProcess(b *testing.B, upstream, cpus string, apps bool) (addr, cookie string) {
	b.Helper()
	cmd := exec.Command("taskset", "-c", cpus, os.Args[0], "-test.run", "^TestGatewayProcessForBench$")
	cmd.Env = append(os.Environ(), "GPUAAS_BENCH_GATEWAY_UPSTREAM="+upstream, fmt.Sprintf("GPUAAS_BENCH_GATEWAY_APPS=%t", apps))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatalf("taskset (util-linux) runs the gateway on its CPUs: %v", err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, err2 := fmt.Sscan(line, &addr, &cookie); err != nil || err2 != nil {
		b.Fatalf("gateway process: %q: %v %v", line, err, err2)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return addr, cookie
}

// TestGatewayProcessForBench is BenchmarkGatewayVsDirect's gateway process
// (see startGatewayProcess), on the console's listener or on an apps
// listener; it does nothing in a test run. It writes its
// address and an app cookie, then serves until its stdin closes.
func TestGatewayProcessForBench(t *testing.T) {
	upstream := os.Getenv("GPUAAS_BENCH_GATEWAY_UPSTREAM")
	if upstream == "" {
		t.Skip("the gateway process of BenchmarkGatewayVsDirect, started by the benchmark")
	}
	r := newRigOn(t, os.Getenv("GPUAAS_BENCH_GATEWAY_APPS") == "true", upstream)
	app := r.open(t)
	fmt.Printf("%s %s\n", r.addr, app.Value)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// waitUp waits until u answers at all.
func waitUp(b *testing.B, u string) {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not answer: %v", u, err)
		}
	}
}

// load sends b.N GETs from inFlight goroutines and reports the median
// latency and the throughput.
func load(b *testing.B, c *http.Client, u, appCookie string, inFlight int) {
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, b.N)
		next = make(chan struct{}, b.N)
		wg   sync.WaitGroup
	)
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	b.ResetTimer()
	start := time.Now()
	for range inFlight {
		wg.Go(func() {
			mine := make([]time.Duration, 0, b.N/inFlight+1)
			for range next {
				req, _ := http.NewRequest("GET", u, nil)
				if appCookie != "" {
					req.Header.Set("Cookie", "__Host-gpuaas_app="+appCookie)
				}
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("GET %s: %d", u, resp.StatusCode)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
}

// startExampleApp runs examples/my-app on a loopback port until b ends.
func startExampleApp(b *testing.B) string {
	b.Helper()
	bin := os.Getenv("GPUAAS_BENCH_APP")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "my-app")
		testbin.Static(b, filepath.Join("..", "..", "examples", "my-app"), bin, "")
	}
	addr := freeAddr(b)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LISTEN="+addr)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitUp(b, "http://"+addr+"/healthz")
	return addr
}

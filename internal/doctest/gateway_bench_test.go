package doctest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkUIGateway compares the example app reached through the UI
// gateway with the same app reached straight at its container's port, side
// by side in one run: GETs at 16 concurrent requests, and WebSocket echo
// round trips. Real binary, real container. The gateway rows go to gpuaas
// dev's apps listener, as the console's links do; the console-listener rows
// to the same gateway on the console's own listener.
//
//	go test ./internal/doctest -run '^$' -bench BenchmarkUIGateway -benchtime 5000x
func BenchmarkUIGateway(b *testing.B) {
	requireTools(b)
	work, env := devWithExampleApp(b, "gpuaas-gatewaybench")
	runBash(b, work, env, shipScript, "1.0.0")
	out := runBash(b, work, env, `export GPUAAS_API_URL="$(jq -er .api_url .gpuaas/dev-credentials.json)" GPUAAS_PROJECT_ID="$(jq -er .project_id .gpuaas/dev-credentials.json)"
gpuaas instance create my-app 1.0.0 --name bench --wait -o json > instance.json`)
	var inst struct {
		ID     string `json:"id"`
		Access struct {
			LocalURL string `json:"local_url"`
		} `json:"access"`
	}
	raw, _ := os.ReadFile(filepath.Join(work, "instance.json"))
	if err := json.Unmarshal(raw, &inst); err != nil || inst.Access.LocalURL == "" {
		b.Fatalf("instance: %v\n%s\n%s", err, raw, out)
	}
	var creds devCreds
	raw, _ = os.ReadFile(filepath.Join(work, ".gpuaas", "dev-credentials.json"))
	_ = json.Unmarshal(raw, &creds)
	hc := gatewayClient(creds.APIURL)
	session, _ := consoleLogin(b, hc, creds.APIURL, creds.AdminEmail, creds.AdminPassword)
	_, link := openLink(b, hc, creds.APIURL, inst.ID, session)
	_, app := redeem(b, hc, link)
	if app == nil {
		b.Fatal("no app cookie")
	}
	gwURL, _ := url.Parse(link)
	gwOrigin := "http://" + gwURL.Host // the apps listener of gpuaas dev
	// The same gateway on the console's listener (net/http), which serves
	// app origins too: what the apps listener gains.
	pub, _ := url.Parse(creds.APIURL)
	consoleGW := "http://" + inst.ID + ".apps.localhost:" + pub.Port()
	direct := strings.TrimSuffix(inst.Access.LocalURL, "/")
	pool := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: hc.Transport.(*http.Transport).DialContext}}
	directPool := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	get := func(b *testing.B, c *http.Client, u string, cookie bool, inFlight int) {
		var mu sync.Mutex
		var lat []time.Duration
		if inFlight > 1 {
			b.SetParallelism(max(1, inFlight/runtime.GOMAXPROCS(0)))
		}
		start := time.Now()
		b.ResetTimer()
		one := func(next func() bool) {
			var mine []time.Duration
			for next() {
				req, _ := http.NewRequest("GET", u, nil)
				if cookie {
					req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value)
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
		}
		if inFlight > 1 {
			b.RunParallel(func(pb *testing.PB) { one(pb.Next) })
		} else {
			one(b.Loop)
		}
		elapsed := time.Since(start)
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	}
	b.Run("GET-16/direct", func(b *testing.B) { get(b, directPool, direct+"/", false, 16) })
	b.Run("GET-16/gateway", func(b *testing.B) { get(b, pool, gwOrigin+"/", true, 16) })
	b.Run("GET-16/gateway-console-listener", func(b *testing.B) { get(b, pool, consoleGW+"/", true, 16) })
	b.Run("GET-1/direct", func(b *testing.B) { get(b, directPool, direct+"/", false, 1) })
	b.Run("GET-1/gateway", func(b *testing.B) { get(b, pool, gwOrigin+"/", true, 1) })
	b.Run("GET-1/gateway-console-listener", func(b *testing.B) { get(b, pool, consoleGW+"/", true, 1) })

	echo := func(b *testing.B, c *http.Client, u, origin string, cookie bool) {
		h := http.Header{"Origin": {origin}}
		if cookie {
			h.Set("Cookie", "__Host-gpuaas_app="+app.Value)
		}
		ctx := context.Background()
		ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c, HTTPHeader: h})
		if err != nil {
			b.Fatal(err)
		}
		defer ws.CloseNow()
		var lat []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
				b.Fatal(err)
			}
			if _, _, err := ws.Read(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	}
	directURL, _ := url.Parse(direct)
	b.Run("WebSocket/direct", func(b *testing.B) {
		echo(b, http.DefaultClient, "ws://"+directURL.Host+"/ui/echo", "http://"+directURL.Host, false)
	})
	b.Run("WebSocket/gateway", func(b *testing.B) {
		echo(b, hc, "ws://"+gwURL.Host+"/ui/echo", gwOrigin, true)
	})
}

package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkGatewayProxy: the gateway's own cost per proxied GET, against a
// local upstream (no container): token check, upstream lookup, proxy.
//
//	go test ./internal/gateway -run '^$' -bench BenchmarkGatewayProxy
func BenchmarkGatewayProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer up.Close()
	r := newRig(b, up.Listener.Addr().String())
	app := r.open(b)
	hc := r.client()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/", nil)
			req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

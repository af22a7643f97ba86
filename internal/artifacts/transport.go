package artifacts

import (
	"errors"
	"net/http"
	"net/http/httptest"
)

// handlerTransport serves the control plane's own registry calls
// (signature and attestation reads, which are small) in-process through the
// embedded registry's handler, without a network round trip.
type handlerTransport struct {
	h http.Handler
	// plainHTTP refuses https requests, as the real listener would: OCI
	// clients probe https first and must fall back to http.
	plainHTTP bool
}

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.plainHTTP && req.URL.Scheme == "https" {
		return nil, errors.New("registry listener speaks plain HTTP")
	}
	rec := httptest.NewRecorder()
	req = req.Clone(req.Context())
	if req.Host == "" {
		req.Host = req.URL.Host
	}
	req.RequestURI = req.URL.RequestURI()
	t.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request whose client hung up, and whose work stopped on that, is no
// server failure: it is not logged as an error. The same error on a
// request still open is.
func TestAClientHangingUpIsNoErrorInTheLog(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("POST", "/api/v1/auth/login", nil).WithContext(ctx)
	writeError(httptest.NewRecorder(), r, logger, fmt.Errorf("count the attempt: %w", context.Canceled))
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a client hanging up was logged as an error:\n%s", logs.String())
	}
	logs.Reset()
	writeError(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/v1/auth/login", nil), logger, context.Canceled)
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a cancellation on a request still open was not logged as an error:\n%s", logs.String())
	}
}

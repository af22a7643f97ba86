package registry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// failingQuota refuses or fails every upload hold with err.
type failingQuota struct {
	UploadQuota
	err     error
	dropped []string
}

func (f *failingQuota) TouchHold(context.Context, string) error { return nil }
func (f *failingQuota) HoldUpload(context.Context, string, string, int64, int64) (int64, error) {
	return 0, f.err
}
func (f *failingQuota) ShrinkHold(context.Context, string, int64) error { return nil }
func (f *failingQuota) DropHold(_ context.Context, hold string) error {
	f.dropped = append(f.dropped, hold)
	return nil
}

// A hold the quota refuses ends the upload: its data is removed and the
// refusal answered. A hold that could not be written (the database away
// for a moment) refuses nothing: the upload, whose stored bytes were all
// held, stays for the client to resume.
func TestUploadHoldFailureKeepsTheUpload(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		removed    bool
	}{
		{"refused", &Refusal{Status: http.StatusForbidden, Code: "DENIED", Message: "registry quota exceeded"}, http.StatusForbidden, true},
		{"unavailable", errors.New("database unavailable"), http.StatusInternalServerError, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quota := &failingQuota{err: tc.err}
			var removed []string
			q := &quotaHandler{quota: quota,
				authorized: func(*http.Request, string) bool { return true },
				removeUpload: func(_ context.Context, repo, upload string) error {
					removed = append(removed, repo+"/"+upload)
					return nil
				},
				uploadExists: func(context.Context, string, string) (bool, error) { return true, nil },
				next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, err := io.Copy(io.Discard, r.Body); err != nil { // as the registry's blob writer
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					w.WriteHeader(http.StatusAccepted)
				}),
				fail: func(w http.ResponseWriter, _ *http.Request, err error) {
					http.Error(w, "could not account for this push: "+err.Error(), http.StatusInternalServerError)
				},
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPatch, "/v2/p/demo/app/blobs/uploads/u1", strings.NewReader(strings.Repeat("x", 1000)))
			q.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body, tc.wantStatus)
			}
			if got := len(removed) > 0; got != tc.removed {
				t.Errorf("upload removed: %v (%v), want %v", got, removed, tc.removed)
			}
			if got := len(quota.dropped) > 0; got != tc.removed {
				t.Errorf("hold dropped: %v (%v), want %v", got, quota.dropped, tc.removed)
			}
		})
	}
}

// mountQuota records the holds a mount asks for.
type mountQuota struct {
	UploadQuota
	held []string
}

func (m *mountQuota) HoldBlobs(_ context.Context, repository, _ string, blobs []BlobRef) error {
	m.held = append(m.held, repository+"@"+blobs[0].Digest)
	return &Refusal{Status: http.StatusForbidden, Code: "DENIED", Message: "registry quota exceeded"}
}

// A mount is held (and may be refused with the blob's size) only from a
// named repository the pusher may pull: anything else goes to the
// registry, which starts a plain upload or refuses the missing pull,
// before the blob is looked up.
func TestMountHeldOnlyFromAPullableRepository(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, from string
		held       bool
	}{
		{"pullable source", "p/demo/base", true},
		{"source the pusher may not pull", "other/secret/app", false},
		{"no source", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quota := &mountQuota{}
			looked := false
			q := &quotaHandler{quota: quota,
				authorized: func(*http.Request, string) bool { return true },
				mayPull:    func(_ *http.Request, repo string) bool { return strings.HasPrefix(repo, "p/demo/") },
				blobSize: func(context.Context, string) (int64, error) {
					looked = true
					return 4096, nil
				},
				next: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }),
				fail: func(w http.ResponseWriter, _ *http.Request, err error) {
					http.Error(w, err.Error(), http.StatusInternalServerError)
				},
			}
			target := "/v2/p/demo/app/blobs/uploads/?mount=" + d
			if tc.from != "" {
				target += "&from=" + tc.from
			}
			rec := httptest.NewRecorder()
			q.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, target, nil))
			if got := len(quota.held) > 0; got != tc.held || looked != tc.held {
				t.Fatalf("held %v (%v), blob looked up %v; want %v", got, quota.held, looked, tc.held)
			}
			if want := map[bool]int{true: http.StatusForbidden, false: http.StatusAccepted}[tc.held]; rec.Code != want {
				t.Errorf("status %d (%s), want %d", rec.Code, rec.Body, want)
			}
		})
	}
}

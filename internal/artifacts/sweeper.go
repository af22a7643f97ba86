package artifacts

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/worker"
)

// uploadSweepEvery is how often abandoned blob uploads are looked for.
const uploadSweepEvery = 10 * time.Minute

// AbandonedUploadAge is how long an upload may go without a byte before it
// is removed. Every blob upload belongs to a publish intent, no intent
// lives past MaxIntentTTL and an expired one takes no more bytes, so an
// upload idle for longer can never be finished.
const AbandonedUploadAge = MaxIntentTTL + 10*time.Minute

// UploadSweeper is the job that removes abandoned blob uploads and their
// partial data: a client that begins a large upload and goes away would
// otherwise leave its bytes on the server's disk for good. Nil when the
// server has no blob store.
func (s *Service) UploadSweeper() *worker.Periodic {
	if s.Blobs == nil {
		return nil
	}
	return &worker.Periodic{Name: "blob-upload-sweeper", Interval: uploadSweepEvery, Timeout: 5 * time.Minute, Logger: s.Logger,
		Run: func(ctx context.Context) error {
			n, err := s.Blobs.PurgeUploads(ctx, AbandonedUploadAge)
			if n > 0 {
				s.Logger.InfoContext(ctx, "abandoned blob uploads removed", "count", n, "idle_longer_than", AbandonedUploadAge)
			}
			return err
		}}
}

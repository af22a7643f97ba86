package blobstore

import (
	"errors"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Sentinels. Every error the store returns for one of these conditions is an
// *errdefs.Error (kind and stable code for the transport, client-safe message)
// whose cause is the sentinel, so errors.Is(err, blobstore.ErrNotFound) and
// errdefs.KindOf(err) both work.
var (
	ErrNotFound        = errors.New("blobstore: not found")
	ErrInvalidKey      = errors.New("blobstore: invalid key")
	ErrInvalidArgument = errors.New("blobstore: invalid argument")
	ErrOffsetMismatch  = errors.New("blobstore: offset mismatch")
	ErrDigestMismatch  = errors.New("blobstore: digest mismatch")
	ErrAlreadyExists   = errors.New("blobstore: already exists")
	ErrTooLarge        = errors.New("blobstore: object too large")
)

var kinds = map[error]errdefs.Kind{
	ErrNotFound:        errdefs.KindNotFound,
	ErrInvalidKey:      errdefs.KindInvalidArgument,
	ErrInvalidArgument: errdefs.KindInvalidArgument,
	ErrOffsetMismatch:  errdefs.KindConflict,
	ErrDigestMismatch:  errdefs.KindUnprocessable,
	ErrAlreadyExists:   errdefs.KindAlreadyExists,
	ErrTooLarge:        errdefs.KindTooLarge,
}

var codes = map[error]string{
	ErrNotFound:        "blob_not_found",
	ErrInvalidKey:      "artifact_store_uri_invalid",
	ErrInvalidArgument: "blob_invalid_argument",
	ErrOffsetMismatch:  "blob_upload_offset_mismatch",
	ErrDigestMismatch:  "blob_digest_mismatch",
	ErrAlreadyExists:   "blob_already_exists",
	ErrTooLarge:        "blob_too_large",
}

// fail builds the classified error for a sentinel.
func fail(sentinel error, format string, args ...any) *errdefs.Error {
	return &errdefs.Error{Kind: kinds[sentinel], Code: codes[sentinel], Message: fmt.Sprintf(format, args...), Cause: sentinel}
}

// OffsetError is the cause of an Append at an offset that is not the upload's
// current size; Current is where the client must resume (also in the
// errdefs details as "offset"). errors.Is(err, ErrOffsetMismatch) holds.
type OffsetError struct {
	Offset  int64 // what the client sent
	Current int64 // the upload's size
}

func (e *OffsetError) message() string {
	return fmt.Sprintf("append at offset %d, but the upload has %d bytes: resume at %d", e.Offset, e.Current, e.Current)
}

func (e *OffsetError) Error() string { return "blobstore: " + e.message() }

// Is makes errors.Is(err, ErrOffsetMismatch) true.
func (e *OffsetError) Is(target error) bool { return target == ErrOffsetMismatch }

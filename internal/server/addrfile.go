package server

import "github.com/gpuaas/gpuaas/internal/fsutil"

// writeAddrFile writes url (and a newline) to path in one rename, so a
// reader polling for the file never sees it half written.
func writeAddrFile(path, url string) error {
	return fsutil.WriteFile(path, []byte(url+"\n"), 0o644)
}

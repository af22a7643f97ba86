package testbin

import (
	"bytes"
	"sync"
)

// Output collects a child process's output (or a server's log) while the
// test reads it: exec copies into it from a goroutine of its own.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

//go:build unix

package audit

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO nobody reads blocks the writer goroutine inside write(2), like a stuck disk: Record must
// still return at once, dropping and counting what does not fit in the buffer.
func TestJSONLFullBufferDrops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	rd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // so that the writer's open does not wait
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	j, err := OpenJSONLWith(path, nil, Options{Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	// A Record that blocked would block for good (nobody reads the FIFO): the bound only tells the
	// two apart, generous for a loaded machine.
	const n = 5000
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := 0; i < n; i++ {
			j.Record(context.Background(), Event{RequestID: strings.Repeat("x", 1000)})
		}
	}()
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatalf("Record blocked: %d events not recorded after 30 s", n)
	}
	if d := j.Dropped(); d == 0 || d == n {
		t.Fatalf("dropped %d of %d", d, n)
	}
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, rd); copied <- err }()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	if s := j.Stats(); s.Written+s.Dropped != n {
		t.Fatalf("stats %+v", s)
	}
}

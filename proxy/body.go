package proxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// limitBodyRead puts a request's body under limits.bodyReadTimeout: all of it must arrive within
// that time (408 request_timeout past it). The deadline is on reading the request only: it is
// cleared at the body's end, so that it never cuts an answer short. nil when the request has no
// body, or the ResponseWriter has no deadlines.
func (s *Server) limitBodyRead(w http.ResponseWriter, r *http.Request) *deadlineBody {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.limits.BodyReadTimeout)) != nil {
		return nil
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc}
	r.Body = b
	return b
}

// deadlineBody is a request body read under the body-read deadline.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
	mu sync.Mutex
	// done: the deadline was cleared, or the handler returned (the controller may no longer be
	// used).
	done     bool
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.mu.Lock()
		if !b.done {
			_ = b.rc.SetReadDeadline(time.Time{})
			b.done = true
		}
		b.mu.Unlock()
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
		err = fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	return n, err
}

// handlerDone stops b from touching the connection's deadline once the handler has returned (the
// upstream transport may still read the body then); a nil b does nothing.
func (b *deadlineBody) handlerDone() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// bodyTimedOut reports whether r's body went past the body-read deadline.
func bodyTimedOut(r *http.Request) bool {
	b := inflightOf(r.Context()).body
	return b != nil && b.timedOut.Load()
}

// doneBody ends a passed-through request's body before its handler returns. Under full duplex, a
// body read to its end after the handler (by the transport still sending it, or by net/http itself
// where the transport never read it) starts a background read of the connection that the server
// no longer stops, and the server's next read panics (golang/go#68560). Close waits for a read in
// flight, reads the rest while the handler runs, and fails every later read at once.
func doneBody(b io.ReadCloser) { _ = b.Close() }

// errBodyTimeout: the request body did not arrive within limits.bodyReadTimeout.
var errBodyTimeout = errors.New("request body timeout")

// firstBodyBuffer is the buffer readBody starts with: an announced length is not trusted beyond it.
const firstBodyBuffer = 64 << 10

// rewrittenBody reads a rewritten request's body (readBody, limits.maxBodyBytes), and answers when
// it cannot; false when it answered, or the client went away.
func (s *Server) rewrittenBody(w http.ResponseWriter, r *http.Request, log *slog.Logger) ([]byte, bool) {
	body, err := readBody(w, r, s.limits.MaxBodyBytes)
	if err == nil {
		return body, true
	}
	if r.Context().Err() != nil && !errors.Is(err, errBodyTimeout) {
		log.Debug("client went away while sending its body", "err", err)
		return nil, false
	}
	fail(w, log, err)
	return nil, false
}

// readBody reads the whole request body under the size cap. Its buffer costs what was sent, not
// what was announced: it starts at firstBodyBuffer (or the announced length, when smaller) and
// doubles as bytes arrive, never past the announced length or the cap (plus one byte, which sees
// the end without growing).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	most := limit + 1
	if r.ContentLength >= 0 {
		most = r.ContentLength + 1
	}
	buf := make([]byte, 0, min(most, firstBodyBuffer))
	for {
		if len(buf) == cap(buf) {
			ceiling := most
			if int64(len(buf)) >= ceiling {
				ceiling = limit + 1 // longer than announced: only the cap holds
			}
			buf = slices.Grow(buf, int(max(min(int64(cap(buf)), ceiling-int64(len(buf))), 1)))
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

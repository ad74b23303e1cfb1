package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// statusClientGone is the status recorded (never sent) for a request whose client went away before
// its answer was complete, as nginx and Traefik record it.
const statusClientGone = 499

// served records the outcome of a request in the metrics and ends its server span. A client that
// went away before its answer was complete — nothing written yet, the answer aborted, a write
// failed, a stream cut — counts as 499, not as the status its answer began with.
func (s *Server) served(r *http.Request, in *inflight, span *tracing.Span, aborted bool) {
	sw := in.sw
	status := sw.status
	switch {
	case r.Context().Err() != nil && (status == 0 || aborted || sw.failed || sw.gone.Load()):
		status = statusClientGone
	case status == 0:
		status = http.StatusOK
	}
	endRequestSpan(span, status, sw.Header(), in.route)
	if s.opt.Metrics != nil {
		s.opt.Metrics.Request(sw.Header().Get(HeaderProtocol), in.route, status)
	}
}

// statusWriter remembers the status code, whether a write failed and whether a stage saw the client
// go away; Unwrap lets http.ResponseController reach Flush and the deadlines.
type statusWriter struct {
	http.ResponseWriter
	status int
	failed bool
	gone   atomic.Bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if err != nil {
		w.failed = true
	}
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// announce makes a prepared request's decisions known: the response headers, the decision log
// (tools removed, a stored prompt forwarded), the memory of tools seen, the metrics and the log.
func (s *Server) announce(ctx context.Context, h http.Header, id string, log *slog.Logger, prep *Prepared) {
	if s.opt.Tools != nil {
		s.opt.Tools.Saw(prep.Protocol.ID, prep.Kept, prep.Removed)
	}
	// h.Set of each header, their values in one allocation (the keys are canonical).
	vals := make([]string, 3)
	vals[0], vals[1] = prep.Protocol.ID, prep.templateHeader()
	h[HeaderProtocol], h[HeaderTemplate] = vals[0:1:1], vals[1:2:2]
	evs := eventsOf(id, prep.Protocol)
	if len(prep.Removed) > 0 {
		names := make([]string, len(prep.Removed))
		for i, rm := range prep.Removed {
			names[i] = rm.Name
			s.opt.Audit.Record(ctx, evs.removed(rm))
		}
		vals[2] = strings.Join(names, ",")
		h[HeaderToolsRemoved] = vals[2:3:3]
	}
	if prep.StoredPrompt != "" {
		reason := fmt.Sprintf("stored prompt %q forwarded: its tools and instructions are applied upstream, unseen; protocol %q allows every tool", prep.StoredPrompt, prep.Protocol.ID)
		s.opt.Audit.Record(ctx, evs.storedPromptForwarded(reason))
		log.Info("stored prompt forwarded ungoverned", "prompt_id", prep.StoredPrompt, "protocol", prep.Protocol.ID)
	}
	if prep.Prompt.ContextTruncated {
		s.opt.Metrics.ContextTruncated()
	}
	if prep.Shadow != nil {
		s.opt.Metrics.ShadowRequest(prep.Prompt.Sizes.FilledChars, prep.Shadow.Sizes.FilledChars)
		for _, ev := range evs.shadowTools(prep) {
			s.opt.Audit.Record(ctx, ev)
		}
	}
	if prep.learn != nil && s.opt.Learn != nil {
		names := make([]string, len(prep.Kept))
		for i, t := range prep.Kept {
			names[i] = t.Name
		}
		s.opt.Learn.Offered(prep.Protocol.ID, names)
	}
	for _, n := range prep.Notes {
		log.Info(n)
	}
	if log.Enabled(ctx, slog.LevelDebug) { // the arguments are built only for a line that is written
		log.Debug("forwarding", "route", prep.Surface.Name(), "protocol", prep.Protocol.ID, "template", prep.Template.Name, "stream", prep.Stream, "tools_kept", len(prep.Kept), "tools_removed", len(prep.Removed))
	}
}

// relayed wraps a vetted stream so that its end is logged and a client gone counts as 499.
func (s *Server) relayed(ctx context.Context, log *slog.Logger, body io.ReadCloser) io.ReadCloser {
	return &loggedStream{ReadCloser: body, log: log, out: inflightOf(ctx).sw}
}

// requestLogger is log.With("request_id", id), except that the attribute is formatted only when a
// record is written: most requests write none (the per-request lines are at debug level), and With
// formats it at once.
func requestLogger(log *slog.Logger, id string) *slog.Logger {
	rl := &requestLog{h: lazyAttr{next: log.Handler(), attr: slog.String("request_id", id)}}
	rl.log = *slog.New(&rl.h)
	return &rl.log
}

// requestLog is a request's logger and its handler in one allocation.
type requestLog struct {
	log slog.Logger
	h   lazyAttr
}

// lazyAttr is a handler with one attribute added as next.WithAttrs would add it, at the first
// record.
type lazyAttr struct {
	next slog.Handler
	attr slog.Attr
}

func (h lazyAttr) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h lazyAttr) Handle(ctx context.Context, r slog.Record) error {
	return h.next.WithAttrs([]slog.Attr{h.attr}).Handle(ctx, r)
}

func (h lazyAttr) WithAttrs(as []slog.Attr) slog.Handler {
	return h.next.WithAttrs([]slog.Attr{h.attr}).WithAttrs(as)
}

func (h lazyAttr) WithGroup(name string) slog.Handler {
	return h.next.WithAttrs([]slog.Attr{h.attr}).WithGroup(name)
}

// loggedStream logs, when the relay is closed, why an upstream stream broke off: the client was
// sent upstream_stream_truncated then, and the operator should see the cause. A stream cut because
// the client went away marks out (may be nil) so that the request counts as 499.
type loggedStream struct {
	io.ReadCloser
	log *slog.Logger
	out *statusWriter
}

func (l *loggedStream) Close() error {
	if e, ok := l.ReadCloser.(interface{ Err() error }); ok {
		switch err := e.Err(); {
		case err == nil:
		case errors.Is(err, context.Canceled):
			l.log.Debug("stream ended: the client went away", "err", err)
			if l.out != nil {
				l.out.gone.Store(true)
			}
		default:
			l.log.Warn("upstream stream broke off; the client got upstream_stream_truncated", "err", err)
		}
	}
	return l.ReadCloser.Close()
}

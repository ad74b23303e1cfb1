package proxy

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// requestLogger writes exactly what log.With("request_id", id) writes, through every handler
// method, and nothing below the handler's level.
func TestRequestLoggerSameOutput(t *testing.T) {
	for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime})
		},
		func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime})
		},
	} {
		var want, got bytes.Buffer
		base := func(b *bytes.Buffer) *slog.Logger { return slog.New(newHandler(b)).With("component", "proxy") }
		write := func(l *slog.Logger) {
			l.Debug("hidden", "k", 1)
			l.Info("forwarding", "route", "chat")
			l.With("a", 1).Warn("upstream failed", "err", "boom")
			l.WithGroup("g").With("b", 2).Error("x", "c", 3)
		}
		write(base(&want).With("request_id", "pg-1"))
		write(requestLogger(base(&got), "pg-1"))
		if got.String() != want.String() {
			t.Errorf("output differs:\n got  %s\n want %s", got.String(), want.String())
		}
		if bytes.Contains(got.Bytes(), []byte("hidden")) {
			t.Error("a debug line was written at info level")
		}
	}
}

// noTime drops the time, the one thing that differs between two lines written one after the other.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// RequestID keeps a well-formed client id and makes a fresh one for a missing or malformed one: the
// prefix and 24 hex digits, never the same twice.
func TestRequestID(t *testing.T) {
	ask := func(id string) string {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		if id != "" {
			r.Header.Set(HeaderRequestID, id)
		}
		return RequestID(r, "pg-")
	}
	for _, id := range []string{"abc", "trace-1.2:3_x", strings.Repeat("a", 128)} {
		if got := ask(id); got != id {
			t.Errorf("client id %q: got %q, want it kept", id, got)
		}
	}
	made := regexp.MustCompile(`^pg-[0-9a-f]{24}$`)
	seen := map[string]bool{}
	for _, id := range []string{"", strings.Repeat("a", 129), "a b", "id\x00", "<script>", "é", "a/b"} {
		for range 500 {
			got := ask(id)
			if !made.MatchString(got) {
				t.Fatalf("client id %q: got %q, want a made id", id, got)
			}
			if seen[got] {
				t.Fatalf("made id %q twice", got)
			}
			seen[got] = true
		}
	}
}

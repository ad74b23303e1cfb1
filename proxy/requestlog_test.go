package proxy

import (
	"bytes"
	"log/slog"
	"testing"
)

// requestLogger writes exactly what log.With("request_id", id) writes, through every handler method, and
// nothing below the handler's level.
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

// Package audit defines the decision event of promptgate — one record per tool removed from a request and
// per tool call vetted in a response — and the Recorder interface that stores or logs them. It owns the
// event's shape; it does not decide anything (policy/ and policy/vet do) nor serve the events (the admin API does).
package audit

import (
	"context"
	"log/slog"
	"time"
)

// Kinds of events.
const (
	KindToolRemoved = "tool_removed"
	KindToolCall    = "tool_call"
)

// Verdicts.
const (
	VerdictRemoved = "removed"
	VerdictAllowed = "allowed"
	VerdictBlocked = "blocked"
	VerdictAudited = "audited"
)

// Event is one policy decision. Its JSON shape is the admin API's audit event.
type Event struct {
	Time            time.Time `json:"time"`
	RequestID       string    `json:"requestId"`
	Kind            string    `json:"kind"`
	Protocol        string    `json:"protocol"`
	ProtocolVersion int       `json:"protocolVersion"`
	Tool            string    `json:"tool"`
	Verdict         string    `json:"verdict"`
	Reason          string    `json:"reason,omitempty"`
	Rule            string    `json:"rule,omitempty"`
}

// Recorder receives decision events. Implementations must be safe for concurrent use and must not block
// the request for long.
type Recorder interface {
	Record(ctx context.Context, e Event)
}

// Log records events as structured log lines. Tool arguments are never part of an event.
type Log struct{ Logger *slog.Logger }

var _ Recorder = Log{}

// Record logs the event at Info for blocks and removals, Debug otherwise.
func (l Log) Record(ctx context.Context, e Event) {
	level := slog.LevelDebug
	if e.Verdict != VerdictAllowed {
		level = slog.LevelInfo
	}
	l.Logger.LogAttrs(ctx, level, "policy decision",
		slog.String("request_id", e.RequestID), slog.String("kind", e.Kind),
		slog.String("protocol", e.Protocol), slog.Int("protocol_version", e.ProtocolVersion),
		slog.String("tool", e.Tool), slog.String("verdict", e.Verdict),
		slog.String("reason", e.Reason), slog.String("rule", e.Rule))
}

// Multi sends every event to each recorder in turn.
type Multi []Recorder

// Record implements Recorder.
func (m Multi) Record(ctx context.Context, e Event) {
	for _, r := range m {
		r.Record(ctx, e)
	}
}

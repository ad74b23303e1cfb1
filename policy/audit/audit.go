// Package audit defines the decision event of promptgate — one record per tool removed from a
// request, per tool call vetted in a response, and per change an operator makes through the admin
// API — the Recorder interface that receives them, and the recorders that keep them: Ring, a
// bounded ring in its own bbolt file that the admin API queries, JSONL, an append-only file of JSON
// lines, and Log (LogQueue off the request path), the log lines. Ring and JSONL take events without
// ever blocking the request path: a full buffer drops (and counts) instead of waiting, and a disk
// error is logged and counted, never returned to the request. Each writes in windows (Options): one
// transaction or write call for what arrived within one.
//
// It owns the event's shape and its storage. It does not decide anything (policy/ and policy/vet
// do) nor serve the events (the admin API, proxy/admin, does).
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"
)

// Kinds of events: policy decisions on the request path.
const (
	KindToolRemoved = "tool_removed"
	KindToolCall    = "tool_call"
	// KindStoredPrompt: a Responses request named a stored prompt (Tool is "prompt", Reason names
	// its id): VerdictBlocked when it was refused because the operator restricts tools,
	// VerdictAllowed when it was forwarded, its tools and instructions unseen, because every tool
	// is allowed.
	KindStoredPrompt = "stored_prompt"
)

// Kinds of events: information-flow decisions on a response's calls (policy/flow; docs/policy.md,
// "Information-flow policy"). A scan rule's hosts check is KindToolCall.
const (
	// KindProvenance: a provenance rule, or a scan rule's from check, on an argument's value.
	KindProvenance = "provenance"
	// KindFlow: a flow rule (a tool blocked or held once some output is in the conversation).
	KindFlow = "flow"
	// KindBudget: a budget rule (calls of a tool per conversation).
	KindBudget = "budget"
	// KindConfirm: a held call's confirmation (held, confirmed, expired, reused, or blocked when it
	// cannot be had).
	KindConfirm = "confirm"
)

// KindShadow: the protocol version in shadow decides a request's tool, the request itself, or a
// call of its answer otherwise than the active version did (Verdict is the shadow's, ActiveVerdict
// the active version's, ShadowVersion the version in shadow). Nothing of it reached the upstream or
// the client.
const KindShadow = "shadow"

// Kinds of events: the MCP door's decisions (proxy/mcp).
const (
	// KindMCPCall: an MCP tools/call (or an MCP request refused as a whole) was decided.
	KindMCPCall = "mcp_call"
	// KindMCPList: a tool was held back from, or removed from, an MCP tools/list answer.
	KindMCPList = "mcp_list"
	// KindMCPDefinition: an MCP tool definition was pinned, changed, flagged by the scan, or
	// approved.
	KindMCPDefinition = "mcp_definition"
)

// Kinds of events: changes made through the admin API. Target says what changed.
const (
	// KindVersionAdded: a new, not yet active, version of a template or protocol was stored.
	KindVersionAdded = "version_added"
	// KindActivated: a version was made the active one.
	KindActivated = "activated"
	// KindRolledBack: the previously active version was made active again.
	KindRolledBack = "rolled_back"
	// KindRolloutApplied: a rollout file was applied (its definitions stored and activated
	// together).
	KindRolloutApplied = "rollout_applied"
	// KindRolloutReverted: the most recent rollout was reverted.
	KindRolloutReverted = "rollout_reverted"
	// KindToolEnablement: an operator's kill switch of a tool was set or cleared.
	KindToolEnablement = "tool_enablement"
	// KindShadowChanged: a protocol version was put in shadow (Version), or taken out of it
	// (Version 0).
	KindShadowChanged = "shadow_changed"
)

// Verdicts.
const (
	VerdictRemoved = "removed"
	VerdictAllowed = "allowed"
	VerdictBlocked = "blocked"
	VerdictAudited = "audited"
)

// Verdicts of information-flow decisions, besides allowed, blocked and audited.
const (
	// VerdictHeld: the call was withheld until the user confirms it; a notice with a code took its
	// place.
	VerdictHeld = "held"
	// VerdictConfirmed: the user's code released the call, once.
	VerdictConfirmed = "confirmed"
	// VerdictExpired: the user gave the call's code after it expired (the call is held again).
	VerdictExpired = "expired"
	// VerdictReused: the user gave a code that was already used (the call is held again).
	VerdictReused = "reused"
)

// Verdicts of admin changes.
const (
	// VerdictChanged: a definition, its active version or a rollout changed.
	VerdictChanged = "changed"
	// VerdictEnabled and VerdictDisabled: a tool's kill switch was set; VerdictCleared: it was
	// removed.
	VerdictEnabled  = "enabled"
	VerdictDisabled = "disabled"
	VerdictCleared  = "cleared"
)

// Verdicts of MCP tool definitions (kind mcp_definition), besides VerdictChanged.
const (
	// VerdictPinned: a first-seen definition was pinned.
	VerdictPinned = "pinned"
	// VerdictFlagged: the injection scan found something in a description.
	VerdictFlagged = "flagged"
	// VerdictApproved: an operator pinned a pending definition.
	VerdictApproved = "approved"
)

// Event is one policy decision or one admin change. Its JSON shape is the admin API's audit event:
// the fields up to Rule are always there (the contract's shape; "" when empty), the fields after
// Rule are optional and left out of the JSON when empty. Nothing secret belongs in an event: no
// keys, and tool arguments only as ArgsSHA256 unless the operator opted in (see WithArguments).
type Event struct {
	Time            time.Time `json:"time"`
	RequestID       string    `json:"requestId"`
	Kind            string    `json:"kind"`
	Protocol        string    `json:"protocol"`
	ProtocolVersion int       `json:"protocolVersion"`
	Tool            string    `json:"tool"`
	Verdict         string    `json:"verdict"`
	Reason          string    `json:"reason"`
	Rule            string    `json:"rule"`

	// Actor is who made an admin change (the X-Promptgate-Actor header, else "admin").
	Actor string `json:"actor,omitempty"`
	// Target is what an admin change concerned: "templates/NAME", "protocols/ID", "tools/NAME" or
	// "rollouts/ID".
	Target string `json:"target,omitempty"`
	// Version is the version an admin change stored or activated (0: none).
	Version int `json:"version,omitempty"`
	// ArgsSHA256 is the lowercase hex SHA-256 of the exact argument bytes of a vetted tool call.
	ArgsSHA256 string `json:"argumentsSha256,omitempty"`
	// Args holds those argument bytes, only when the operator opted in (audit.includeArguments).
	Args string `json:"arguments,omitempty"`
	// Round is, for a decision on a call of an answer that promptgate continued (onViolation
	// "continue"), the round it was taken in: 1 for the upstream's second answer, and so on; 0
	// (left out) for the first.
	Round int `json:"round,omitempty"`
	// ActiveVerdict is, in a shadow event, the active version's verdict; ShadowVersion the version
	// in shadow.
	ActiveVerdict string `json:"activeVerdict,omitempty"`
	ShadowVersion int    `json:"shadowVersion,omitempty"`
}

// ArgsDigest returns the lowercase hex SHA-256 of a tool call's raw arguments, the form events
// keep.
func ArgsDigest(args []byte) string {
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

// WithArguments returns e with ArgsSHA256 set from the call's raw arguments, and with Args set too
// when include is true (the operator's audit.includeArguments). Empty arguments leave e unchanged.
func (e Event) WithArguments(args []byte, include bool) Event {
	if len(args) == 0 {
		return e
	}
	e.ArgsSHA256 = ArgsDigest(args)
	if include {
		e.Args = string(args)
	}
	return e
}

// Recorder receives decision events. Implementations must be safe for concurrent use and must not
// block the request for long.
type Recorder interface {
	Record(ctx context.Context, e Event)
}

// Log records events as structured log lines, on the caller's goroutine (LogQueue writes them from
// its own). Tool arguments are never logged, not even when the event carries them; their digest is.
type Log struct{ Logger *slog.Logger }

var _ Recorder = Log{}

// logMessage is the message of every decision line.
const logMessage = "policy decision"

// Record logs the event at Info for blocks, removals and admin changes, Debug otherwise.
func (l Log) Record(ctx context.Context, e Event) {
	l.Logger.LogAttrs(ctx, logLevel(e), logMessage, logAttrs(e)...)
}

// logLevel is the level of e's line: Debug for an allowed call, Info for everything else.
func logLevel(e Event) slog.Level {
	if e.Verdict == VerdictAllowed {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// logAttrs are the attributes of e's line.
func logAttrs(e Event) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("request_id", e.RequestID), slog.String("kind", e.Kind),
		slog.String("protocol", e.Protocol), slog.Int("protocol_version", e.ProtocolVersion),
		slog.String("tool", e.Tool), slog.String("verdict", e.Verdict),
		slog.String("reason", e.Reason), slog.String("rule", e.Rule),
	}
	if e.Actor != "" || e.Target != "" {
		attrs = append(attrs, slog.String("actor", e.Actor), slog.String("target", e.Target), slog.Int("version", e.Version))
	}
	if e.ArgsSHA256 != "" {
		attrs = append(attrs, slog.String("args_sha256", e.ArgsSHA256))
	}
	if e.Round > 0 {
		attrs = append(attrs, slog.Int("round", e.Round))
	}
	return attrs
}

// LogQueue writes Log's lines from its own goroutine, one run of lines per window (Options.Window),
// so that a request does not wait for the log's write. Every line is written, in the order Record
// was called, with the time of that call; while the buffer is full, Record waits for room (as it
// waited for the write before), and after Close it writes on the caller's goroutine. Lines below
// the logger's level cost the caller only the level check. The handler gets a background context.
// Create it with NewLogQueue; Close it to write what is buffered.
type LogQueue struct {
	log Log
	p   *pipe[logLine]
}

var _ Recorder = (*LogQueue)(nil)

// logLine is a line waiting in a LogQueue.
type logLine struct {
	at    time.Time
	level slog.Level
	e     Event
}

// NewLogQueue starts the goroutine that writes l's lines.
func NewLogQueue(l Log, o Options) *LogQueue {
	q := &LogQueue{log: l}
	q.p = newPipe(logMessage, o, slog.New(slog.DiscardHandler), q.write)
	return q
}

// Record queues e's line, if its level is enabled.
func (q *LogQueue) Record(ctx context.Context, e Event) {
	level := logLevel(e)
	if !q.log.Logger.Enabled(ctx, level) {
		return
	}
	if !q.p.put(logLine{at: time.Now(), level: level, e: e}) {
		q.log.Record(ctx, e)
	}
}

// Flush ends the open window and waits until every line queued before the call is written.
func (q *LogQueue) Flush() error { return q.p.flush(context.Background()) }

// Close writes the queued lines and stops the goroutine. Lines recorded after it are written at
// once.
func (q *LogQueue) Close() error {
	q.p.close()
	return nil
}

// write hands the lines to the logger's handler; like slog.Logger, it ignores the handler's errors.
func (q *LogQueue) write(lines []logLine) error {
	h := q.log.Logger.Handler()
	for _, l := range lines {
		r := slog.NewRecord(l.at, l.level, logMessage, 0)
		r.AddAttrs(logAttrs(l.e)...)
		_ = h.Handle(context.Background(), r)
	}
	return nil
}

// Multi sends every event to each recorder in turn.
type Multi []Recorder

// Record implements Recorder.
func (m Multi) Record(ctx context.Context, e Event) {
	for _, r := range m {
		r.Record(ctx, e)
	}
}

// Package store keeps promptgate's versioned definitions: templates, protocols and the MCP door's
// pin sets.
//
// It owns: immutable versions of each definition (raw JSON, byte for byte as given), one active
// version per name moved in a single transaction, the activation history that rollback walks,
// rollouts (migration files) applied and reverted atomically, seeding a new database from the
// definitions built into the binary (package store/builtin), and notifying watchers after a change.
// Bolt is the embedded bbolt backend; the Store interface is what the rest of promptgate uses, so
// that a fleet backend (etcd) can take its place.
//
// It does not own what a definition means: it checks only structure (a JSON object with a valid
// "name" or "id", and a string "text" for templates). Protocol and template semantics are checked
// by the Options.Validate hook that the caller supplies. It does not cache parsed templates, choose
// protocols, or fall back to built-in definitions on its own: Fallback is there for the caller,
// who should log when it uses it.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/promptgate/promptgate/store/builtin"
)

// Kind names a family of definitions. Its value is also the bucket (or key prefix) that holds them.
type Kind string

const (
	// KindTemplate is a prompt template: {"name":"...","text":"..."}.
	KindTemplate Kind = "templates"
	// KindProtocol is a protocol definition: a JSON object with an "id".
	KindProtocol Kind = "protocols"
	// KindMCPPins is the pinned tool definitions of one MCP server behind the MCP door: a JSON
	// object with a "server" (its label) and its "tools"; a first pin and an approval are each a
	// new version.
	KindMCPPins Kind = "mcppins"
)

// Kinds lists every kind, in the order they are stored and reported.
func Kinds() []Kind { return []Kind{KindTemplate, KindProtocol, KindMCPPins} }

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool { return k == KindTemplate || k == KindProtocol || k == KindMCPPins }

// UnknownKind is the error a backend returns for a kind that is not one of Kinds (wrapping
// ErrInvalid).
func UnknownKind(k Kind) error {
	return fmt.Errorf("store: unknown kind %q (want %q, %q or %q): %w", k, KindTemplate, KindProtocol, KindMCPPins, ErrInvalid)
}

// Sentinel errors. Store methods return them wrapped, with a "store: " prefix and the name
// concerned; test with errors.Is.
var (
	// ErrNotFound: no such name, version, or no active version.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyApplied: a rollout with this id has been applied (and not reverted).
	ErrAlreadyApplied = errors.New("rollout already applied")
	// ErrNothingToRevert: no rollout is applied.
	ErrNothingToRevert = errors.New("no applied rollout to revert")
	// ErrNoPreviousVersion: Rollback found no earlier active version in the activation history.
	ErrNoPreviousVersion = errors.New("no previously active version")
	// ErrLocked: Open could not lock the database file within Options.LockTimeout, because another
	// process (typically a running `promptgate serve`) has it open.
	ErrLocked = errors.New("database file is locked")
	// ErrInvalid: a definition or rollout failed the structural checks or the Validate hook.
	ErrInvalid = errors.New("invalid")
	// ErrConflict: ActivateIf found another version active than the one expected.
	ErrConflict = errors.New("the active version moved")
)

// Record is one stored version of a definition.
type Record struct {
	Kind Kind
	Name string
	// Version counts from 1 per name; 0 means the record did not come from the store (Fallback).
	Version   int
	CreatedAt time.Time
	Author    string
	Note      string
	// Body is the raw JSON definition exactly as it was given: template
	// {"name":"...","text":"..."}; protocol: the whole definition with "id". It is the caller's
	// copy, but it may be shared with other readers of the same result: never mutate it.
	Body []byte
}

// MarshalJSON writes the record with Body as JSON (not base64).
func (r Record) MarshalJSON() ([]byte, error) {
	body := json.RawMessage(r.Body)
	if len(body) == 0 {
		body = json.RawMessage("null")
	}
	return json.Marshal(struct {
		Kind      Kind            `json:"kind"`
		Name      string          `json:"name"`
		Version   int             `json:"version"`
		CreatedAt time.Time       `json:"createdAt"`
		Author    string          `json:"author,omitempty"`
		Note      string          `json:"note"`
		Body      json.RawMessage `json:"body"`
	}{r.Kind, r.Name, r.Version, r.CreatedAt, r.Author, r.Note, body})
}

// VersionInfo describes one version without its body.
type VersionInfo struct {
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"createdAt"`
	Author    string    `json:"author,omitempty"`
	Note      string    `json:"note"`
}

// Entry describes one name: its active version (0 = none), the version Rollback would make active
// now (0 = none: Rollback answers ErrNoPreviousVersion) and every version, oldest first.
type Entry struct {
	Name       string `json:"name"`
	Active     int    `json:"active"`
	RollbackTo int    `json:"rollbackTo"`
	// Shadow is the protocol version in shadow (judged beside the active one, for the record only);
	// 0 = none.
	Shadow   int           `json:"shadow,omitempty"`
	Versions []VersionInfo `json:"versions"`
}

// RollbackTarget is the version Rollback re-activates given the active version and the activation
// history (most recent last): the last entry that differs from active, 0 when there is none.
func RollbackTarget(active int, history []int) int {
	for i := len(history) - 1; i >= 0; i-- {
		if history[i] != active {
			return history[i]
		}
	}
	return 0
}

// Snapshot is every active record, read in one read transaction, keyed by name.
// A name without an active version is absent.
type Snapshot struct {
	Templates, Protocols map[string]Record
	// MCPPins are the active pin sets, by MCP server label.
	MCPPins map[string]Record
	// Shadows holds the protocol versions in shadow, by protocol id (see Store.SetShadow).
	Shadows map[string]Record
	// Tools holds the runtime enablement overrides by tool name.
	Tools map[string]ToolOverride
}

// ToolOverride is an operator's runtime enablement of one tool.
type ToolOverride struct {
	Enabled   bool      `json:"enabled"`
	Author    string    `json:"author,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Of returns the map of kind k (nil for an unknown kind).
func (s Snapshot) Of(k Kind) map[string]Record {
	switch k {
	case KindTemplate:
		return s.Templates
	case KindProtocol:
		return s.Protocols
	case KindMCPPins:
		return s.MCPPins
	}
	return nil
}

// NewSnapshot is an empty snapshot with every map made (Tools too).
func NewSnapshot() Snapshot {
	return Snapshot{Templates: map[string]Record{}, Protocols: map[string]Record{}, MCPPins: map[string]Record{},
		Shadows: map[string]Record{}, Tools: map[string]ToolOverride{}}
}

// Rollout is one migration: definitions to store as new versions and activate, together.
type Rollout struct {
	ID        string            `json:"id"`
	Templates []json.RawMessage `json:"templates"`
	Protocols []json.RawMessage `json:"protocols"`
}

// AppliedRollout records what applying a rollout changed, so that it can be reverted exactly.
// Map keys are "KIND/NAME", e.g. "templates/base_tool_call_v2".
type AppliedRollout struct {
	ID        string    `json:"id"`
	AppliedAt time.Time `json:"appliedAt"`
	// Previous is the version that was active before the rollout (0 = none).
	Previous map[string]int `json:"previous"`
	// Activated is the version the rollout stored and activated.
	Activated map[string]int `json:"activated"`
}

// Key returns the AppliedRollout map key for kind and name: "KIND/NAME".
func Key(kind Kind, name string) string { return string(kind) + "/" + name }

// Store is the interface the rest of promptgate uses to read and change definitions.
// Every method is safe for concurrent use. Returned values are copies owned by the caller,
// but they must be treated as read-only (a cache may hand the same value to many readers).
type Store interface {
	// Active returns the active version of name; ErrNotFound if the name is unknown or has none.
	Active(ctx context.Context, kind Kind, name string) (Record, error)
	// Get returns one version; ErrNotFound if it does not exist.
	Get(ctx context.Context, kind Kind, name string, version int) (Record, error)
	// List returns every name of kind, sorted by name.
	List(ctx context.Context, kind Kind) ([]Entry, error)
	// Entry returns one name's versions and active version; ErrNotFound if unknown.
	Entry(ctx context.Context, kind Kind, name string) (Entry, error)
	// AddVersion validates body and stores it as the next version of the name it carries ("name"
	// for templates, "id" for protocols). It does not activate it.
	AddVersion(ctx context.Context, kind Kind, body []byte, author, note string) (int, error)
	// Activate makes version the active one and returns the version that was active just before,
	// read in the same transaction that moved the pointer (0 = none): with concurrent activations
	// of one name, each caller gets the version its own activation replaced, so the returned pairs
	// chain into the history. Activating the version that is already active is a no-op and returns
	// that version.
	Activate(ctx context.Context, kind Kind, name string, version int) (previous int, err error)
	// ActivateIf activates version as Activate does, but only while the active version is expected
	// (0 = none), read in the transaction that moves the pointer: otherwise nothing changes and the
	// error wraps ErrConflict. A writer that read the active version, derived a new one from it and
	// stored it loses no concurrent change this way.
	ActivateIf(ctx context.Context, kind Kind, name string, version, expected int) error
	// Rollback re-activates the version that was active before the current one and returns it (to)
	// and the version it replaced (from), both read in the transaction that moved the pointer;
	// ErrNoPreviousVersion if there is none. Repeated rollbacks walk further back.
	Rollback(ctx context.Context, kind Kind, name string) (to, from int, err error)
	// Snapshot returns every active record, read consistently.
	Snapshot(ctx context.Context) (Snapshot, error)
	// ApplyRollout stores and activates every definition of r in one transaction; ErrAlreadyApplied
	// if r.ID is applied. Nothing is stored if any definition is invalid.
	ApplyRollout(ctx context.Context, r Rollout) error
	// RevertLast re-activates exactly the versions that were active before the most recently
	// applied rollout (removing the active pointer where there was none), forgets that it was
	// applied, and returns it; ErrNothingToRevert if none is applied. The versions it stored stay.
	RevertLast(ctx context.Context) (AppliedRollout, error)
	// Rollouts returns the applied rollouts, oldest first.
	Rollouts(ctx context.Context) ([]AppliedRollout, error)
	// SetShadow puts a version of protocol name in shadow — every request routed to the protocol is
	// also judged by it, for the record only — or, with version 0, takes the protocol's shadow
	// away, and returns the version that was in shadow before (0 = none), read in the transaction
	// that moved the pointer. ErrNotFound: the name or version does not exist, or (version 0) no
	// version is in shadow; ErrInvalid: the version is the active one. A change that activates the
	// version in shadow (Activate, Rollback, a rollout or its revert) takes it out of shadow in the
	// same transaction.
	SetShadow(ctx context.Context, name string, version int) (previous int, err error)
	// SetToolEnabled stores the operator's runtime enablement override of a tool (the kill switch).
	SetToolEnabled(ctx context.Context, name string, enabled bool, author string) error
	// ClearToolEnabled removes the override of a tool, so the config decides again.
	ClearToolEnabled(ctx context.Context, name string) error
	// Watch registers fn to be called after every committed change made through this Store (a
	// remote backend also calls it on remote changes). fn may run on any goroutine, possibly
	// concurrently with itself; it must be quick and must not change the store. cancel is
	// idempotent.
	Watch(fn func()) (cancel func())
	// Close releases the store. Watchers are dropped.
	Close() error
}

// Fallback returns the built-in definition of name as a Record with Version 0, Author "builtin", or
// false if the binary has none. It is for callers whose store lacks a name (log when you use it).
func Fallback(kind Kind, name string) (Record, bool) {
	var (
		d  builtin.Definition
		ok bool
	)
	switch kind {
	case KindTemplate:
		d, ok = builtin.Template(name)
	case KindProtocol:
		d, ok = builtin.Protocol(name)
	}
	if !ok {
		return Record{}, false
	}
	return Record{Kind: kind, Name: d.Name, Author: BuiltinAuthor, Note: "built into the binary", Body: d.Body}, true
}

// Package mcpjoin is the meeting point of the two paths an agent's tool call takes through
// promptgate: the model's call, released on a rewritten API (chat, Responses, Messages), and the
// MCP tools/call that executes it on the MCP door. It keeps, per instance and bounded, the model
// calls released (tool, arguments digest, conversation, time) for the door to match its calls
// against, and the calls the door let through to an MCP server, so that their outputs are known as
// that server's (mcp:SERVER) when they come back in the next request to the model.
//
// It owns the record and the digest both paths use (canon.go: key order and white space do not
// count, and two arguments are one only where every reader reads them as one). It does not decide
// anything: the door and the proxy do.
package mcpjoin

import (
	"container/list"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
)

// Defaults of a Record.
const (
	// DefaultWindow is how long a released model call can be matched by an MCP call.
	DefaultWindow = 10 * time.Minute
	// DefaultMax is how many released calls, and how many executed calls, a Record holds.
	DefaultMax = 100000
	// executedTTL is how long an executed call's server is remembered for the next requests to the
	// model.
	executedTTL = 24 * time.Hour
)

// Call is one tool call as both paths name it.
type Call struct {
	// Tool is the model's name of the tool (the MCP tool's name with its server's toolPrefix).
	Tool string
	// Digest is the Digest of the arguments.
	Digest [32]byte
	// Conversation is the conversation id the request named (X-Promptgate-Conversation or
	// promptgate.conversation); "" when none. Both paths must name the same.
	Conversation string
}

// Digest is the digest both paths key a call's arguments by (canon.go); false when they are not one
// strict JSON object, which matches no call.
func Digest(args []byte) ([32]byte, bool) { return digest(args) }

// readerDigest is flow.ArgsDigestFloat64 of the arguments (numbers read as float64s, the coarsest
// reading: an output's label errs toward the server), the key of executed calls; false when they
// are not one JSON object.
func readerDigest(args []byte) ([32]byte, bool) {
	if len(args) == 0 || !gjson.ValidBytes(args) {
		return [32]byte{}, false
	}
	d, err := flow.ArgsDigestFloat64(gjson.ParseBytes(args))
	return d, err == nil
}

// Match is what the record knows of an MCP call.
type Match int

// The outcomes of Claim.
const (
	// Unmatched: no model call of that tool was released in the conversation within the window.
	Unmatched Match = iota
	// Matched: a released model call with the same tool and arguments; it is used up.
	Matched
	// Differs: model calls of the tool were released in the conversation, none with these
	// arguments.
	Differs
	// Spent: the model call with these arguments was matched by an MCP call already (a call runs
	// once).
	Spent
)

// Released is a model call as the proxy released it.
type Released struct {
	Call
	// Protocol is the protocol it was released under.
	Protocol string
	At       time.Time
	used     bool
}

// Record is the per-instance memory of both paths. Safe for concurrent use; nil records nothing.
type Record struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	now    func() time.Time

	released map[relKey][]*Released
	order    *list.List // of *Released, oldest first

	executed map[exeKey]exeEntry
	exeOrder *list.List // of exeKey, oldest first

	written      map[[32]byte]exeEntry // digest of a text -> the server(s) that wrote it
	writtenOrder *list.List            // of [32]byte, oldest first
}

type relKey struct{ tool, conversation string }

type exeKey struct {
	tool   string
	digest [32]byte
}

type exeEntry struct {
	server string
	until  time.Time
}

// New returns an empty record of at most max released and max executed calls (0: DefaultMax),
// matching within window (0: DefaultWindow); now nil is time.Now.
func New(max int, window time.Duration, now func() time.Time) *Record {
	if max <= 0 {
		max = DefaultMax
	}
	if window <= 0 {
		window = DefaultWindow
	}
	if now == nil {
		now = time.Now
	}
	return &Record{max: max, window: window, now: now, released: map[relKey][]*Released{}, order: list.New(),
		executed: map[exeKey]exeEntry{}, exeOrder: list.New(), written: map[[32]byte]exeEntry{}, writtenOrder: list.New()}
}

// Window is how long a released call can be matched.
func (r *Record) Window() time.Duration { return r.window }

// Release records a model call the proxy let reach the client, under protocol.
func (r *Record) Release(c Call, protocol string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for f := r.order.Front(); f != nil && (r.order.Len() >= r.max || now.Sub(f.Value.(*Released).At) > r.window); f = r.order.Front() {
		r.drop(f)
	}
	rel := &Released{Call: c, Protocol: protocol, At: now}
	k := relKey{c.Tool, c.Conversation}
	r.released[k] = append(r.released[k], rel)
	r.order.PushBack(rel)
}

// drop forgets the released call of a list element. Called with r.mu held.
func (r *Record) drop(e *list.Element) {
	r.order.Remove(e)
	rel := e.Value.(*Released)
	k := relKey{rel.Tool, rel.Conversation}
	rs := r.released[k]
	for i, x := range rs {
		if x == rel {
			rs = append(rs[:i:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(r.released, k)
	} else {
		r.released[k] = rs
	}
}

// Claim matches an MCP call against the released model calls: the first unused one of the same
// tool, conversation and arguments within the window is used up and returned.
func (r *Record) Claim(c Call) (Match, *Released) {
	if r == nil {
		return Unmatched, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	rs := r.released[relKey{c.Tool, c.Conversation}]
	seen, spent := false, false
	for _, rel := range rs {
		if now.Sub(rel.At) > r.window {
			continue
		}
		seen = true
		if rel.Digest != c.Digest {
			continue
		}
		if !rel.used {
			rel.used = true
			out := *rel
			return Matched, &out
		}
		spent = true
	}
	switch {
	case spent:
		return Spent, nil
	case seen:
		return Differs, nil
	}
	return Unmatched, nil
}

// Executed records that an MCP server ran a call of tool with these raw arguments: its output, when
// it comes back to the model, is that server's (ServerOf). The record keys it by a reading of the
// arguments that takes every number as its float64 (readerDigest), so that an output is its
// server's however an agent wrote the numbers of the model's call (1 or 1.0) — the label errs
// toward the server. Where two servers ran the same call (servers whose model names of tools meet,
// a client calling the other one with the same arguments), an output of it is neither's: it cannot
// be told which server wrote it.
func (r *Record) Executed(tool string, args []byte, server string) {
	if r == nil || server == "" {
		return
	}
	digest, ok := readerDigest(args)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := exeKey{tool, digest}
	now := r.now()
	old, ok := r.executed[k]
	if !ok {
		r.exeOrder.PushBack(k)
	}
	if ok && now.Before(old.until) && old.server != server {
		server = ambiguous
	}
	r.executed[k] = exeEntry{server: server, until: now.Add(executedTTL)}
	for r.exeOrder.Len() > r.max {
		e := r.exeOrder.Front()
		r.exeOrder.Remove(e)
		delete(r.executed, e.Value.(exeKey))
	}
}

// ServerOf is the label of the MCP server that ran the call of tool with these raw arguments, ""
// when no server of the door did (or it is forgotten).
func (r *Record) ServerOf(tool string, args []byte) string {
	if r == nil || len(args) == 0 {
		return ""
	}
	d, ok := readerDigest(args)
	if !ok {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.executed[exeKey{tool, d}]
	if !ok || !r.now().Before(e.until) || e.server == ambiguous {
		return ""
	}
	return e.server
}

// Wrote records that an MCP server wrote text for the client to hand its model as the user's (a
// message of its sampling request, of a prompt, a resource's contents), for the window: a request
// to the model that carries it as the user's is labelled the server's (WriterOf). A text that two
// servers wrote is both's: its label names them both, which no trust setting names.
func (r *Record) Wrote(server, text string) {
	text = strings.TrimSpace(text)
	if r == nil || server == "" || text == "" {
		return
	}
	k := sha256.Sum256([]byte(text))
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	old, ok := r.written[k]
	if !ok {
		r.writtenOrder.PushBack(k)
	}
	if ok && now.Before(old.until) {
		if !slices.Contains(strings.Split(old.server, "|"), server) {
			server = old.server + "|" + server
		} else {
			server = old.server
		}
	}
	r.written[k] = exeEntry{server: server, until: now.Add(r.window)}
	for r.writtenOrder.Len() > r.max {
		e := r.writtenOrder.Front()
		r.writtenOrder.Remove(e)
		delete(r.written, e.Value.([32]byte))
	}
}

// WriterOf is the label of the MCP server(s) that wrote text within the window, "" when none did.
func (r *Record) WriterOf(text string) string {
	if r == nil {
		return ""
	}
	k := sha256.Sum256([]byte(strings.TrimSpace(text)))
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.written[k]; ok && r.now().Before(e.until) {
		return e.server
	}
	return ""
}

// ambiguous marks a call that two servers ran (a server's label cannot be empty).
const ambiguous = ""

// Len is how many released calls are held (expired ones included until they are dropped).
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order.Len()
}

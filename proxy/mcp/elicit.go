package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/sse"
)

// A call that a rule holds for the user's confirmation is put to the user over MCP where the client
// can ask them: it declared form elicitation (capabilities.elicitation) when it opened the session,
// on a version that has it (2025-06-18 and later, with sessions). The door answers the call's POST
// with an event stream, sends elicitation/create on it — the question names the call's tool, rule
// and key arguments, never a code — and waits for the client's answer, which the client POSTs with
// the elicitation's id. An answer that accepts with confirm: true releases exactly the call that
// was held, once: the door sends its message, byte for byte, to the server and relays the server's
// answer on the same stream. A decline, a cancel, the end of the confirmation's time or the client
// going away refuses it. The elicitation is bound to the server, the session, the protocol version
// and the call (tool and arguments digest), and expires with the protocol's confirmation TTL. Where
// the client cannot be asked, the call gets the held result.

// elicitPrefix begins the id of every elicitation the door sends (a JSON string).
const elicitPrefix = `"promptgate-confirm-`

// versionElicitation is the first version with elicitation.
const versionElicitation = Version20250618

// maxSessions bounds the sessions whose capabilities the door remembers.
const maxSessions = 10000

// sessionKey names a session of a server.
type sessionKey struct{ server, session string }

// sessionCaps remembers which sessions' clients can be asked (form elicitation), bounded, oldest
// forgotten first. Safe for concurrent use.
type sessionCaps struct {
	mu    sync.Mutex
	form  map[sessionKey]bool
	order []sessionKey
}

func newSessionCaps() *sessionCaps { return &sessionCaps{form: map[sessionKey]bool{}} }

// set records whether a session's client declared form elicitation.
func (s *sessionCaps) set(k sessionKey, form bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.form[k]; !ok {
		s.order = append(s.order, k)
		for len(s.order) > maxSessions {
			delete(s.form, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.form[k] = form
}

// drop forgets a session (DELETE).
func (s *sessionCaps) drop(k sessionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.form, k)
}

// canAsk reports whether a session's client declared form elicitation.
func (s *sessionCaps) canAsk(k sessionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.form[k]
}

// formElicitation reports whether an initialize's capabilities.elicitation offers form mode: an
// empty object (the 2025-06-18 form) or one with a form member.
func formElicitation(caps gjson.Result) bool {
	el := caps.Get("elicitation")
	if !el.IsObject() {
		return false
	}
	keys := 0
	el.ForEach(func(_, _ gjson.Result) bool { keys++; return true })
	return keys == 0 || el.Get("form").Exists()
}

// elicitation is one question the door asked and waits for.
type elicitation struct {
	key     sessionKey
	version string
	tool    string
	digest  [32]byte
	expires time.Time
	answer  chan elicitAnswer // buffered 1: the one answer
}

// elicitAnswer is the user's answer: accept is a confirmation; why says what else it was.
type elicitAnswer struct {
	accept bool
	why    string
}

// elicitations are the questions waiting for an answer, by id. Safe for concurrent use.
type elicitations struct {
	mu sync.Mutex
	m  map[string]*elicitation
}

func newElicitations() *elicitations { return &elicitations{m: map[string]*elicitation{}} }

func (e *elicitations) add(id string, el *elicitation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[id] = el
}

func (e *elicitations) remove(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, id)
}

// take removes and returns the question id names where match accepts it; why says why not.
func (e *elicitations) take(id string, match func(*elicitation) string) (*elicitation, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	el := e.m[id]
	if el == nil {
		return nil, "an answer to no question the door asked (unknown, answered or expired)"
	}
	if why := match(el); why != "" {
		return nil, why
	}
	delete(e.m, id)
	return el, ""
}

// heldCall is a call held for the user's confirmation that the door will ask the client about.
type heldCall struct {
	m      message
	model  string
	args   []byte
	digest [32]byte
	res    flow.Result
	ttl    time.Duration
}

// session is the exchange's session: its server and Mcp-Session-Id ("" session when it has none).
func (x *exchange) session() sessionKey {
	return sessionKey{x.srv.Name, x.r.Header.Get(headerSession)}
}

// canAsk reports whether a held call of m can be put to the user: a request (with an id) of a
// session-based version that has elicitation, whose client declared form elicitation for the
// session, alone in its POST, whose client accepts an event stream.
func (x *exchange) canAsk(m message) bool {
	k := x.session()
	return m.id != "" && !x.batch && !stateless(x.version) && x.version >= versionElicitation && k.session != "" &&
		acceptsStream(x.r.Header) && x.d.sessions.canAsk(k)
}

// acceptsStream reports whether an Accept header takes text/event-stream.
func acceptsStream(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// answerElicitation takes a response the client POSTs to a question of the door's: it is the
// door's, never the server's (handled). The answer reaches the waiting call only from the session,
// server and version the question went to, before it expires.
func (x *exchange) answerElicitation(m message) (handled bool) {
	if !strings.HasPrefix(m.id, elicitPrefix) {
		return false
	}
	k := x.session()
	el, why := x.d.elicits.take(m.id, func(el *elicitation) string {
		switch {
		case el.key != k:
			return "an answer from another session or server than the question's"
		case el.version != x.version:
			return "an answer in another protocol version than the question's"
		case !time.Now().Before(el.expires):
			return "an answer after the confirmation's time"
		}
		return ""
	})
	if el == nil {
		x.record(audit.Event{Kind: audit.KindConfirm, Verdict: audit.VerdictBlocked, Reason: why})
		return true
	}
	res := gjson.ParseBytes(m.raw).Get("result")
	a := elicitAnswer{why: "the user did not confirm it"}
	switch action := res.Get("action").String(); {
	case action == "accept" && res.Get("content.confirm").Type == gjson.True:
		a = elicitAnswer{accept: true}
	case action == "decline" || action == "cancel":
		a.why = "the user answered " + action
	case !res.Exists():
		a.why = "the client could not ask the user"
	}
	el.answer <- a
	return true
}

// elicitMessage is the elicitation/create request of a held call.
func (x *exchange) elicitMessage(id string, h *heldCall) []byte {
	params := `{"message":` + jsonString(h.res.Question+" Run it once?") +
		`,"requestedSchema":{"type":"object","properties":{"confirm":{"type":"boolean","title":"Run this call once",` +
		`"description":"promptgate holds this call until you confirm it"}},"required":["confirm"]}}`
	if x.version >= Version20251125 {
		params = `{"mode":"form",` + params[1:]
	}
	return []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"elicitation/create","params":` + params + `}`)
}

// newElicitID is a fresh elicitation id (a JSON string no one can guess).
func newElicitID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return elicitPrefix + hex.EncodeToString(b[:]) + `"`
}

// askUser puts a held call to the user over the call's own POST, an event stream, and releases or
// refuses it by the answer.
func (x *exchange) askUser(h *heldCall) {
	id := newElicitID()
	el := &elicitation{key: x.session(), version: x.version, tool: h.model, digest: h.digest,
		expires: time.Now().Add(h.ttl), answer: make(chan elicitAnswer, 1)}
	x.d.elicits.add(id, el)
	defer x.d.elicits.remove(id)
	x.w.Header().Set("Content-Type", "text/event-stream")
	x.w.Header().Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	if _, err := x.w.Write(sse.AppendEvent(nil, "message", x.elicitMessage(id, h))); err != nil {
		return
	}
	_ = rc.Flush()
	timer := time.NewTimer(h.ttl)
	defer timer.Stop()
	var a elicitAnswer
	select {
	case a = <-el.answer:
	case <-timer.C:
		a.why = "no answer within the confirmation's time"
	case <-x.ctx().Done():
		x.record(audit.Event{Kind: audit.KindConfirm, Tool: vet.DisplayName(h.model), Verdict: audit.VerdictBlocked,
			Reason: "the client went away before the user answered"})
		return
	}
	if !a.accept {
		x.record(audit.Event{Kind: audit.KindConfirm, Tool: vet.DisplayName(h.model), Verdict: audit.VerdictBlocked, Reason: a.why})
		x.writeEvent(x.refuse(h.m, h.model, h.args, a.why, "", audit.VerdictBlocked))
		return
	}
	x.record(audit.Event{Kind: audit.KindConfirm, Tool: vet.DisplayName(h.model), Verdict: audit.VerdictConfirmed,
		Reason: "confirmed by the user (MCP elicitation)"}.WithArguments(h.args, false))
	x.decided(h.model, h.args, audit.VerdictConfirmed, "confirmed by the user (MCP elicitation)", "", "")
	x.d.o.Calls.Executed(h.model, h.args, x.srv.Name)
	x.release(h.m)
}

// release sends a held message, byte for byte, to the server and relays the server's answer as
// events of the stream the door opened.
func (x *exchange) release(m message) {
	resp, done, err := x.send(http.MethodPost, m.raw, x.r.Header)
	if err != nil {
		x.log.Warn("MCP server failed", "err", err)
		x.writeEvent(errorMessage(m.id, codeInvalidRequest, err.Error()))
		return
	}
	defer done()
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case encoded(resp.Header):
		x.writeEvent(errorMessage(m.id, codeInternalError, errContentCoding.Error()))
	case ct == "text/event-stream":
		x.relayEvents(resp.Body)
	case ct == "application/json" && resp.StatusCode < 300:
		b, err := io.ReadAll(io.LimitReader(resp.Body, x.d.o.Limits.MaxBodyBytes+1))
		if err != nil || int64(len(b)) > x.d.o.Limits.MaxBodyBytes || !gjson.ValidBytes(b) {
			x.writeEvent(errorMessage(m.id, codeInvalidRequest, "mcp: the server's answer is not JSON within limits.maxBodyBytes"))
			return
		}
		x.writeEvent(x.edit(bytes.TrimSpace(b)))
	default:
		x.writeEvent(errorMessage(m.id, codeInvalidRequest, "mcp: the server answered the released call with HTTP "+resp.Status))
	}
}

// writeEvent writes one message as an event of the stream and flushes it; nil writes nothing.
func (x *exchange) writeEvent(msg []byte) {
	if msg == nil {
		return
	}
	_, _ = x.w.Write(sse.AppendEvent(nil, "message", msg))
	_ = http.NewResponseController(x.w).Flush()
}

// relayEvents relays a server's event stream into the stream the door opened, each event edited and
// flushed.
func (x *exchange) relayEvents(body io.Reader) {
	rc := http.NewResponseController(x.w)
	rd := sse.NewReaderMax(body, maxEvent)
	for {
		ev, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				x.log.Debug("MCP stream ended", "err", err)
			}
			return
		}
		out := ev.Raw
		if ev.HasData && len(bytes.TrimSpace(ev.Data)) > 0 { // a priming event carries no data
			// A last event the stream ended inside is read too (the Go SDK's client dispatches
			// it), and written whole.
			if edited := x.edit(ev.Data); ev.Truncated || !bytes.Equal(edited, ev.Data) {
				out = rewriteEvent(ev, edited)
			}
		} else if ev.Truncated {
			out = nil // nothing a client reads: no need to relay an unfinished line
		}
		if _, err := x.w.Write(out); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

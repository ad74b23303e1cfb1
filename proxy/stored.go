package proxy

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
)

// The OpenAI Responses API stores a response upstream (store defaults to true), blocked calls included:
// promptgate removed them from what the client saw, not from what OpenAI kept. Two things then go wrong
// without help: a conversation continued with previous_response_id is refused upstream, because every
// function_call of the previous response needs a function_call_output; and GET /v1/responses/{id} would show
// the client the call it was refused. The proxy therefore remembers, per response id, the calls it blocked
// (a bounded, per-instance memory), answers them on the next turn with a function_call_output that says the
// call was blocked and not run, and removes them from a retrieved stored response.

// defaultStoredResponses is how many responses with a blocked call the memory keeps (oldest forgotten first).
const defaultStoredResponses = 10000

// blockedCall is one call the proxy refused in a Responses answer.
type blockedCall struct {
	CallID, Tool, Reason string
}

// blockedMemory maps a Responses response id to the calls blocked in it. Safe for concurrent use.
type blockedMemory struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*list.Element
	order *list.List // of *memEntry, oldest at the front
}

type memEntry struct {
	id    string
	calls []blockedCall
}

func newBlockedMemory(max int) *blockedMemory {
	if max <= 0 {
		max = defaultStoredResponses
	}
	return &blockedMemory{max: max, byID: map[string]*list.Element{}, order: list.New()}
}

// remember adds a blocked call of response id. A call without an id cannot be answered and is not kept.
func (m *blockedMemory) remember(id string, c blockedCall) {
	if id == "" || c.CallID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		e := el.Value.(*memEntry)
		for _, have := range e.calls {
			if have.CallID == c.CallID {
				return
			}
		}
		e.calls = append(e.calls, c)
		return
	}
	for m.order.Len() >= m.max {
		oldest := m.order.Front()
		delete(m.byID, oldest.Value.(*memEntry).id)
		m.order.Remove(oldest)
	}
	m.byID[id] = m.order.PushBack(&memEntry{id: id, calls: []blockedCall{c}})
}

// lookup returns a copy of the calls blocked in response id, or nil.
func (m *blockedMemory) lookup(id string) []blockedCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byID[id]
	if !ok {
		return nil
	}
	return append([]blockedCall(nil), el.Value.(*memEntry).calls...)
}

// blockedOutput is the function_call_output text that answers a blocked call on the next turn.
func blockedOutput(c blockedCall) string {
	return vet.Notice(vet.Decision{Tool: c.Tool, Reason: c.Reason}) + " (the call was not run)"
}

// answerBlocked puts a function_call_output for every blocked call of the previous response that the
// request does not answer itself at the front of the request's input, so that the upstream accepts the
// continuation. A string input becomes a user message after them.
func answerBlocked(body []byte, calls []blockedCall) ([]byte, int, error) {
	input := gjson.GetBytes(body, "input")
	answered := map[string]bool{}
	if input.IsArray() {
		for _, it := range input.Array() {
			if it.Get("type").Str == "function_call_output" {
				answered[it.Get("call_id").Str] = true
			}
		}
	}
	var items []string
	for _, c := range calls {
		if answered[c.CallID] {
			continue
		}
		it, err := sjson.Set(`{"type":"function_call_output","call_id":"","output":""}`, "call_id", c.CallID)
		if err == nil {
			it, err = sjson.Set(it, "output", blockedOutput(c))
		}
		if err != nil {
			return body, 0, fmt.Errorf("proxy: answer blocked call: %w", err)
		}
		items = append(items, it)
	}
	answers := len(items)
	if answers == 0 {
		return body, 0, nil
	}
	switch {
	case !input.Exists():
	case input.Type == gjson.String:
		items = append(items, `{"role":"user","content":`+input.Raw+`}`)
	case input.IsArray():
		input.ForEach(func(_, it gjson.Result) bool {
			items = append(items, it.Raw)
			return true
		})
	default:
		return body, 0, errors.New("proxy: input is neither a string nor an array")
	}
	out, err := sjson.SetRawBytes(body, "input", []byte("["+strings.Join(items, ",")+"]"))
	if err != nil {
		return body, 0, fmt.Errorf("proxy: answer blocked calls: %w", err)
	}
	return out, answers, nil
}

// storedResponseID is the id of a GET /v1/responses/{id} request (not its sub-resources), or "".
func storedResponseID(r *http.Request) string {
	if r.Method != http.MethodGet {
		return ""
	}
	// Read as a loose upstream router might (a trailing slash, ;params, other letter case), so that no spelling
	// of a retrieval escapes the stripping.
	p := loosePath(r)
	prefix := PathResponses + "/"
	if len(p) <= len(prefix) || !strings.EqualFold(p[:len(prefix)], prefix) {
		return ""
	}
	id := p[len(prefix):]
	if strings.Contains(id, "/") {
		return ""
	}
	return id
}

// stripStored removes the calls this proxy blocked from a retrieved stored response. A streamed retrieval
// of such a response cannot be edited call by call here: it is refused (403 tool_call_blocked) rather than
// shown.
func (s *Server) stripStored(resp *http.Response, id string) error {
	calls := s.blocked.lookup(id)
	if len(calls) == 0 || resp.StatusCode != http.StatusOK {
		return nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		out := errorBody(apiError{Status: http.StatusForbidden, Code: "tool_call_blocked",
			Message: "this stored response holds a tool call that promptgate blocked; retrieve it without stream=true"})
		setBody(resp, http.StatusForbidden, out)
		return nil
	}
	body, err := readUpstream(resp)
	if err != nil {
		return err
	}
	if !gjson.ValidBytes(body) {
		return fmt.Errorf("%w: the stored response is not valid JSON", errUpstreamMalformed)
	}
	drop := map[string]bool{}
	for _, c := range calls {
		drop[c.CallID] = true
	}
	output := gjson.GetBytes(body, "output")
	if !output.IsArray() {
		setBody(resp, resp.StatusCode, body)
		return nil
	}
	var kept []string
	removed := 0
	output.ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "function_call" && drop[it.Get("call_id").Str] {
			removed++
		} else {
			kept = append(kept, it.Raw)
		}
		return true
	})
	if removed > 0 {
		if body, err = sjson.SetRawBytes(body, "output", []byte("["+strings.Join(kept, ",")+"]")); err != nil {
			return fmt.Errorf("%w: %v", errUpstreamMalformed, err)
		}
		resp.Header.Set(HeaderBlocked, strconv.Itoa(removed))
	}
	setBody(resp, resp.StatusCode, body)
	return nil
}

// setBody replaces a response's body (and status) with b, as JSON.
func setBody(resp *http.Response, status int, b []byte) {
	if status != resp.StatusCode {
		resp.StatusCode, resp.Status = status, fmt.Sprintf("%d %s", status, http.StatusText(status))
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Header.Del("Content-Encoding")
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
}

// respTrack collects what one Responses exchange needs to remember: its response id and its blocked calls.
type respTrack struct {
	mem     *blockedMemory
	mu      sync.Mutex
	id      string
	pending []blockedCall
}

func (t *respTrack) setID(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.id != "" {
		return
	}
	t.id = id
	for _, c := range t.pending {
		t.mem.remember(id, c)
	}
	t.pending = nil
}

func (t *respTrack) decision(d vet.Decision) {
	if !d.Blocked() {
		return
	}
	c := blockedCall{CallID: d.CallID, Tool: d.Tool, Reason: d.Reason}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.id == "" {
		t.pending = append(t.pending, c)
		return
	}
	t.mem.remember(t.id, c)
}

package responses

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// The OpenAI Responses API stores a response upstream (store defaults to true), blocked calls
// included: promptgate removed them from what the client saw, not from what OpenAI kept. Two things
// then go wrong without help: a conversation continued with previous_response_id is refused
// upstream, because every function_call of the previous response needs a function_call_output; and
// GET /v1/responses/{id} would show the client the call it was refused. The proxy therefore
// remembers, per response id, the calls it blocked (a bounded, per-instance memory), answers them
// on the next turn with a function_call_output that says the call was blocked and not run, and
// removes them from a retrieved stored response.
//
// A background response (POST /v1/responses with "background": true) is answered at once, queued,
// without output; its calls only appear when the app retrieves it (GET /v1/responses/{id}, or
// streamed with ?stream=true). For such a response the same memory keeps the policy of the request
// that created it, and every retrieval is vetted with that policy exactly like a synchronous answer
// (vetStored).

// defaultStoredResponses is how many responses the memory keeps (oldest forgotten first): those
// with a blocked call and background responses.
const defaultStoredResponses = 10000

// defaultBackgroundBytes bounds what the policies kept for background responses hold (tool names
// and schemas, copied out of their requests): past it, the oldest responses are forgotten first.
const defaultBackgroundBytes = 256 << 20

// blockedCall is one call the proxy refused in a Responses answer.
type blockedCall struct {
	CallID, Tool, Reason string
	// Approval: the approval request of a hosted MCP call (hosted.go), answered by a denial.
	Approval bool
}

// blockedMemory maps a Responses response id to what the proxy must remember of it: the calls
// blocked in it and, for a background response, the policy its retrievals are vetted with. Safe for
// concurrent use.
type blockedMemory struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*list.Element
	order *list.List // of *memEntry, oldest at the front
	// bytes is the size of the background policies kept; maxBytes bounds it.
	bytes, maxBytes int
	// callIDs counts, per call id, the entries that hold a blocked call of that id: an input item
	// listing drops the items of those calls whichever response lists them.
	callIDs map[string]int
	// forgotten are the ids of the latest responses whose blocked calls or background policy the
	// memory let go (for room, in entries or bytes): their retrievals are refused, never shown
	// unvetted. A client that floods the memory (many responses with a blocked call, many
	// background requests, or a few with large tool schemas) would otherwise have another's
	// response retrieved with the call promptgate blocked, or unvetted.
	forgotten *idSet
	// forgottenCalls are the call ids of the blocked calls of those responses: an input item
	// listing still drops their items.
	forgottenCalls *idSet
}

// forgottenFactor is how many forgotten response ids the memory keeps per response it remembers (an
// id is some 40 bytes).
const forgottenFactor = 10

// idSet is a set of ids bounded in count, the oldest let go first. Not safe for concurrent use.
type idSet struct {
	max   int
	ids   map[string]bool
	order *list.List // of string, oldest at the front
}

func newIDSet(max int) *idSet { return &idSet{max: max, ids: map[string]bool{}, order: list.New()} }

func (s *idSet) add(id string) {
	if s.ids[id] {
		return
	}
	s.ids[id] = true
	s.order.PushBack(id)
	for s.order.Len() > s.max {
		delete(s.ids, s.order.Remove(s.order.Front()).(string))
	}
}

type memEntry struct {
	id    string
	calls []blockedCall
	bg    *bgPolicy // nil unless the response was created in the background
	// shown is what the client was shown where a call did not reach it: a retrieval shows it again.
	shown *Shown
}

// Shown is what the client was shown of a response in which a call did not reach it (blocked, held,
// refused and answered by promptgate in continue mode, or an approval request of a hosted MCP call,
// which only promptgate answers), for a later retrieval to show again: the upstream stores the
// response as it answered it.
type Shown struct {
	// Output is the response's output array as the client was shown it.
	Output []byte
	// Usage is the usage the client was shown; kept only for a continued response, whose usage is
	// every round's, summed (the upstream stores the last round's).
	Usage []byte
	// Blocked counts the calls the client did not get, in every round; Rounds how many times the
	// response was continued.
	Blocked, Rounds int
	// Unanswered says that the approval requests of the response's last round were not answered:
	// the upstream's stored response still holds them, each shown as a notice.
	Unanswered bool
}

// size is what the memory holds of s.
func (s *Shown) size() int { return len(s.Output) + len(s.Usage) }

// bgPolicy is what a background response's retrievals are vetted with: the policy of the request
// that created it (a fresh vet.Checker is built from it per retrieval, since a Checker remembers
// the call ids it has seen) and the protocol, for the decision log. It also keeps which decisions
// were recorded, so that a response polled many times logs each call's decision once.
type bgPolicy struct {
	policy          vet.Policy
	protocol        string
	protocolVersion int
	// hosted: promptgate answers hosted MCP approval requests (vetHostedCalls); a retrieval cannot
	// continue, so they are left unanswered, each replaced by a notice.
	hosted bool
	size   int // bytes held, for the memory's bound

	mu      sync.Mutex
	decided map[string]bool
}

// newBgPolicy keeps p for a background response. The tool names and schemas are copied, so that the
// memory does not keep the whole request body they were read from.
func newBgPolicy(p vet.Policy, protocol string, protocolVersion int) *bgPolicy {
	size := 256
	allowed := make(map[string]bool, len(p.Allowed))
	for name, ok := range p.Allowed {
		allowed[strings.Clone(name)] = ok
		size += len(name) + 16
	}
	schemas := make(map[string][]byte, len(p.Schemas))
	for name, schema := range p.Schemas {
		schemas[strings.Clone(name)] = bytes.Clone(schema)
		size += len(name) + len(schema) + 16
	}
	p.Allowed, p.Schemas = allowed, schemas
	if p.Judge != nil {
		size += p.Judge.Size() // the conversation its calls are judged by
	}
	return &bgPolicy{policy: p, protocol: protocol, protocolVersion: protocolVersion, size: size}
}

// firstTime reports whether d was not recorded before for this response (and marks it recorded). A
// decision is the same when its call id, tool, verdict, reason, rule and argument bytes are; a call
// without an id is known by its place in the output.
func (b *bgPolicy) firstTime(d vet.Decision) bool {
	sum := sha256.Sum256(d.Args)
	call := d.CallID
	if call == "" {
		call = "#" + strconv.Itoa(d.Choice)
	}
	key := strings.Join([]string{call, d.Tool, d.Verdict, d.Reason, d.Rule, string(sum[:])}, "\x00")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.decided[key] {
		return false
	}
	if b.decided == nil {
		b.decided = map[string]bool{}
	}
	b.decided[key] = true
	return true
}

func newBlockedMemory(max int) *blockedMemory {
	if max <= 0 {
		max = defaultStoredResponses
	}
	return &blockedMemory{max: max, maxBytes: defaultBackgroundBytes, byID: map[string]*list.Element{}, order: list.New(),
		callIDs: map[string]int{}, forgotten: newIDSet(forgottenFactor * max), forgottenCalls: newIDSet(forgottenFactor * max)}
}

// entry returns the entry of response id, adding it (and forgetting the oldest) when there is none.
// The caller holds m.mu.
func (m *blockedMemory) entry(id string) *memEntry {
	if el, ok := m.byID[id]; ok {
		return el.Value.(*memEntry)
	}
	for m.order.Len() >= m.max {
		m.forgetOldest()
	}
	e := &memEntry{id: id}
	m.byID[id] = m.order.PushBack(e)
	return e
}

// forgetOldest drops the oldest entry. The caller holds m.mu.
func (m *blockedMemory) forgetOldest() {
	oldest := m.order.Front()
	e := oldest.Value.(*memEntry)
	if e.bg != nil {
		m.bytes -= e.bg.size
	}
	if e.bg != nil || len(e.calls) > 0 {
		m.forgotten.add(e.id)
	}
	if e.shown != nil {
		m.bytes -= e.shown.size()
	}
	for _, c := range e.calls {
		if m.callIDs[c.CallID]--; m.callIDs[c.CallID] <= 0 {
			delete(m.callIDs, c.CallID)
			m.forgottenCalls.add(c.CallID)
		}
	}
	delete(m.byID, e.id)
	m.order.Remove(oldest)
}

// remember adds a blocked call of response id. A call without an id cannot be answered and is not
// kept.
func (m *blockedMemory) remember(id string, c blockedCall) {
	if id == "" || c.CallID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(id)
	for _, have := range e.calls {
		if have.CallID == c.CallID {
			return
		}
	}
	e.calls = append(e.calls, c)
	m.callIDs[c.CallID]++
}

// blockedCallIDs reports which of ids are the call ids of calls this instance blocked.
func (m *blockedMemory) blockedCallIDs(ids []string) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out map[string]bool
	for _, id := range ids {
		if m.callIDs[id] > 0 || m.forgottenCalls.ids[id] {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// rememberBackground keeps the policy that the retrievals of background response id are vetted
// with. The first one kept for an id stays.
func (m *blockedMemory) rememberBackground(id string, p *bgPolicy) {
	if id == "" || p == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok && el.Value.(*memEntry).bg != nil {
		return
	}
	// Room for its bytes: the oldest responses go first (never the newest policy itself, whatever
	// its size).
	for m.bytes+p.size > m.maxBytes && m.order.Len() > 0 && m.order.Front().Value.(*memEntry).id != id {
		m.forgetOldest()
	}
	m.entry(id).bg = p
	m.bytes += p.size
}

// rememberShown keeps what the client was shown of response id, where a call in it did not reach
// the client. The first one kept for an id stays.
func (m *blockedMemory) rememberShown(id string, s *Shown) {
	if id == "" || s == nil || len(s.Output) == 0 {
		return
	}
	kept := &Shown{Output: bytes.Clone(s.Output), Blocked: s.Blocked, Rounds: s.Rounds, Unanswered: s.Unanswered}
	if s.Rounds > 0 && gjson.ValidBytes(s.Usage) {
		kept.Usage = bytes.Clone(s.Usage)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok && el.Value.(*memEntry).shown != nil {
		return
	}
	for m.bytes+kept.size() > m.maxBytes && m.order.Len() > 0 && m.order.Front().Value.(*memEntry).id != id {
		m.forgetOldest()
	}
	m.entry(id).shown = kept
	m.bytes += kept.size()
}

// shown returns what the client was shown of response id, or nil.
func (m *blockedMemory) shown(id string) *Shown {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		return el.Value.(*memEntry).shown
	}
	return nil
}

// forgottenResponse reports whether the memory let go of what it kept of response id: the calls
// blocked in it, or its background policy.
func (m *blockedMemory) forgottenResponse(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forgotten.ids[id]
}

// background returns the policy kept for background response id, or nil.
func (m *blockedMemory) background(id string) *bgPolicy {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		return el.Value.(*memEntry).bg
	}
	return nil
}

// lookup returns a copy of the calls blocked in response id, or nil.
func (m *blockedMemory) lookup(id string) []blockedCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byID[id]
	if !ok || len(el.Value.(*memEntry).calls) == 0 {
		return nil
	}
	return append([]blockedCall(nil), el.Value.(*memEntry).calls...)
}

// blockedOutput is the function_call_output text that answers a blocked call on the next turn.
func blockedOutput(c blockedCall) string {
	return vet.Notice(vet.Decision{Tool: c.Tool, Reason: c.Reason}) + " (the call was not run)"
}

// answerBlocked puts a function_call_output for every blocked call of the previous response that
// the request does not answer itself at the front of the request's input, so that the upstream
// accepts the continuation, and an mcp_approval_response denying every blocked approval request of
// a hosted MCP call: a client's own answer to one of those is made a denial too (the approval is
// promptgate's). A string input becomes a user message after them.
func answerBlocked(body []byte, calls []blockedCall) ([]byte, int, error) {
	input := gjson.GetBytes(body, "input")
	answered := map[string]bool{}
	denied := map[string]bool{}
	for _, c := range calls {
		denied[c.CallID] = c.Approval
	}
	var inputs []string // the input items, a client's approval of a denied request made a denial
	if input.IsArray() {
		for _, it := range input.Array() {
			raw := it.Raw
			switch it.Get("type").Str {
			case "function_call_output":
				answered[it.Get("call_id").Str] = true
			case "mcp_approval_response":
				id := it.Get("approval_request_id").Str
				answered[id] = true
				if denied[id] && it.Get("approve").Type != gjson.False {
					raw, _ = sjson.Set(raw, "approve", false)
				}
			}
			inputs = append(inputs, raw)
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
		if c.Approval {
			it = string(approvalResponse(relay.Answered{ID: c.CallID, Approval: true, Result: blockedOutput(c)}))
		}
		if err != nil {
			return body, 0, fmt.Errorf("responses: answer blocked call: %w", err)
		}
		items = append(items, it)
	}
	answers := len(items)
	overridden := input.IsArray() && !sameItems(input, inputs)
	if answers == 0 && !overridden {
		return body, 0, nil
	}
	switch {
	case !input.Exists():
	case input.Type == gjson.String:
		items = append(items, `{"role":"user","content":`+input.Raw+`}`)
	case input.IsArray():
		items = append(items, inputs...)
	default:
		return body, 0, errors.New("responses: input is neither a string nor an array")
	}
	out, err := sjson.SetRawBytes(body, "input", []byte("["+strings.Join(items, ",")+"]"))
	if err != nil {
		return body, 0, fmt.Errorf("responses: answer blocked calls: %w", err)
	}
	return out, max(answers, 1), nil
}

// sameItems reports whether the items of an input array are raw, unchanged.
func sameItems(input gjson.Result, raw []string) bool {
	i := 0
	same := true
	input.ForEach(func(_, it gjson.Result) bool {
		same = i < len(raw) && it.Raw == raw[i]
		i++
		return same
	})
	return same && i == len(raw)
}

// responsePath splits the path of a request to /v1/responses/{id}[/rest], read as a loose upstream
// router might read it (a trailing slash, ;params, other letter case), so that no spelling escapes;
// ok is false for another path.
func responsePath(r *http.Request) (id, rest string, ok bool) {
	p := surface.LoosePath(r)
	prefix := Path + "/"
	if len(p) <= len(prefix) || !strings.EqualFold(p[:len(prefix)], prefix) {
		return "", "", false
	}
	id, rest, _ = strings.Cut(p[len(prefix):], "/")
	return id, rest, id != ""
}

// storedResponseID is the id of a GET /v1/responses/{id} request (not its sub-resources), or "".
func storedResponseID(r *http.Request) string {
	if id, rest, ok := responsePath(r); ok && rest == "" && r.Method == http.MethodGet {
		return id
	}
	return ""
}

// inputItemsResponseID is the id of a GET /v1/responses/{id}/input_items request, or "".
func inputItemsResponseID(r *http.Request) string {
	if id, rest, ok := responsePath(r); ok && strings.EqualFold(rest, "input_items") && r.Method == http.MethodGet {
		return id
	}
	return ""
}

// cancelledResponseID is the id of a POST /v1/responses/{id}/cancel request, or "": its answer is
// the response object, with instructions.
func cancelledResponseID(r *http.Request) string {
	if id, rest, ok := responsePath(r); ok && rest == "cancel" && r.Method == http.MethodPost {
		return id
	}
	return ""
}

// stripStored shows a retrieved stored response as its create showed it: the calls this proxy
// blocked removed (the output the client was shown, notices included, where the memory still has
// it; for a continued response, the output of every round and their usage, summed), and the
// client's own instructions, with the create's X-Promptgate-Blocked and X-Promptgate-Continued. A
// streamed retrieval of a response with a blocked call cannot be edited call by call here: it is
// refused (403 tool_call_blocked) rather than shown; that of a continued response gets the create's
// output and usage in its terminal event.
func (s *Surface) stripStored(resp *http.Response, id string) error {
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	calls := s.blocked.lookup(id)
	shown := s.blocked.shown(id)
	instructions := s.echoes.lookup(id)
	if err := surface.PlainBody(resp); err != nil {
		return err
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		if len(calls) > 0 || shown != nil && shown.Unanswered {
			resp.Body.Close()
			msg := "this stored response holds a tool call that promptgate blocked; retrieve it without stream=true"
			if !slices.ContainsFunc(calls, func(c blockedCall) bool { return c.Reason != reasonUnanswered }) {
				msg = "this stored response holds an approval request that promptgate did not answer; retrieve it without stream=true"
			}
			surface.SetBody(resp, http.StatusForbidden, surface.ErrorJSON(msg, "permission_error", relay.CodeToolCallBlocked))
			return nil
		}
		es := newEchoStream(resp.Body, instructions)
		if shown != nil && shown.Rounds > 0 {
			es.final = shown
		}
		surface.StreamBody(resp, es)
		return nil
	}
	body, err := surface.ReadBody(resp)
	if err != nil {
		return err
	}
	if !gjson.ValidBytes(body) {
		return fmt.Errorf("%w: the stored response is not valid JSON", surface.ErrUpstreamMalformed)
	}
	if (len(calls) > 0 || shown != nil) && gjson.GetBytes(body, pathOutput).IsArray() {
		removed, rounds := len(calls), 0
		if shown != nil {
			removed, rounds = shown.Blocked, shown.Rounds
			body, err = asShown(body, "", shown)
		} else {
			drop := map[string]bool{}
			for _, c := range calls {
				drop[c.CallID] = true
			}
			body, removed, err = WithoutCalls(body, drop)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
		}
		if removed > 0 {
			resp.Header.Set(surface.HeaderBlocked, strconv.Itoa(removed))
		}
		if rounds > 0 {
			resp.Header.Set(surface.HeaderContinued, strconv.Itoa(rounds))
		}
	}
	if body, err = echoInstructions(body, "", instructions); err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	surface.SetBody(resp, resp.StatusCode, body)
	return nil
}

// asShown gives the response object at path ("" for the body itself) the output its create showed
// and, for a continued response, the usage of every round.
func asShown(body []byte, path string, s *Shown) ([]byte, error) {
	if path != "" {
		path += "."
	}
	body, err := sjson.SetRawBytes(body, path+pathOutput, s.Output)
	if err == nil && s.Usage != nil {
		body, err = sjson.SetRawBytes(body, path+pathUsage, s.Usage)
	}
	return body, err
}

// stripInputItems removes from an input item listing (GET /v1/responses/{id}/input_items) every
// item of a call this instance blocked: the call itself, where the upstream lists a chain of
// responses, and the function_call_output promptgate sent in its place on the next turn, which
// names the call's id. first_id and last_id follow the items kept; has_more is the upstream's;
// X-Promptgate-Blocked counts the calls whose items were removed.
func (s *Surface) stripInputItems(resp *http.Response) error {
	body, ok, err := surface.PassedJSON(resp, "the input item listing")
	if !ok {
		return err
	}
	data := gjson.GetBytes(body, "data")
	if !data.IsArray() {
		return fmt.Errorf("%w: the input item listing is not a JSON object with a data array", surface.ErrUpstreamMalformed)
	}
	items := data.Array()
	ids := make([]string, 0, len(items))
	for _, it := range items {
		if id := it.Get(pathCallID).Str; id != "" {
			ids = append(ids, id)
		}
	}
	blocked := s.blocked.blockedCallIDs(ids)
	if len(blocked) == 0 {
		surface.SetBody(resp, resp.StatusCode, body)
		return nil
	}
	kept := make([]string, 0, len(items))
	var first, last gjson.Result
	removed := map[string]bool{}
	for _, it := range items {
		if id := it.Get(pathCallID).Str; blocked[id] {
			removed[id] = true
			continue
		}
		if len(kept) == 0 {
			first = it.Get(pathID)
		}
		last = it.Get(pathID)
		kept = append(kept, it.Raw)
	}
	if body, err = sjson.SetRawBytes(body, "data", relay.JoinArray(kept)); err == nil && gjson.GetBytes(body, "first_id").Exists() {
		body, err = sjson.SetRawBytes(body, "first_id", rawOrNull(first))
	}
	if err == nil && gjson.GetBytes(body, "last_id").Exists() {
		body, err = sjson.SetRawBytes(body, "last_id", rawOrNull(last))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	resp.Header.Set(surface.HeaderBlocked, strconv.Itoa(len(removed)))
	surface.SetBody(resp, resp.StatusCode, body)
	return nil
}

// rawOrNull is r's JSON, or null when r does not exist.
func rawOrNull(r gjson.Result) []byte {
	if !r.Exists() {
		return []byte("null")
	}
	return []byte(r.Raw)
}

// echoCancelled gives a cancelled response (the answer of POST /v1/responses/{id}/cancel) the
// client's own instructions.
func (s *Surface) echoCancelled(resp *http.Response, id string) error {
	body, ok, err := surface.PassedJSON(resp, "the cancelled response")
	if !ok {
		return err
	}
	if body, err = echoInstructions(body, "", s.echoes.lookup(id)); err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	surface.SetBody(resp, resp.StatusCode, body)
	return nil
}

// respTrack collects what one Responses exchange needs to remember: its response id, its blocked
// calls, the output the client was shown where a call was blocked, and the client's own
// instructions.
type respTrack struct {
	mem    *blockedMemory
	echoes *instructionMemory
	// hosted: promptgate answers the approval requests of hosted MCP calls (vetHostedCalls;
	// hosted.go).
	hosted bool
	// instructions is the client's own instructions value (raw JSON, null when none).
	instructions []byte
	// bg is set for a background request: the policy kept for its response id.
	bg *bgPolicy
	// created, when set, binds each response id to the client's credential (surface.Start.Created).
	created func(id string)
	// history, when set, records the conversation for requests that continue this one: the client's
	// previous_response_id (prev) and input, and the output shown (final).
	history *historyMemory
	prev    string
	input   gjson.Result
	mu      sync.Mutex
	id      string
	pending []blockedCall
	shown   *Shown // what was shown, until the id is known
	// approved are the approval requests of hosted MCP calls of the current round that passed the
	// policy: where the round is shown unanswered, they are remembered as blocked (unanswered).
	approved []string
}

// final records what the response added to its conversation, once its output as shown is known.
func (t *respTrack) final(output []byte) {
	if t.history == nil {
		return
	}
	t.mu.Lock()
	id := t.id
	t.mu.Unlock()
	if items := turnItems(t.input, output); items != nil {
		t.history.record(id, t.prev, items)
	}
}

func (t *respTrack) setID(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.id == id:
		return
	case t.id != "":
		// A continued response (onViolation "continue"): the upstream's next answer is a response
		// of its own, the one the client continues from, and the decisions from here on are on its
		// calls.
		t.id, t.approved = id, nil
		t.bind(id)
		t.echoes.remember(id, t.instructions)
		return
	}
	t.id = id
	t.bind(id)
	t.mem.rememberBackground(id, t.bg)
	t.echoes.remember(id, t.instructions)
	for _, c := range t.pending {
		t.mem.remember(id, c)
	}
	t.mem.rememberShown(id, t.shown)
	t.pending, t.shown = nil, nil
}

// bind binds a response id to the client's credential, where the request went with a shared key.
func (t *respTrack) bind(id string) {
	if t.created != nil {
		t.created(id)
	}
}

// show keeps what the client was shown of a response in which a call did not reach it. Where the
// last round's approval requests were not answered, those that passed the policy are remembered as
// blocked too: the upstream's response still holds them, and a request that continues it must not
// have them run (promptgate denies them, and makes an app's own approval a denial).
func (t *respTrack) show(s Shown) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.Unanswered {
		for _, id := range t.approved {
			c := unansweredCall(id)
			if t.id == "" {
				t.pending = append(t.pending, c)
			} else {
				t.mem.remember(t.id, c)
			}
		}
		t.approved = nil
	}
	if t.id == "" {
		t.shown = &s
		return
	}
	t.mem.rememberShown(t.id, &s)
}

// unansweredCall is an approval request that passed the policy but that promptgate did not answer,
// as the memory keeps it: blocked.
func unansweredCall(id string) blockedCall {
	return blockedCall{CallID: id, Tool: hostedMCP, Reason: reasonUnanswered, Approval: true}
}

func (t *respTrack) decision(d vet.Decision) {
	if t.bg != nil {
		t.bg.firstTime(d) // decided here: a retrieval does not record it again
	}
	approval := t.hosted && d.Tool == hostedMCP
	t.mu.Lock()
	defer t.mu.Unlock()
	if !d.Blocked() {
		if approval && d.CallID != "" {
			t.approved = append(t.approved, d.CallID)
		}
		return
	}
	c := blockedCall{CallID: d.CallID, Tool: d.Tool, Reason: d.Reason, Approval: approval}
	if t.id == "" {
		t.pending = append(t.pending, c)
		return
	}
	t.mem.remember(t.id, c)
}

// isBackground reports whether a rewritten Responses request asks for a background response. Any
// value other than false or null counts: an upstream that reads a loose value as true must not
// leave the response unvetted.
func isBackground(body []byte) bool { return background(gjson.GetBytes(body, "background")) }

// background reports whether a request's background member v asks for a background response.
func background(v gjson.Result) bool {
	return v.Exists() && v.Type != gjson.False && v.Type != gjson.Null
}

// withholdInProgress removes from a retrieved response the call items that are still being
// generated (status in_progress): their arguments are not complete, so they are neither vetted nor
// shown until a later retrieval has them whole.
func withholdInProgress(body []byte) ([]byte, error) {
	output := gjson.GetBytes(body, "output")
	if !output.IsArray() {
		return body, nil
	}
	var kept []string
	withheld := 0
	output.ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").Str {
		case "function_call", "custom_tool_call":
			if it.Get("status").Str == "in_progress" {
				withheld++
				return true
			}
		}
		kept = append(kept, it.Raw)
		return true
	})
	if withheld == 0 {
		return body, nil
	}
	return sjson.SetRawBytes(body, "output", []byte("["+strings.Join(kept, ",")+"]"))
}

// vetStored vets a retrieval of background response id with the policy of the request that created
// it, exactly like a synchronous answer: refuse removes a blocked call (with the notice where no
// call is left), error answers 403 tool_call_blocked, audit passes it; a streamed retrieval goes
// through Stream. Each decision is recorded in the decision log once per response, not on every
// poll; a blocked call is remembered so that the next turn answers it. A retrieval that cannot be
// vetted (not JSON, an unexpected status) fails as a malformed upstream answer (502
// upstream_error).
func (s *Surface) vetStored(resp *http.Response, h surface.Host, id string, bg *bgPolicy) error {
	ctx := resp.Request.Context()
	log := h.Log(ctx)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode >= 400 {
		return surface.CheckErrorBody(resp, ct)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("%w: status %d for the retrieval of background response %s", surface.ErrUpstreamMalformed, resp.StatusCode, id)
	}
	if err := surface.PlainBody(resp); err != nil {
		return err
	}
	resp.Header.Set(surface.HeaderProtocol, bg.protocol)
	instructions := s.echoes.lookup(id)
	checker := vet.NewChecker(bg.policy)
	record := h.Recorder(ctx, bg.protocol, bg.protocolVersion)
	rec := func(d vet.Decision) {
		switch approval := bg.hosted && d.Tool == hostedMCP; {
		case d.Blocked():
			s.blocked.remember(id, blockedCall{CallID: d.CallID, Tool: d.Tool, Reason: d.Reason, Approval: approval})
		case approval: // a retrieval is never continued: the approval request is not answered
			s.blocked.remember(id, unansweredCall(d.CallID))
		}
		if bg.firstTime(d) {
			record(d)
		}
	}
	if ct == "text/event-stream" {
		st := NewStream(resp.Body, checker, rec)
		st.Instructions, st.Hosted = instructions, bg.hosted
		surface.StreamBody(resp, h.Relayed(ctx, st))
		return nil
	}
	body, err := surface.ReadBody(resp)
	if err != nil {
		return err
	}
	if !gjson.ValidBytes(body) {
		return fmt.Errorf("%w: the retrieved background response %s is not valid JSON", surface.ErrUpstreamMalformed, id)
	}
	if body, err = withholdInProgress(body); err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	vetBody := Body
	if bg.hosted {
		vetBody = hostedBody
	}
	out, res, err := vetBody(body, checker, rec)
	if err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	status := http.StatusOK
	if res.ErrorCall != nil {
		out, status = surface.BlockedErrorJSON(*res.ErrorCall), http.StatusForbidden
	} else if out, err = echoInstructions(out, "", instructions); err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	if res.Blocked > 0 {
		resp.Header.Set(surface.HeaderBlocked, strconv.Itoa(res.Blocked))
		log.Info("vetted a retrieved background response", "response_id", id, "blocked", res.Blocked)
	}
	surface.SetBody(resp, status, out)
	return nil
}

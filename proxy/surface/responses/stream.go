package responses

import (
	"bytes"
	"crypto/sha256"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
)

// Event types of the Responses stream this package reads.
const (
	evItemAdded    = "response.output_item.added"
	evItemDone     = "response.output_item.done"
	evArgsDelta    = "response.function_call_arguments.delta"
	evArgsDone     = "response.function_call_arguments.done"
	evCustomDelta  = "response.custom_tool_call_input.delta"
	evCustomDone   = "response.custom_tool_call_input.done"
	evCompleted    = "response.completed"
	evIncomplete   = "response.incomplete"
	evFailed       = "response.failed"
	evError        = "error"
	pathSeq        = "sequence_number"
	pathOutputIdx  = "output_index"
	pathItemID     = "item_id"
	pathItem       = "item"
	pathResponse   = "response"
	pathRespOutput = "response.output"
	pathRespUsage  = "response.usage"
	// pathRespInstructions is the instructions of the response an event carries.
	pathRespInstructions = "response.instructions"
)

// Stream vets a streamed Responses API answer. Read yields the upstream SSE stream with every call
// held until it is complete and vetted:
//
//   - Events of other output items (text, built-in tool items) and of the response as a whole go out byte
//     for byte as soon as they are complete. A reasoning item's events are held until the item after it is
//     known: a stateless client replays its output as the next input, and the API refuses a reasoning item
//     without the item that followed it. They go out as soon as that item is not a call, or is an allowed
//     call; a reasoning item right before a call that does not reach the client (blocked or held) is
//     withheld with it.
//   - The events of a function_call (or custom_tool_call) item — its response.output_item.added, the
//     argument deltas and .done, its response.output_item.done — are held, keyed by output_index. At the
//     item's output_item.done the call is vetted (with atomicParallelCalls: every call waits for the end of
//     the response and they are vetted together). The sources of its name, call id and arguments must agree
//     (the added item plus the deltas, the .done event, the done item), else the call is blocked
//     (ReasonChanged).
//   - An allowed call's held events are then released unchanged. On refuse a blocked call's events are
//     dropped and a message item with the notice takes its place (output_item.added, content_part.added,
//     output_text.delta, output_text.done, content_part.done, output_item.done); on error the stream ends
//     with an error event (code tool_call_blocked).
//   - With Hosted, an approval request of a hosted MCP call is held like a call and vetted as a call of
//     "mcp", but never written: promptgate answers it and the round is continued with the answers (in
//     any mode); a denial's notice takes its place at once, an approved request's notice (not run) only
//     where the round turns out not to be continued (see approval).
//   - response.completed (and .incomplete, .failed) is rewritten so that its output is what the client was
//     shown: an allowed call as streamed, a blocked call's notice item in its place; a call it holds that the
//     stream never showed is vetted there. Call items in every other response snapshot (response.created,
//     ..., any event that carries a response) are removed; any other event that carries a call item (other
//     than the item's output_item.added and .done) is dropped.
//   - output_index is renumbered where a call was released later than items after it (atomic mode), so the
//     client sees items numbered in the order they reach it; sequence_number is renumbered where events were
//     added or reordered, so it keeps increasing. Where nothing was blocked or reordered, both stay as sent.
//   - Nothing of a blocked call (item id, call id, name, argument bytes) is ever written. An event whose data
//     looks like JSON but is not one valid object with unique keys, or whose event: line names another type
//     than its data, is dropped, and every call still held fails closed. A call's argument events must carry
//     both its output_index and its item_id (clients place fragments by one or the other): one that lacks
//     either blocks the call.
//   - If the upstream ends (or fails) before a terminal event, held calls are dropped and the stream ends with
//     an error event (code upstream_stream_truncated).
//
// Read returns whatever output it has before it reads upstream again, so each event reaches a
// caller that flushes after every Read at once. A Stream is not safe for concurrent use.
type Stream struct {
	relay.Relay
	c *vet.Checker

	items   map[int]*item  // by upstream output_index
	byID    map[string]int // item id -> upstream output_index
	open    []*pending     // calls not yet vetted, in the order they started
	nextOut int            // the output_index the next item that goes out gets
	// shift is added to upstream sequence numbers; last is the last sequence number written (-1:
	// none).
	shift, last int64

	finished bool // a terminal event (or an upstream error event) went out

	// lead are the reasoning items whose follower is not known yet, in order: held until it is.
	lead []*item

	// OnResponseID, when set before the first Read, is called once with the response's id, from the
	// first event that carries it (response.created), before any call of the response is vetted.
	OnResponseID func(id string)
	sawID        bool
	// Instructions, when not nil, is the JSON value (the client's own instructions, or null) that
	// replaces the instructions of every response object an event carries.
	Instructions []byte
	// OnShown, when set before the first Read, is called with what the terminal event showed, when
	// a call of the response did not reach the client (a continued response's included): what a
	// later retrieval must show.
	OnShown func(Shown)
	// OnFinal, when set before the first Read, is called with the output of the terminal event as
	// it went out (response.completed, .incomplete or .failed).
	OnFinal func(output []byte)
	// Hosted, when set before the first Read, has promptgate answer the approval requests of hosted
	// MCP calls itself (vetHostedCalls; hosted.go): each is vetted as a call of "mcp" and never
	// reaches the client; the answers go upstream when the round is continued (SetNext).
	Hosted bool
	// In a round with approval requests (Hosted): waiting are the approved ones whose notices (not
	// run) are written only if the round turns out not to be continued; approvals counts the
	// approval requests of the round; heldCall says a function call of the round is held for
	// confirmation (such a round is not continued, as hostedBody's is not); sawApproval says a
	// round of the response had an approval request.
	waiting     []*item
	approvals   int
	heldCall    bool
	sawApproval bool

	// In continue mode (SetNext): the client's output_index and sequence numbers to go back to if
	// the round is continued (taken at its first refusal); the ids of the notice items of refused
	// calls, which the client does not keep then; the output items the client keeps of the rounds
	// continued, and their usage, summed.
	rollback      streamMark
	refusedNotice map[string]bool
	kept          []string
	roundsUsage   []byte

	// args reads the argument deltas of a held call after the first of their shape (see
	// argsTemplate), pass the events of an item that goes out as it comes (see passTemplate).
	args argsTemplate
	pass passTemplate

	// full turns every shortcut off: no template, no known text, and event reads every event's
	// keys and head with its own walks instead of taking them from the relay's check (a test's
	// reference for the shortcuts).
	full bool
}

// streamMark is where the client's numbering of a stream stands.
type streamMark struct {
	nextOut     int
	shift, last int64
}

var _ io.ReadCloser = (*Stream)(nil)

// item is one output item of the response.
type item struct {
	client int      // the output_index the client sees; -1 until the item goes out
	call   *pending // nil for an item that is not vetted
	// held are the events of a reasoning item whose follower is not known yet (reasoning is true);
	// nil once they went out or were dropped.
	held      []heldEvent
	reasoning bool
	dropped   bool // a reasoning item withheld with the blocked call after it
}

// heldEvent is an event held with what is needed to write it again.
type heldEvent struct {
	raw []byte
	m   meta
}

// pending is one call item being assembled.
type pending struct {
	relay.Pending[meta]
	oi      int    // upstream output_index
	typ     string // function_call or custom_tool_call (or an item type of refusedBuiltin)
	builtin bool   // an item of refusedBuiltin: blocked from the start, its name is the tool type
	// approval: an approval request of a hosted MCP call (Hosted), which never reaches the client;
	// label is its server_label/name, for its notice.
	approval bool
	label    string
	itemID   string
	hasArgs  bool // the arguments were given (by the added item, a delta or a .done)
	done     bool // its output_item.done arrived

	vetted   bool
	released bool
	refused  bool              // blocked in continue mode, answered by promptgate if the round is continued
	sum      [sha256.Size]byte // of the arguments, once vetted
	notice   []byte            // the notice item that took (or takes) its place
	// noticeID and noticeText are those of notice.
	noticeID, noticeText string
	// lead are the reasoning items right before the call: they go out before it, or are dropped
	// with it.
	lead []*item
}

// meta is what the stream needs of a held event to write it again.
type meta struct {
	name   string // the event: line
	seq    int64
	hasSeq bool
	oi     int
	hasOI  bool
}

// NewStream wraps an upstream SSE body. c vets the calls; rec, which may be nil, is called for
// every vetted call.
func NewStream(upstream io.ReadCloser, c *vet.Checker, rec relay.Recorder) *Stream {
	s := &Stream{c: c, items: map[int]*item{}, byID: map[string]int{}, last: -1}
	s.Relay = relay.New(upstream, rec, relay.Surface{
		Finished: func() bool { return s.finished && len(s.open) == 0 },
		Truncated: func() {
			s.end(ErrorJSON(s.last+1, "upstream stream ended before the response was complete", "server_error", relay.CodeTruncated))
		},
		Done:      s.completeAll,
		Pass:      s.passByTemplate,
		Malformed: s.malformed,
		Event:     s.event,
		MaxDepth:  maxDepth,
		Typed:     true,
		Names:     eventNames,
	})
	return s
}

// eventNames are the event types of a Responses stream that carries text and calls, the most
// frequent first (relay.Surface.Names).
var eventNames = []string{"response.output_text.delta", evArgsDelta, "response.reasoning_summary_text.delta",
	"response.created", "response.in_progress", evItemAdded, "response.content_part.added",
	"response.output_text.done", "response.content_part.done", evItemDone, evArgsDone, evCompleted,
	evCustomDelta, evCustomDone, evIncomplete, evFailed, evError}

// isCall reports whether an item type is a call the stream vets (an approval request of a hosted
// MCP call too, with Hosted).
func (s *Stream) isCall(typ string) bool { return isCall(s.c, typ) || s.Hosted && typ == typeApproval }

// malformed fails every held call: an event that a client might read differently from us was
// dropped.
func (s *Stream) malformed() {
	for _, p := range s.open {
		p.Fail(vet.ReasonMalformedStream)
	}
}

// event handles one event whose data is a valid JSON object.
func (s *Stream) event(ev sse.Event) {
	if s.argsByTemplate(ev) {
		return
	}
	data := ev.Data
	mem := s.Members() // of data, as the relay checked it
	if (s.full || mem.FoldableKey) && foldedKeys(data) {
		// A client might read a call here that this package does not see: dropped, as a malformed
		// event.
		s.malformed()
		return
	}
	h, ok := headOf(data, mem.Top)
	if !ok || s.full {
		h = readHead(data)
	}
	if s.Instructions != nil {
		if ins := h.response.Get(pathInstructions); ins.Exists() && ins.Raw != string(s.Instructions) {
			if out, err := sjson.SetRawBytes(slices.Clone(data), pathRespInstructions, s.Instructions); err == nil {
				data = s.clean(&ev, out)
				h = readHead(data)
			}
		}
	}
	typ := h.typ.String()
	if s.OnResponseID != nil && !s.sawID {
		if id := h.response.Get(pathID); id.Type == gjson.String && id.Str != "" {
			s.sawID = true
			s.OnResponseID(strings.Clone(id.Str)) // relay.Get aliases the read buffer
		}
	}
	if s.Round() > 0 && (typ == "response.created" || typ == "response.in_progress" || typ == "response.queued") {
		return // one response to the client: its created and in_progress went out in the first round
	}
	itemType := h.item.Get(pathType).String()
	if typ != evItemAdded && typ != evItemDone && s.isCall(itemType) {
		// A call item in an event that is neither its added nor its done: it cannot be vetted as a
		// call there, and no client should take it from there either. Dropped.
		return
	}
	switch typ {
	case evCompleted, evIncomplete, evFailed:
	default:
		// Any other event that carries a response snapshot (not only response.created and
		// .in_progress, also one that names an output_index or item_id) has its call items removed:
		// calls are vetted as they stream, or in the final response.
		if snap := s.snapshotOf(data, h); snap != nil {
			data = s.clean(&ev, snap)
			h = readHead(data)
		}
	}
	m := meta{name: ev.Event}
	if h.seq.Exists() {
		if n, ok := relay.IntField(h.seq); ok {
			m.seq, m.hasSeq = int64(n), true
		}
	}
	argsEvent := false // the event carries a call's argument (or input) fragment
	callItem := false  // the event carries a call item
	switch typ {
	case evArgsDelta, evArgsDone, evCustomDelta, evCustomDone:
		argsEvent = true
	case evItemAdded, evItemDone:
		callItem = s.isCall(itemType)
	}
	if h.oi.Exists() {
		m.oi, m.hasOI = relay.IntField(h.oi)
	} else if id := h.itemID; id.Type == gjson.String && !argsEvent && !callItem {
		// Only an event that adds nothing to a call is placed by its item id. Clients place a
		// call's events by output_index (the official SDKs; a Go client reads a missing one as 0)
		// or by item id: an event of a call must name both, and agree, or clients would assemble
		// different calls.
		m.oi, m.hasOI = s.byID[id.Str]
	}

	switch typ {
	case evCompleted, evIncomplete, evFailed:
		s.completeAll()
		if s.Ended {
			return
		}
		out, ok := s.finalOutput(data)
		if !ok {
			return
		}
		if typ == evCompleted && s.Continuable() && s.continueRound(data, out) {
			return
		}
		s.unanswered() // the round is not continued: the approved requests' calls do not run
		if s.Round() > 0 {
			out = s.joined(data, out)
		}
		s.release(s.lead)
		s.finished = true
		s.write(ev.Raw, out, m, -1)
		final := data
		if out != nil {
			final = out
		}
		if s.OnShown != nil && (s.Blocked() > 0 || s.sawApproval) {
			resp := gjson.GetBytes(final, pathResponse)
			s.OnShown(Shown{Output: []byte(resp.Get(pathOutput).Raw), Usage: []byte(resp.Get(pathUsage).Raw),
				Blocked: s.Blocked(), Rounds: s.Round(), Unanswered: s.approvals > 0})
		}
		if s.OnFinal != nil {
			s.OnFinal([]byte(relay.Get(final, pathRespOutput).Raw)) // one copy, not gjson's and this one
		}
		return
	case evError:
		s.dropOpen()
		s.release(s.lead)
		s.finished = true
		s.write(ev.Raw, nil, m, -1)
		return
	}
	if !m.hasOI {
		if argsEvent || callItem {
			// A call event that cannot be placed is dropped; a client might still place it
			// somewhere (by its item id, or at output_index 0), so every call still held fails
			// closed.
			for _, p := range s.open {
				p.Fail(vet.ReasonInvalidIndex)
			}
			return
		}
		s.write(ev.Raw, s.snapshotOf(data, h), m, -1)
		return
	}
	if typ == evItemAdded {
		s.itemAdded(ev, m, callItem)
		return
	}
	st := s.items[m.oi]
	switch {
	case callItem && typ == evItemDone && (st == nil || st.call == nil):
		// A call item that was never announced: it is whole in this event.
		p := s.start(m.oi, gjson.GetBytes(data, pathItem))
		p.Hold(ev.Raw, m)
		s.itemDone(p, gjson.GetBytes(data, pathItem))
	case st == nil:
		if !argsEvent {
			s.write(ev.Raw, nil, m, -1)
		}
	case st.call == nil:
		switch {
		case argsEvent || st.dropped:
		case st.held != nil:
			st.held = append(st.held, heldEvent{bytes.Clone(ev.Raw), m})
		default:
			s.write(ev.Raw, nil, m, st.client)
			// Only deltas come many to an item: a done event, which repeats the item's text, is
			// not copied into a template.
			if h.item.Type == gjson.Null && h.response.Type == gjson.Null && !s.full {
				if strings.HasSuffix(typ, ".delta") {
					s.pass.learn(ev, m)
				} else {
					s.knowText(data, mem.Top)
				}
			}
		}
	case !st.call.vetted:
		p := st.call
		switch typ {
		case evArgsDelta, evCustomDelta:
			s.argsDelta(p, data)
			p.Hold(ev.Raw, m)
			s.args.learn(ev, p, m, h)
			return
		case evArgsDone, evCustomDone:
			s.argsDone(p, data)
		case evItemDone:
			p.Hold(ev.Raw, m)
			s.itemDone(p, gjson.GetBytes(data, pathItem))
			return
		}
		p.Hold(ev.Raw, m)
	default:
		s.late(st, ev.Raw, m)
	}
}

// maxSlots bounds the slots of a template.
const maxSlots = 8

// slotsOf reads the top-level members of data, an event just read whole, into the slots of a
// template, in order: kind says of each member whether it is a slot (of which kind) or fixed (its
// bytes compared whole), and whether it may be in a template at all (ok false otherwise). seqAt and
// at are the places, among the slots Match hands out, of the sequence number and of the member
// named at (-1: none).
func slotsOf(data []byte, slots []relay.Slot, at string, kind func(k string, v gjson.Result) (sk relay.SlotKind, slot, allowed bool)) (
	_ []relay.Slot, seqAt, atAt int, ok bool) {
	ok, seqAt, atAt = true, -1, -1
	out := 0 // slots Match hands out
	relay.Get(data, "@this").ForEach(func(k, v gjson.Result) bool {
		sk, slot, allowed := kind(k.Str, v)
		switch {
		case !allowed || slot && len(slots) == maxSlots:
			ok = false
			return false
		case !slot:
			return true
		}
		var sl relay.Slot
		if sl, ok = relay.SlotOf(data, v, sk); !ok {
			return false
		}
		slots = append(slots, sl) // members come in order of their place
		if sk != relay.Plain {
			switch k.Str {
			case pathSeq:
				seqAt = out
			case at:
				atAt = out
			}
			out++
		}
		return true
	})
	return slots, seqAt, atAt, ok
}

// argsTemplate spares event the reading of a held call's argument (or input) deltas after the first
// of their shape. A delta event that was read whole, added to a call that is held, not done and
// whose item id it names rightly, and has no top-level key besides type, sequence_number (digits),
// item_id, output_index, delta and strings this package does not read (OpenAI's obfuscation
// padding, without a backslash) becomes the template. The relay hands event only valid JSON objects
// with unique keys: an event with the same event: line whose bytes are the template's but for the
// contents of delta (their end found by escapes), the digits of its sequence number and those
// unread strings (no backslash in them, so their first quote ends them) is a delta of the same type
// for the same call, which event would append and hold with that sequence number, which is all the
// template path does — while that call is still the held, unvetted call at its output_index and not
// done.
type argsTemplate struct {
	relay.Template
	p              *pending
	m              meta // the template's, its sequence number aside
	seqAt, deltaAt int  // places of the sequence number and the delta among the slots Match hands out
}

// learn makes ev, a delta that argsDelta has just added to call p and p held with m, the template
// when it has the template's shape; h is its head.
func (t *argsTemplate) learn(ev sse.Event, p *pending, m meta, h head) {
	t.p = nil
	t.Reset()
	if p.done || p.Call.Problem() != "" || !m.hasOI || !h.itemID.Exists() {
		return
	}
	var buf [maxSlots]relay.Slot
	slots, seqAt, deltaAt, ok := slotsOf(ev.Data, buf[:0], "delta", func(k string, v gjson.Result) (relay.SlotKind, bool, bool) {
		switch k {
		case pathType, pathOutputIdx:
			return 0, false, true
		case pathItemID:
			return 0, false, v.Type == gjson.String && v.Str == p.itemID
		case pathSeq:
			return relay.Digits, true, m.hasSeq
		case "delta":
			return relay.Escaped, true, true
		}
		return relay.Plain, true, !slices.Contains(respKeys, k) && strings.IndexByte(v.Raw, '\\') < 0
	})
	if !ok || deltaAt < 0 {
		return
	}
	t.Set(ev.Data, slots)
	t.p, t.m, t.seqAt, t.deltaAt = p, m, seqAt, deltaAt
}

// argsByTemplate handles ev when it matches the argument template, as event would.
func (s *Stream) argsByTemplate(ev sse.Event) bool {
	t := &s.args
	if t.p == nil || ev.Event != t.m.name || s.full {
		return false
	}
	p := t.p
	if st := s.items[t.m.oi]; st == nil || st.call != p || p.vetted || p.done {
		return false
	}
	var got [maxSlots][]byte
	m, ok := matchTemplate(&t.Template, ev.Data, got[:], t.m, t.seqAt)
	if !ok {
		return false
	}
	d := relay.Get(got[t.deltaAt], "@this")
	p.Call.AppendArgs(d.Str)
	p.hasArgs = p.hasArgs || d.Str != ""
	p.Hold(ev.Raw, m)
	return true
}

// matchTemplate matches data against t and returns m with data's sequence number (slot seqAt of
// got, when not -1).
func matchTemplate(t *relay.Template, data []byte, got [][]byte, m meta, seqAt int) (meta, bool) {
	if !t.Match(data, got) {
		return m, false
	}
	if seqAt >= 0 {
		n, ok := digitsValue(got[seqAt])
		if !ok {
			return m, false
		}
		m.seq = n
	}
	return m, true
}

// digitsValue is the value of a Digits slot, as strconv.Atoi reads it: false past 18 digits, where
// it is left to the full reading (Atoi's range).
func digitsValue(d []byte) (int64, bool) {
	if len(d) == 0 || len(d) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range d {
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// passTemplate spares event the reading of the events of an item that go out as they come (text
// deltas, a reasoning summary's) after the first of their shape. Such an event that was read whole
// and written, a delta (its type ends in .delta) with no item, response or output member, becomes
// the template; the template stays until another such event is read whole. An event with the
// same event: line whose bytes are the template's but for its top-level strings other than type and
// item_id (each a string the relay's check would accept: event reads none of them) and the digits
// of its sequence number is one the check accepts and event reads the same way, and writes as it
// comes with that sequence number, which is all the template path does — while the item at its
// output_index goes out as it comes (the conditions under which event writes it).
type passTemplate struct {
	relay.Template
	m     meta // the template's, its sequence number aside
	seqAt int
}

// learn makes ev, just written with m, the template when it has the template's shape.
func (t *passTemplate) learn(ev sse.Event, m meta) {
	t.Reset()
	if !m.hasOI {
		return
	}
	var buf [maxSlots]relay.Slot
	slots, seqAt, _, ok := slotsOf(ev.Data, buf[:0], "", func(k string, v gjson.Result) (relay.SlotKind, bool, bool) {
		switch k {
		case pathType, pathItemID, pathOutputIdx:
			return 0, false, true
		case pathItem, pathResponse, pathOutput:
			return 0, false, false
		case pathSeq:
			return relay.Digits, true, m.hasSeq
		}
		return relay.String, v.Type == gjson.String, true
	})
	if !ok {
		return
	}
	t.Set(ev.Data, slots)
	t.m, t.seqAt = m, seqAt
}

// passByTemplate handles ev when it matches the pass template, as event would, before the relay
// checks its JSON (relay.Surface.Pass): outside its string slots its bytes are the template's, an
// event the relay checked, and each slot holds a string the check accepts, so the check would
// accept it, with the keys and structure of an event that carries no call; what its slots hold (a
// text delta) is passed, never read. Argument deltas, which are read, go through argsByTemplate
// after the check.
func (s *Stream) passByTemplate(ev sse.Event) bool {
	t := &s.pass
	if t.Empty() || ev.Event != t.m.name || s.full {
		return false
	}
	st := s.items[t.m.oi]
	if st == nil || st.call != nil || st.dropped || st.held != nil {
		return false
	}
	var got [maxSlots][]byte
	m, ok := matchTemplate(&t.Template, ev.Data, got[:], t.m, t.seqAt)
	if !ok {
		return false
	}
	s.write(ev.Raw, nil, m, st.client)
	return true
}

// knowText makes the text of an event just checked and written (a message's output_text.done: a
// top-level "text" string, found where the relay's check found the members of data) the relay's
// known text (relay.Relay.Know): the content_part.done, output_item.done and response.completed
// that follow repeat it whole, and the relay's check then does not read it again.
func (s *Stream) knowText(data []byte, top []jsoncheck.Member) {
	for _, m := range top {
		if !m.KeyEscaped && string(data[m.KeyStart:m.KeyEnd]) == "text" && data[m.ValueStart] == '"' {
			s.Know(data[m.ValueStart+1 : m.ValueEnd-1])
			return
		}
	}
}

// head is what event reads of an event's top level, taken in one walk over its keys. Its strings
// alias the event's data (see relay.Get).
type head struct {
	typ, seq, oi, itemID, item, response gjson.Result
}

// readHead reads the head of data, a valid JSON object with unique keys.
func readHead(data []byte) head {
	var h head
	relay.Get(data, "@this").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathType:
			h.typ = v
		case pathSeq:
			h.seq = v
		case pathOutputIdx:
			h.oi = v
		case pathItemID:
			h.itemID = v
		case pathItem:
			h.item = v
		case pathResponse:
			h.response = v
		}
		return true
	})
	return h
}

// headOf is readHead taken from top, where the relay's check found the members of data: no walk of
// data. ok is false when a key holds an escape (readHead compares keys decoded).
func headOf(data []byte, top []jsoncheck.Member) (h head, ok bool) {
	for _, m := range top {
		if m.KeyEscaped {
			return head{}, false
		}
		var v *gjson.Result
		switch string(data[m.KeyStart:m.KeyEnd]) {
		case pathType:
			v = &h.typ
		case pathSeq:
			v = &h.seq
		case pathOutputIdx:
			v = &h.oi
		case pathItemID:
			v = &h.itemID
		case pathItem:
			v = &h.item
		case pathResponse:
			v = &h.response
		default:
			continue
		}
		*v = relay.Parse(data[m.ValueStart:m.ValueEnd])
	}
	return h, true
}

// continueRound, at the end of a round whose every call promptgate refused and can answer, asks the
// upstream again; when its next answer comes, the output the client keeps of this round is
// remembered and the next round starts, its items and sequence numbers following what the client
// has. out is the round's final output as finalOutput wrote it (nil: as the event has it).
func (s *Stream) continueRound(data, out []byte) bool {
	final := data
	if out != nil {
		final = out
	}
	resp := gjson.GetBytes(data, pathResponse)
	t := relay.Turn{Raw: []byte(resp.Get(pathOutput).Raw), ResponseID: resp.Get(pathID).String()}
	parked := s.Parking()
	if !s.EndRound(t) {
		return false
	}
	gjson.GetBytes(final, pathRespOutput).ForEach(func(_, it gjson.Result) bool {
		if !s.refusedNotice[it.Get(pathID).Str] {
			s.kept = append(s.kept, it.Raw)
		}
		return true
	})
	s.roundsUsage = relay.AddUsage(s.roundsUsage, []byte(resp.Get(pathUsage).Raw))
	s.items, s.byID, s.open, s.lead = map[int]*item{}, map[string]int{}, nil, nil
	s.refusedNotice, s.sawID = nil, false
	s.waiting, s.approvals, s.heldCall = nil, 0, false
	if parked { // the client's numbering goes back to where the parked output began
		s.nextOut, s.shift, s.last = s.rollback.nextOut, s.rollback.shift, s.rollback.last
	}
	s.c.NewRound()
	for _, n := range s.Kept() { // the held calls' notices, with their codes: the client must see them
		p := &pending{}
		s.notice(p, s.nextOut, n)
		s.nextOut++
		s.kept = append(s.kept, string(p.notice))
	}
	return true
}

// joined is a continued response's terminal event: its output after the output the client kept of
// the rounds before, and its usage added to theirs.
func (s *Stream) joined(data, out []byte) []byte {
	if out == nil {
		out = slices.Clone(data)
	}
	items := slices.Clone(s.kept)
	gjson.GetBytes(out, pathRespOutput).ForEach(func(_, it gjson.Result) bool {
		items = append(items, it.Raw)
		return true
	})
	out, _ = sjson.SetRawBytes(out, pathRespOutput, relay.JoinArray(items))
	if u := gjson.GetBytes(out, pathRespUsage); u.IsObject() {
		out, _ = sjson.SetRawBytes(out, pathRespUsage, relay.AddUsage(s.roundsUsage, []byte(u.Raw)))
	}
	return out
}

// refuse settles a call blocked in continue mode that promptgate can answer itself: the client's
// numbering is kept to go back to, should the round be continued.
func (s *Stream) refuse(p *pending, d vet.Decision) {
	if !s.Parking() {
		s.rollback = streamMark{nextOut: s.nextOut, shift: s.shift, last: s.last}
	}
	p.refused = true
	s.Refuse(relay.Answer(p.Call, d, p.typ == typeCustomTool))
}

// approval settles an approval request of a hosted MCP call, vetted as a call of "mcp" (Hosted):
// promptgate answers it, approve where it passed and deny with the refusal otherwise, and the
// answer goes upstream when the round is continued. The client never gets the request, and what
// follows it is not held back: a denied request's notice takes its place at once (written again
// at the start of the next round if it was parked with a refused call's); an approved one's notice
// (not run) only once the round turns out not to be continued — at once where that is known
// already, else when the round is spoiled or ends (unanswered).
func (s *Stream) approval(p *pending, d vet.Decision) {
	s.approvals++
	s.sawApproval = true
	if s.heldCall {
		s.spoil() // a held call of the turn: the turn is not continued, as hostedBody's is not
	}
	drop(p.lead)
	a := approvalAnswer(p.Call, d)
	st := s.items[p.oi]
	if !d.Blocked() {
		s.prepareNotice(p, unansweredNotice(p.label), true)
		if s.Reply(a) {
			s.waiting = append(s.waiting, st)
			return
		}
	} else {
		parked := s.Parking()
		a.Notice = ""
		if parked {
			a.Notice = approvalNotice(d, p.label)
		}
		s.Reply(a)
		s.prepareNotice(p, approvalNotice(d, p.label), parked)
	}
	st.client = s.nextOut
	s.nextOut++
	s.writeNotice(p, st.client)
}

// spoil says that the round cannot be continued (relay.Spoil): what was parked goes out, and the
// approved requests that waited for the round's end are shown as not run.
func (s *Stream) spoil() {
	s.Spoil()
	s.unanswered()
}

// unanswered writes the notices of the approved approval requests of the round that wait, in
// order: the round is not continued, so they are not answered and their calls do not run.
func (s *Stream) unanswered() {
	for _, st := range s.waiting {
		st.client = s.nextOut
		s.nextOut++
		s.writeNotice(st.call, st.client)
	}
	s.waiting = nil
}

// answerable reports whether promptgate may answer a call of the stream itself: a function or
// custom tool call (a built-in tool's item is not answered by a function output), blocked and with
// an id.
func (s *Stream) answerable(p *pending, d vet.Decision) bool {
	return !p.builtin && (p.typ == typeFunction || p.typ == typeCustomTool) && relay.Answerable(s.c, p.Call, d)
}

// itemAdded starts an output item: a call is held, any other item goes out with the next
// output_index.
func (s *Stream) itemAdded(ev sse.Event, m meta, callItem bool) {
	if old := s.items[m.oi]; old != nil && old.call != nil && !old.call.vetted {
		// A new item at the place of a call that did not finish.
		old.call.Call.Fail(ReasonIncomplete)
		s.complete([]*pending{old.call})
		if s.Ended {
			return
		}
	}
	it := gjson.GetBytes(ev.Data, pathItem)
	if callItem {
		p := s.start(m.oi, it)
		p.lead, s.lead = s.lead, nil
		p.Hold(ev.Raw, m)
		return
	}
	st := &item{client: -1}
	s.items[m.oi] = st
	if id := it.Get(pathID); id.Type == gjson.String {
		s.byID[id.Str] = m.oi
	}
	if it.Get(pathType).Str == typeReasoning {
		// Its follower decides whether it goes out: held until that is known.
		st.reasoning = true
		st.held = []heldEvent{{bytes.Clone(ev.Raw), m}}
		s.lead = append(s.lead, st)
		return
	}
	s.release(s.lead)
	s.lead = nil
	st.client = s.nextOut
	s.nextOut++
	s.write(ev.Raw, nil, m, st.client)
}

// release writes the held events of reasoning items whose follower went out (or that have none), in
// order.
func (s *Stream) release(lead []*item) {
	for _, st := range lead {
		if st.dropped || st.client >= 0 {
			continue
		}
		st.client = s.nextOut
		s.nextOut++
		for _, h := range st.held {
			s.write(h.raw, nil, h.m, st.client)
		}
		st.held = nil
	}
}

// drop withholds reasoning items with the blocked call that followed them: their events never go
// out.
func drop(lead []*item) {
	for _, st := range lead {
		if st.client < 0 {
			st.dropped, st.held = true, nil
		}
	}
}

// start begins a call at an output_index from its first item.
func (s *Stream) start(oi int, it gjson.Result) *pending {
	typ := it.Get(pathType).Str
	p := &pending{Pending: relay.Pending[meta]{Call: &vet.Call{Index: oi}, Stream: s.Held()}, oi: oi, typ: typ}
	if id := it.Get(pathID); id.Type == gjson.String {
		p.itemID = id.Str
		s.byID[id.Str] = oi
	}
	if id := it.Get(pathCallID); id.Type == gjson.String {
		p.Call.ID = id.Str
	}
	s.items[oi] = &item{client: -1, call: p}
	s.open = append(s.open, p)
	if s.Hosted && typ == typeApproval {
		p.approval, p.Call, p.label = true, approvalCall(oi, it), serverLabel(it)
		p.hasArgs = len(p.Call.Args) > 0
		return p
	}
	if tool := refusedBuiltin(s.c, typ); tool != "" {
		p.builtin = true
		p.Call.AddName(tool)
		p.Call.Fail(vet.ReasonNotAllowed)
		return p
	}
	if name := it.Get(pathName); name.Type == gjson.String {
		p.Call.AddName(name.Str)
	}
	if typ != typeFunction { // custom_tool_call, or a case variant of a call type
		p.Call.Fail(vet.ReasonUnsupportedType)
	}
	switch args := it.Get(pathArguments); {
	case args.Type == gjson.String:
		p.Call.AppendArgs(args.Str)
		p.hasArgs = args.Str != ""
	case args.Exists() && args.Type != gjson.Null:
		p.Call.Fail(vet.ReasonNotString)
	}
	return p
}

// argsDelta appends an argument fragment.
func (s *Stream) argsDelta(p *pending, data []byte) {
	if p.done {
		p.Call.Fail(ReasonChanged)
		return
	}
	s.sameItem(p, data)
	switch d := gjson.GetBytes(data, "delta"); {
	case d.Type == gjson.String:
		p.Call.AppendArgs(d.Str)
		p.hasArgs = p.hasArgs || d.Str != ""
	default:
		p.Call.Fail(vet.ReasonNotString)
	}
}

// argsDone checks the final arguments (and name, where given) against what was assembled.
func (s *Stream) argsDone(p *pending, data []byte) {
	s.sameItem(p, data)
	if p.typ == typeFunction {
		s.sameArgs(p, gjson.GetBytes(data, pathArguments))
	}
	s.sameName(p, gjson.GetBytes(data, pathName))
}

// itemDone checks the finished item against what was assembled and, unless the calls of the
// response are vetted together, vets the call.
func (s *Stream) itemDone(p *pending, it gjson.Result) {
	if p.done || it.Get(pathType).String() != p.typ {
		p.Call.Fail(ReasonChanged)
	}
	p.done = true
	if id := it.Get(pathID); id.Exists() && (id.Type != gjson.String || id.Str != p.itemID) {
		p.Call.Fail(ReasonChanged)
	}
	// The finished item is what many clients keep: it must be the whole call, as assembled. An
	// approval request is known by its item id, and is what the upstream runs once approved.
	if id := it.Get(pathCallID); !p.approval && (id.Type != gjson.String || id.Str != p.Call.ID) {
		p.Call.Fail(ReasonChanged)
	}
	switch name := it.Get(pathName); {
	case p.builtin:
	case p.approval:
		if serverLabel(it) != p.label {
			p.Call.Fail(ReasonChanged)
		}
	case name.Exists():
		s.sameName(p, name)
	default:
		p.Call.Fail(ReasonChanged)
	}
	if p.typ == typeFunction || p.approval {
		if args := it.Get(pathArguments); args.Exists() {
			s.sameArgs(p, args)
		} else if !p.approval {
			p.Call.Fail(ReasonChanged)
		}
	}
	if !s.c.Atomic() {
		s.complete([]*pending{p})
	}
}

// sameItem checks the item_id of an argument event against the call's item id. It must be there
// when the call's item has an id: a client that places events by item id would not add a fragment
// without one.
func (s *Stream) sameItem(p *pending, data []byte) {
	id := gjson.GetBytes(data, pathItemID)
	switch {
	case !id.Exists():
		if p.itemID != "" {
			p.Call.Fail(ReasonChanged)
		}
	case id.Type != gjson.String || id.Str != p.itemID:
		p.Call.Fail(ReasonChanged)
	}
}

func (s *Stream) sameName(p *pending, name gjson.Result) {
	switch {
	case !name.Exists():
	case name.Type != gjson.String:
		p.Call.Fail(ReasonChanged)
	case name.Str != p.Call.Name:
		// Also a name that the added item did not have: a client reading that item has no name for
		// the call.
		p.Call.Fail(vet.ReasonNameChanged)
	}
}

// sameArgs compares a final arguments field with the assembled arguments; when none were assembled,
// the final ones are taken.
func (s *Stream) sameArgs(p *pending, args gjson.Result) {
	switch {
	case !args.Exists():
	case args.Type != gjson.String:
		p.Call.Fail(vet.ReasonNotString)
	case !p.hasArgs && len(p.Call.Args) == 0:
		p.Call.AppendArgs(args.Str)
		p.hasArgs = args.Str != ""
	case args.Str != string(p.Call.Args):
		p.Call.Fail(ReasonChanged)
	}
}

// completeAll vets every open call, at the end of the response: a call that did not finish is
// blocked.
func (s *Stream) completeAll() {
	if len(s.open) == 0 {
		return
	}
	for _, p := range s.open {
		if !p.done {
			p.Call.Fail(ReasonIncomplete)
		}
	}
	s.complete(slices.Clone(s.open))
}

// complete vets calls together, then releases or replaces each.
func (s *Stream) complete(ps []*pending) {
	s.open = slices.DeleteFunc(s.open, func(p *pending) bool { return slices.Contains(ps, p) })
	relay.Settle[meta](&s.Relay, s.c, ps, s.fatal, func(p *pending, d vet.Decision) {
		p.vetted = true
		p.sum = sha256.Sum256(p.Call.Args)
		if p.approval {
			s.approval(p, d)
			return
		}
		held := s.Hosted && d.Verdict == vet.VerdictHeld
		if s.answerable(p, d) && !(held && s.approvals > 0) {
			s.refuse(p, d)
		} else {
			s.spoil()
		}
		s.heldCall = s.heldCall || held
		if d.Blocked() {
			drop(p.lead)
		} else {
			s.release(p.lead)
		}
		st := s.items[p.oi]
		st.client = s.nextOut
		s.nextOut++
		if !d.Blocked() {
			p.released = true
			for j, raw := range p.Call.Held() {
				s.write(raw, nil, p.Meta[j], st.client)
			}
		} else {
			s.notice(p, st.client, vet.Notice(d))
		}
	})
}

// notice writes the events of a message item with the notice at output_index oi.
func (s *Stream) notice(p *pending, oi int, text string) {
	s.prepareNotice(p, text, p.refused)
	s.writeNotice(p, oi)
}

// prepareNotice makes the message item with the notice that takes p's place; with dropped, the
// client does not keep it when the round is continued.
func (s *Stream) prepareNotice(p *pending, text string, dropped bool) {
	p.noticeID, p.noticeText = newNoticeID(), text
	p.notice = noticeItem(p.noticeID, text, true)
	if dropped {
		if s.refusedNotice == nil {
			s.refusedNotice = map[string]bool{}
		}
		s.refusedNotice[p.noticeID] = true
	}
}

// writeNotice writes the events of p's notice item at output_index oi.
func (s *Stream) writeNotice(p *pending, oi int) {
	text := p.noticeText
	q, qid := assembly.AppendJSONString(nil, text), assembly.AppendJSONString(nil, p.noticeID)
	// Each event as the API writes it, keys in its order: type, sequence_number, item_id,
	// output_index, ...
	ev := func(name string, withID bool, rest ...[]byte) {
		s.last++
		d := make([]byte, 0, 160+len(q)+len(p.notice))
		d = append(append(append(d, `{"type":"`...), name...), `","sequence_number":`...)
		d = strconv.AppendInt(d, s.last, 10)
		if withID {
			d = append(append(d, `,"item_id":`...), qid...)
		}
		d = strconv.AppendInt(append(d, `,"output_index":`...), int64(oi), 10)
		for _, r := range rest {
			d = append(d, r...)
		}
		s.Out = sse.AppendEvent(s.Out, name, append(d, '}'))
	}
	ev(evItemAdded, false, []byte(`,"item":`), noticeItem(p.noticeID, text, false))
	ev("response.content_part.added", true, []byte(`,"content_index":0,"part":`), textPart(""))
	ev("response.output_text.delta", true, []byte(`,"content_index":0,"delta":`), q, []byte(`,"logprobs":[]`))
	ev("response.output_text.done", true, []byte(`,"content_index":0,"text":`), q, []byte(`,"logprobs":[]`))
	ev("response.content_part.done", true, []byte(`,"content_index":0,"part":`), textPart(text))
	ev(evItemDone, false, []byte(`,"item":`), p.notice)
}

// late handles an event for a call that was already vetted. A blocked call's events are dropped
// quietly. A released call cannot take back what the client has: its late events are dropped and
// recorded (in error mode the stream ends; in audit mode they are passed on).
func (s *Stream) late(st *item, raw []byte, m meta) {
	if !st.call.released {
		return
	}
	switch d := s.AfterRelease(s.c, st.call.Call); {
	case !d.Blocked():
		s.write(raw, nil, m, st.client)
	case s.c.Mode() == vet.ModeError:
		s.end(blockedJSON(s.last+1, d))
	}
}

// finalOutput rewrites the output of a terminal event to what the client was shown, in the client's
// order: a call the stream vetted as it was streamed, a blocked one's notice item in its place, and
// a call the stream never showed vetted now; a reasoning item withheld with a blocked call is left
// out (also one that only now turns out to precede a blocked call). ok is false when the stream
// ended (error mode).
func (s *Stream) finalOutput(data []byte) (out []byte, ok bool) {
	output := gjson.GetBytes(data, pathRespOutput)
	if !output.IsArray() {
		if len(s.waiting) > 0 {
			s.spoil() // what the upstream keeps of the approved requests is not known: not answered
		}
		return nil, true
	}
	type entry struct {
		client int // the client's output_index; -1 for an entry the stream did not show
		raw    string
		gone   bool
	}
	items := output.Array()
	entries := make([]entry, len(items))
	var fresh []*vet.Call
	var freshAt []int // position of each fresh call
	changed := false
	found := map[*item]bool{} // approved requests of the round found here as they were answered
	for pos, it := range items {
		e := &entries[pos]
		e.client, e.raw = -1, it.Raw
		st := s.items[pos]
		call := itemCall(s.c, pos, it)
		if s.Hosted && it.Get(pathType).Str == typeApproval {
			call = approvalCall(pos, it)
		}
		if call != nil {
			if st != nil && st.call != nil && st.call.vetted {
				p := st.call
				switch {
				case p.released && p.matches(it, true):
					e.client = st.client
					continue
				case !p.released && p.matches(it, false):
					if p.approval && p.matches(it, true) && slices.Contains(s.waiting, st) {
						found[st] = true
					}
					// The blocked call: its notice item (if it had one) takes its place here too.
					if p.notice != nil {
						e.client, e.raw = st.client, string(p.notice)
					} else {
						e.gone = true
					}
					changed = true
					continue
				}
			}
			fresh = append(fresh, call)
			freshAt = append(freshAt, pos)
			continue
		}
		switch {
		case st == nil || st.call != nil:
		case st.dropped:
			e.gone, changed = true, true
		case st.client >= 0:
			e.client = st.client
			changed = changed || st.client != pos
		}
	}
	if len(found) < len(s.waiting) {
		// An approved request that the response the upstream keeps lacks, or holds otherwise: it
		// would run as kept, not as vetted. Not answered.
		s.spoil()
	}
	if len(fresh) > 0 {
		ds := s.c.VetBatch(fresh)
		s.spoil() // calls the stream never showed are not answered by promptgate: the round is not continued
		if culprit := relay.Culprit(s.c, ds); culprit >= 0 {
			for _, d := range ds {
				s.Record(d)
			}
			s.fatal(ds[culprit])
			return nil, false
		}
		for i, d := range ds {
			s.Record(d)
			pos := freshAt[i]
			approval := s.Hosted && items[pos].Get(pathType).Str == typeApproval
			if !d.Blocked() && !approval {
				continue
			}
			text := vet.Notice(d)
			if approval { // never shown; not answered, as the round is not continued
				s.approvals++
				s.sawApproval = true
				text = approvalNotice(d, serverLabel(items[pos]))
				if !d.Blocked() {
					text = unansweredNotice(serverLabel(items[pos]))
				}
			}
			entries[pos].raw = string(noticeItem(newNoticeID(), text, true))
			changed = true
			// The reasoning right before it goes with it, if the client has not been shown it yet.
			for j := pos - 1; j >= 0 && items[j].Get(pathType).Str == typeReasoning; j-- {
				if st := s.items[j]; st == nil || st.client < 0 {
					if st != nil {
						drop([]*item{st})
					}
					entries[j].gone = true
				}
			}
		}
	}
	if !changed {
		last := -1
		for _, e := range entries {
			if e.client >= 0 {
				changed = changed || e.client < last
				last = e.client
			}
		}
	}
	if !changed {
		return nil, true
	}
	// Entries the client was shown in its order, then the others in the upstream's.
	var known, rest []entry
	for _, e := range entries {
		switch {
		case e.gone:
		case e.client >= 0:
			known = append(known, e)
		default:
			rest = append(rest, e)
		}
	}
	slices.SortStableFunc(known, func(a, b entry) int { return a.client - b.client })
	raws := make([]string, 0, len(known)+len(rest))
	for _, e := range append(known, rest...) {
		raws = append(raws, e.raw)
	}
	out, err := sjson.SetRawBytes(slices.Clone(data), pathRespOutput, relay.JoinArray(raws))
	if err != nil {
		return nil, true
	}
	return out, true
}

// matches reports whether an output entry is the item of the call (same type, item id and call id)
// and, with exact, the call as it was vetted (same name and arguments too).
func (p *pending) matches(entry gjson.Result, exact bool) bool {
	str := func(path, want string) bool {
		v := entry.Get(path)
		return v.Type == gjson.String && v.Str == want
	}
	// An approval request is known by its item id (its call's id); a call by its call_id.
	if !str(pathType, p.typ) || (!p.builtin || p.Call.ID != "") && p.typ != typeApproval && !str(pathCallID, p.Call.ID) {
		return false
	}
	if id := entry.Get(pathID); (id.Exists() || p.approval && p.itemID != "") && !str(pathID, p.itemID) {
		return false
	}
	if !exact {
		return true
	}
	if p.approval { // the request as it was answered: its server, tool and arguments
		args := entry.Get(pathArguments)
		return serverLabel(entry) == p.label && (args.Type == gjson.String || !args.Exists()) &&
			sha256.Sum256([]byte(args.Str)) == p.sum
	}
	if p.builtin {
		return false // never released
	}
	if !str(pathName, p.Call.Name) {
		return false
	}
	if p.typ == typeFunction {
		args := entry.Get(pathArguments)
		return args.Type == gjson.String && sha256.Sum256([]byte(args.Str)) == p.sum
	}
	return true
}

// clean replaces the data of ev by data (its raw bytes too) and returns data.
func (s *Stream) clean(ev *sse.Event, data []byte) []byte {
	ev.Data = data
	ev.Raw = sse.AppendEvent(nil, ev.Event, data)
	return data
}

// snapshotOf is snapshot of data whose head is h: nil at once when data has no response member,
// whose output snapshot would look for.
func (s *Stream) snapshotOf(data []byte, h head) []byte {
	if !h.response.Exists() && !s.full {
		return nil
	}
	return s.snapshot(data)
}

// snapshot removes call items from the output of a response snapshot that is not final
// (response.created, response.in_progress, ...): its calls are vetted when they stream, or in the
// final response. It returns nil when there is nothing to change.
func (s *Stream) snapshot(data []byte) []byte {
	// Call types in any case (see vetted), or spelt with escapes.
	if !relay.ContainsFold(data, "_call") && !relay.ContainsFold(data, "_reque") && !bytes.Contains(data, []byte(`\u`)) {
		return nil
	}
	output := gjson.GetBytes(data, pathRespOutput)
	if !output.IsArray() {
		return nil
	}
	var kept []string
	changed := false
	output.ForEach(func(_, entry gjson.Result) bool {
		if s.isCall(entry.Get(pathType).String()) {
			changed = true
			return true
		}
		kept = append(kept, entry.Raw)
		return true
	})
	if !changed {
		return nil
	}
	out, err := sjson.SetRawBytes(slices.Clone(data), pathRespOutput, relay.JoinArray(kept))
	if err != nil {
		return nil
	}
	return out
}

// write puts an event out: byte for byte when its sequence number and output_index stay, else
// rewritten. data, when not nil, replaces the event's data. oi is the output_index the client sees
// (-1: as sent).
func (s *Stream) write(raw, data []byte, m meta, oi int) {
	seq := m.seq
	if m.hasSeq {
		seq = max(m.seq+s.shift, s.last+1)
		s.shift = seq - m.seq
		s.last = seq
	}
	reseq := m.hasSeq && seq != m.seq
	reindex := m.hasOI && oi >= 0 && oi != m.oi
	if data == nil && !reseq && !reindex {
		s.Out = append(s.Out, raw...)
		return
	}
	if data == nil {
		ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
		if err != nil {
			return // cannot happen: held and live events are whole
		}
		data = slices.Clone(ev.Data)
	}
	if reseq {
		data, _ = sjson.SetBytes(data, pathSeq, seq)
	}
	if reindex {
		data, _ = sjson.SetBytes(data, pathOutputIdx, oi)
	}
	s.Out = sse.AppendEvent(s.Out, m.name, data)
}

// fatal ends the stream with the error of a call blocked in error mode.
func (s *Stream) fatal(culprit vet.Decision) {
	s.end(blockedJSON(s.last+1, culprit))
}

// dropOpen lets go of every open call without vetting it (the upstream failed).
func (s *Stream) dropOpen() {
	for _, p := range s.open {
		p.Drop()
		p.vetted = true // what comes for it later is dropped
	}
	s.open = nil
}

// end writes a final error event and stops reading upstream.
func (s *Stream) end(errJSON []byte) {
	s.dropOpen()
	s.last++
	s.Out = sse.AppendEvent(s.Out, evError, errJSON)
	s.Ended = true
}

// blockedJSON is the error event for a call blocked in error mode.
func blockedJSON(seq int64, d vet.Decision) []byte {
	return ErrorJSON(seq, vet.Notice(d), "permission_error", relay.CodeToolCallBlocked)
}

package chat

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
	"github.com/promptgate/promptgate/proxy/surface"
)

// maxEventDepth caps the nesting of response JSON (bodies and stream events).
const maxEventDepth = 128

// Stream vets a streamed Chat Completions response. Read yields the upstream SSE stream with
// every tool call held until it is complete and vetted:
//
//   - An event without tool-call deltas (text, role, refusal, logprobs, usage, comments) is
//     forwarded byte-for-byte as soon as it is complete.
//   - A tool call's own deltas (choices[i].delta.tool_calls[j], and delta.function_call) are held,
//     keyed by (choice, index, id): a new id at an index in use starts a new call. A call is
//     complete when the next call starts in its choice, when its choice's finish_reason arrives,
//     or at [DONE]. With atomicParallelCalls every call of a choice waits for the finish_reason.
//   - An allowed call's held events are then released unchanged, in order, except that the
//     index of a tool call is renumbered where needed so that the client sees the released
//     calls of a choice as 0, 1, 2, ... (no gap where a call was blocked, no index shared by
//     two calls). On refuse a blocked call's events are dropped and one content delta with the
//     notice takes their place; on error the stream ends with an error event (code
//     tool_call_blocked) and no [DONE]. finish_reason "tool_calls" (or "function_call") becomes
//     "stop" in a choice none of whose calls was released.
//   - An event that mixes text and tool-call deltas is split: a copy without the tool-call
//     deltas goes out at once, each tool-call delta is held as an event of its own.
//   - Nothing of a blocked call (id, name, argument bytes) is ever written. An event whose data
//     looks like JSON but is not one valid object with unique keys is dropped, and every call
//     still held fails closed; other non-JSON data passes through.
//   - If the upstream ends (or fails) before [DONE], held calls are dropped and the stream ends
//     with an error event (code upstream_stream_truncated) — unless it ended cleanly after a
//     finish_reason with nothing held, which some servers do instead of sending [DONE].
//
// Read returns whatever output it has before it reads upstream again, so each event reaches a
// caller that flushes after every Read at once. A Stream is not safe for concurrent use.
type Stream struct {
	relay.Relay
	c *vet.Checker

	choices map[int]*choiceState
	// held counts the calls open in all choices (holding reads it on every event: no walk of
	// choices).
	held int
	// finished is set once a choice's finish_reason has arrived; a clean EOF after it ends the
	// stream quietly (no [DONE] is invented, no truncation error written).
	finished bool
	// tpl lets noteText skip the events that can only mark choices already marked.
	tpl textTemplate
	// args lets event skip the reading of a call's argument deltas that differ from an earlier one
	// only in the arguments' text.
	args argsTemplate

	// In continue mode (SetNext): the first round's id and created, which the chunks of the next
	// rounds carry too (one completion to the client); the round's text and usage, for the turn
	// promptgate answers; the usage of the rounds continued, summed into the last round's.
	firstID, firstCreated []byte
	roundText             []byte
	roundUsage, usage     []byte

	// OnID, when set before the first Read, is called with each id the upstream's chunks carry
	// (each round's completion), when it first appears and before any event that carries it goes
	// out.
	OnID   func(id string)
	lastID string
}

var _ io.ReadCloser = (*Stream)(nil)

// choiceState is what the stream remembers of one choice.
type choiceState struct {
	open     []*pending       // calls not yet vetted, in the order they started
	cur      map[int]*pending // the latest call at each tool index; legacyIndex for function_call
	released bool             // a call of this choice was released
	next     int              // the index the next released tool call gets
	text     bool             // non-empty content went out in this choice
}

// legacyIndex is the key of a choice's function_call.
const legacyIndex = -1 << 31

// pending is one call being assembled; its Meta is the index each held delta carries (0 when it has
// none).
type pending struct {
	relay.Pending[int]
	tmpl   []byte // data of the call's first event, the template for its notice
	done   bool   // vetted
	out    bool   // released
	client int    // the index the client sees, once released
}

// NewStream wraps an upstream SSE body. c vets the calls; rec, which may be nil, is called for
// every vetted call.
func NewStream(upstream io.ReadCloser, c *vet.Checker, rec relay.Recorder) *Stream {
	s := &Stream{c: c, choices: map[int]*choiceState{}}
	s.Relay = relay.New(upstream, rec, relay.Surface{
		// Some servers close after the last finish_reason without sending [DONE]: nothing is lost.
		Finished: func() bool { return s.finished && !s.holding() },
		// The upstream ended (or broke) before [DONE]: held calls are not released.
		Truncated: func() {
			s.end(surface.ErrorJSON("upstream stream ended before [DONE]", "server_error", relay.CodeTruncated))
		},
		Done: s.finishAll,
		Observe: func(data []byte) {
			if s.OnID != nil {
				s.noteID(data)
			}
			s.noteFinish(data)
			if s.Continuing() {
				s.noteRound(data)
			}
		},
		Pass: func(ev sse.Event) bool {
			if s.Round() > 0 {
				ev = s.asFirst(ev)
			}
			return s.pass(ev)
		},
		Malformed: s.malformed,
		Event: func(ev sse.Event) {
			if s.Round() > 0 {
				ev = s.asFirst(ev)
			}
			s.event(ev)
		},
		MaxDepth: maxEventDepth,
		End:      s.endRound,
	})
	return s
}

// noteID tells OnID of an id the first time a chunk carries it.
func (s *Stream) noteID(data []byte) {
	if id := gjson.GetBytes(data, pathID); id.Type == gjson.String && id.Str != s.lastID {
		s.lastID = id.Str
		s.OnID(id.Str)
	}
}

// noteRound remembers, in continue mode, the first round's id and created, and the round's text (of
// choice
// 0) and usage.
func (s *Stream) noteRound(data []byte) {
	root := gjson.ParseBytes(data)
	if s.firstID == nil {
		if id := root.Get(pathID); id.Type == gjson.String {
			s.firstID, s.firstCreated = []byte(id.Raw), []byte(root.Get("created").Raw)
		}
	}
	if u := root.Get("usage"); u.IsObject() {
		s.roundUsage = []byte(u.Raw)
	}
	root.Get(pathChoices).ForEach(func(_, c gjson.Result) bool {
		if c.Get(pathIndex).Raw == "0" {
			if t := c.Get(pathDelta + "." + pathContent); t.Type == gjson.String {
				s.roundText = append(s.roundText, t.Str...)
			}
		}
		return true
	})
}

// asFirst gives an event of a continued round the first round's id and created, and its usage the
// rounds' before it added.
func (s *Stream) asFirst(ev sse.Event) sse.Event {
	if !bytes.HasPrefix(bytes.TrimSpace(ev.Data), []byte("{")) {
		return ev
	}
	root := gjson.ParseBytes(ev.Data)
	data := ev.Data
	changed := false
	set := func(path string, want []byte) {
		if v := root.Get(path); v.Exists() && want != nil && v.Raw != string(want) {
			data, _ = sjson.SetRawBytes(slices.Clone(data), path, want)
			changed = true
		}
	}
	set(pathID, s.firstID)
	set("created", s.firstCreated)
	if u := root.Get("usage"); u.IsObject() && s.usage != nil {
		set("usage", relay.AddUsage(s.usage, []byte(u.Raw)))
	}
	if !changed {
		return ev
	}
	ev.Data = data
	ev.Raw = sse.AppendData(nil, data)
	return ev
}

// endRound, at the clean end of a round, continues the stream when promptgate answered every call
// of the round itself (onViolation "continue"); the next round starts with the choices' text marks
// kept.
func (s *Stream) endRound() bool {
	if !s.EndRound(relay.Turn{Text: string(s.roundText)}) {
		return false
	}
	s.usage = relay.AddUsage(s.usage, s.roundUsage)
	s.roundText, s.roundUsage = s.roundText[:0], nil
	fresh := map[int]*choiceState{}
	for k, ch := range s.choices {
		fresh[k] = &choiceState{cur: map[int]*pending{}, text: ch.text}
	}
	s.choices, s.finished = fresh, false
	s.c.NewRound()
	for _, n := range s.Kept() {
		s.noticeText(0, s.choice(0), nil, n)
	}
	return true
}

// pass forwards an event in which nothing can be read as a call while nothing waits for a
// finish_reason.
func (s *Stream) pass(ev sse.Event) bool {
	if mayCall(ev.Data) || s.holding() {
		return false
	}
	s.noteText(ev.Data)
	s.Out = append(s.Out, ev.Raw...)
	return true
}

// mayCall reports whether event data could carry a call or a finish_reason that announces one:
// every such key and value holds "_call" in some case (clients on Go's encoding/json match keys
// without regard to case), unless escapes spell it.
func mayCall(data []byte) bool {
	return relay.ContainsFold(data, "_call") || bytes.Contains(data, []byte(`\u`))
}

// chatKeys are the keys of a chunk or a completion that a client reads a call from. A key that
// differs from one of them in case alone makes the event malformed (see relay.FoldedKey).
var chatKeys = []string{pathChoices, pathIndex, pathDelta, pathMessage, pathToolCalls, pathFunctionCall,
	pathID, pathType, "function", pathName, pathArgs, pathFinish, "custom", "input"}

// holding reports whether some call waits to be vetted.
func (s *Stream) holding() bool {
	return s.held > 0
}

// noteText remembers which choices of an event that is passed on unread carry text.
func (s *Stream) noteText(data []byte) {
	if s.tpl.covers(data) || indexQuoted(data, contentKey) < 0 { // the template first: it answers most events
		return
	}
	marked := false
	relay.Get(data, pathChoices).ForEach(func(_, c gjson.Result) bool {
		if v, ok := scanChoice(0, c); ok && v.text {
			s.choice(v.index).text = true
			marked = true
		}
		return true
	})
	if marked {
		s.tpl.learn(data)
	}
}

// textTemplate spares noteText the walk of the events that differ from an earlier text event of the
// stream only in the contents of string values (the text, and whatever else changes per chunk: an
// id, an obfuscation padding). The earlier event is one valid JSON object without a backslash, so
// every '"' in it delimits a string and every string followed by ':' is a key. An event with the
// same bytes outside its strings, the same keys, and value strings that hold no '"', '\\' or
// control byte (and stay empty where the earlier one's were empty) has the same JSON structure,
// with the same choices at the same indexes and a string wherever the earlier event had one: a
// content string of it is non-empty only where the earlier one's was, so it marks a subset of the
// choices that event marked, which stay marked. Noting it changes nothing.
type textTemplate struct {
	relay.Template
}

// learn makes data, which has just been walked, the template when it can be one: one valid JSON
// object with unique keys and no backslash anywhere (so no escape can hide a key or a quote). Its
// slots are the contents of its non-empty value strings.
func (t *textTemplate) learn(data []byte) {
	if bytes.IndexByte(data, '\\') >= 0 || jsoncheck.Object(data, jsoncheck.Limits{MaxDepth: maxEventDepth}) != nil {
		return
	}
	var buf [16]relay.Slot
	slots := buf[:0]
	for i := 0; ; {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			break
		}
		start := i + q + 1
		end := start + bytes.IndexByte(data[start:], '"') // valid JSON without escapes: found
		k := end + 1
		for k < len(data) && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r') {
			k++
		}
		if end > start && (k >= len(data) || data[k] != ':') {
			slots = append(slots, relay.Slot{From: start, To: end, Kind: relay.Plain})
		}
		i = end + 1
	}
	t.Set(data, slots)
}

// covers reports whether data differs from the template only in the contents of its non-empty value
// strings, which hold no '"', '\\' or control byte in data (see textTemplate).
func (t *textTemplate) covers(data []byte) bool { return t.Match(data, nil) }

// argsTemplate spares event the reading of a call's argument deltas after the first of their shape.
// An event that was read whole and did nothing but add to the arguments of a call still open (one
// choice, one tool_calls entry of index and function alone, a function of arguments alone, no
// finish_reason, nothing else for the client) becomes the template. The relay hands event only
// valid JSON objects with unique keys: an event whose bytes are the template's but for the contents
// of the arguments string (their end found by escapes) and of top-level strings that event does not
// read (an id, OpenAI's obfuscation padding: no backslash in them, so their first quote ends them)
// has the template's keys and values but for those strings, so event would add its arguments to the
// same call and hold it, which is all the template path does.
type argsTemplate struct {
	relay.Template
	// p is the call the template added to, cur[index] of choice ch; wire is the entry's index as
	// sent.
	p           *pending
	ch          *choiceState
	index, wire int
}

// learn makes data, whose tool_calls entry e toolDelta has just read, the template when it has the
// template's shape; otherwise the template is forgotten.
func (t *argsTemplate) learn(data []byte, ch *choiceState, e gjson.Result) {
	t.p = nil
	t.Reset()
	var ix, fn gjson.Result
	plain := true
	e.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathIndex:
			ix = v
		case "function":
			fn = v
		default:
			plain = false
		}
		return plain
	})
	wire, ok := relay.IntField(ix)
	if !plain || !ok || !fn.IsObject() {
		return
	}
	var args gjson.Result
	fn.ForEach(func(k, v gjson.Result) bool {
		if k.Str != pathArgs {
			plain = false
		}
		args = v
		return plain
	})
	if !plain || args.Type != gjson.String {
		return
	}
	var buf [8]relay.Slot
	slots := buf[:0]
	if slot, ok := relay.SlotOf(data, args, relay.Escaped); ok {
		slots = append(slots, slot)
	} else {
		return
	}
	relay.Get(data, "@this").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathChoices, "usage", "error":
			return true
		}
		if v.Type == gjson.String && strings.IndexByte(v.Raw, '\\') < 0 {
			if slot, ok := relay.SlotOf(data, v, relay.Plain); ok {
				slots = append(slots, slot)
			} else {
				plain = false
			}
		}
		return plain
	})
	if !plain {
		return
	}
	slices.SortFunc(slots, func(a, b relay.Slot) int { return a.From - b.From })
	index := wire
	if wire == -1 {
		index = 0
	}
	p := ch.cur[index]
	if p == nil || p.done {
		return
	}
	t.Set(data, slots)
	t.p, t.ch, t.index, t.wire = p, ch, index, wire
}

// matchArgs is the argument template's match, in the stream's first round.
func (s *Stream) matchArgs(data []byte) ([]byte, bool) {
	if s.Round() > 0 {
		return nil, false
	}
	return s.args.match(data)
}

// match returns data's arguments string, quotes included, when data is of the template's shape and
// the template's call is still the open call at its index.
func (t *argsTemplate) match(data []byte) ([]byte, bool) {
	if t.p == nil || t.p.done || t.ch.cur[t.index] != t.p {
		return nil, false
	}
	var got [1][]byte
	if !t.Match(data, got[:]) {
		return nil, false
	}
	return got[0], true
}

// malformed drops an event that a client might read differently from us, and fails every held
// call: one of its deltas may be in it.
func (s *Stream) malformed() {
	for _, ch := range s.choices {
		for _, p := range ch.open {
			p.Fail(vet.ReasonMalformedStream)
		}
	}
}

// choiceView is one choice of an event.
type choiceView struct {
	pos     int // position in the event's choices array
	index   int
	raw     gjson.Result
	entries []gjson.Result // delta.tool_calls
	legacy  gjson.Result   // delta.function_call, when not null
	finish  string         // finish_reason, when a string
	rest    bool           // has something to say besides tool-call deltas
	delta   bool           // has content, role, logprobs or the like
	text    bool           // has non-empty content
}

// scanChoice reads a choice of an event in one pass over its keys (and one over its delta's).
// ok is false when the choice is malformed: a non-integer index, or tool_calls that is not an
// array.
func scanChoice(pos int, c gjson.Result) (v choiceView, ok bool) {
	v = choiceView{pos: pos, raw: c}
	ok = true
	c.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case pathIndex:
			v.index, ok = relay.IntField(val)
		case pathDelta:
			val.ForEach(func(dk, dv gjson.Result) bool {
				switch dk.Str {
				case pathToolCalls:
					if dv.IsArray() {
						v.entries = dv.Array()
					} else if dv.Type != gjson.Null {
						ok = false
					}
				case pathFunctionCall:
					if dv.Type != gjson.Null {
						v.legacy = dv
					}
				default:
					if meaningful(dv) {
						v.delta = true
						v.text = v.text || (dk.Str == pathContent && dv.Type == gjson.String)
					}
				}
				return ok
			})
		case pathMessage:
			// The non-stream shape inside a chunk: a lenient client might take its calls; this
			// vetter reads calls from delta only.
			ok = !carriesCall(val)
		case pathFinish:
			if val.Type == gjson.String {
				v.finish = val.Str
			}
			v.rest = v.rest || meaningful(val)
		case "logprobs":
			v.delta = v.delta || meaningful(val)
		}
		return ok
	})
	v.rest = v.rest || v.delta
	return v, ok
}

// event handles one event whose data is a valid JSON object.
func (s *Stream) event(ev sse.Event) {
	data := ev.Data
	if args, ok := s.matchArgs(data); ok {
		// What toolDelta does with an event of the template's shape: the call goes on with these
		// arguments.
		p := s.args.p
		p.Call.AppendArgs(gjson.ParseBytes(args).Str)
		p.Hold(ev.Raw, s.args.wire)
		return
	}
	if relay.FoldedKey(data, chatKeys) {
		s.malformed()
		return
	}
	// One pass over the top-level keys (they are unique: the relay checked the object).
	var choices, usage, errv gjson.Result
	relay.Get(data, "@this").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathChoices:
			choices = v
		case "usage":
			usage = v
		case "error":
			errv = v
		}
		return true
	})
	if !choices.IsArray() {
		if mayCall(data) && !errv.Exists() {
			// No client reads a call outside choices; nor is such an event passed on.
			s.malformed()
			return
		}
		s.Out = append(s.Out, ev.Raw...)
		return
	}
	var views []choiceView
	tools := 0    // tool-call deltas in the event
	finishes := 0 // choices that finish here with calls to vet or a finish_reason to rewrite
	rest := meaningful(usage)
	ok := true
	choices.ForEach(func(_, c gjson.Result) bool {
		var v choiceView
		if v, ok = scanChoice(len(views), c); !ok {
			return false
		}
		tools += len(v.entries)
		if v.legacy.Exists() {
			tools++
		}
		if v.finish != "" {
			if ch := s.choices[v.index]; len(v.entries) > 0 || v.legacy.Exists() ||
				(ch != nil && len(ch.open) > 0) || rewritesFinish(v.finish, ch) {
				finishes++
			}
		}
		rest = rest || v.rest
		views = append(views, v)
		return true
	})
	if !ok {
		s.malformed()
		return
	}
	if tools == 0 && finishes == 0 {
		s.markText(views)
		s.Out = append(s.Out, ev.Raw...)
		return
	}

	// Tool-call deltas: start or continue calls, holding each delta.
	pure := tools == 1 && len(views) == 1 && !rest
	for _, v := range views {
		ch := s.choice(v.index)
		for _, e := range v.entries {
			held := ev.Raw
			if !pure {
				held = sse.AppendData(nil, fragment(data, v.raw, "tool_calls", "["+e.Raw+"]"))
			}
			s.toolDelta(ch, v.index, e, data, held)
			if s.Ended {
				return
			}
			if pure && v.finish == "" && s.Round() == 0 {
				s.args.learn(data, ch, e)
			}
		}
		if v.legacy.Exists() {
			held := ev.Raw
			if !pure {
				held = sse.AppendData(nil, fragment(data, v.raw, "function_call", v.legacy.Raw))
			}
			s.legacyDelta(ch, v.index, v.legacy, data, held)
			if s.Ended {
				return
			}
		}
	}

	// finish_reason: every call of the choice is complete. When the same event also carries
	// content for the client, that goes out first and the finish_reason after the calls.
	closing := map[int]bool{} // positions of choices that finish with calls to complete
	rewrite := map[int]bool{} // positions whose finish_reason becomes "stop"
	deltaRest := meaningful(usage)
	for _, v := range views {
		deltaRest = deltaRest || v.delta
		if v.finish == "" {
			continue
		}
		if ch := s.choice(v.index); len(ch.open) > 0 {
			closing[v.pos] = true
		} else if rewritesFinish(v.finish, ch) {
			rewrite[v.pos] = true
		}
	}
	split := len(closing) > 0 && deltaRest
	if split {
		s.markText(views)
		s.Out = sse.AppendData(s.Out, restOf(data, views, rewrite, closing))
	}
	for _, v := range views {
		if !closing[v.pos] {
			continue
		}
		ch := s.choice(v.index)
		s.complete(v.index, ch)
		if s.Ended {
			return
		}
		if rewritesFinish(v.finish, ch) {
			rewrite[v.pos] = true
		}
	}
	if split {
		s.Out = sse.AppendData(s.Out, finishOnly(data, views, rewrite, closing))
		return
	}

	// What is left of the event goes out now.
	switch {
	case !rest && len(rewrite) == 0:
	case tools == 0 && len(rewrite) == 0:
		s.markText(views)
		s.Out = append(s.Out, ev.Raw...)
	default:
		s.markText(views)
		s.Out = sse.AppendData(s.Out, restOf(data, views, rewrite, nil))
	}
}

// markText remembers the choices whose text goes out now, for the line break before a notice.
func (s *Stream) markText(views []choiceView) {
	for _, v := range views {
		if v.text {
			s.choice(v.index).text = true
		}
	}
}

// restOf is an event without its tool-call deltas, finish_reason "stop" where rewrite says so, and
// no finish_reason where hold says so.
func restOf(data []byte, views []choiceView, rewrite, hold map[int]bool) []byte {
	out := slices.Clone(data)
	for _, v := range views {
		base := pathChoices + "." + strconv.Itoa(v.pos) + "."
		if v.raw.Get(pathDelta + "." + pathToolCalls).Exists() {
			out, _ = sjson.DeleteBytes(out, base+pathDelta+"."+pathToolCalls)
		}
		if v.legacy.Exists() {
			out, _ = sjson.DeleteBytes(out, base+pathDelta+"."+pathFunctionCall)
		}
		switch {
		case hold[v.pos]:
			out, _ = sjson.SetRawBytes(out, base+pathFinish, []byte("null"))
		case rewrite[v.pos]:
			out, _ = sjson.SetBytes(out, base+pathFinish, finishStop)
		}
	}
	return out
}

// finishOnly is an event with just the finish_reason of the choices in only.
func finishOnly(data []byte, views []choiceView, rewrite, only map[int]bool) []byte {
	var cs [][]byte
	for _, v := range views {
		if !only[v.pos] {
			continue
		}
		c := []byte(v.raw.Raw)
		c, _ = sjson.SetRawBytes(c, pathDelta, []byte("{}"))
		if meaningful(v.raw.Get("logprobs")) {
			c, _ = sjson.SetRawBytes(c, "logprobs", []byte("null"))
		}
		if rewrite[v.pos] {
			c, _ = sjson.SetBytes(c, pathFinish, finishStop)
		}
		cs = append(cs, c)
	}
	out, _ := sjson.SetRawBytes(slices.Clone(data), pathChoices, append(append([]byte{'['}, bytes.Join(cs, []byte{','})...), ']'))
	if meaningful(gjson.GetBytes(out, "usage")) {
		out, _ = sjson.SetRawBytes(out, "usage", []byte("null"))
	}
	return out
}

// rewritesFinish reports whether a finish_reason must become "stop": it announces calls and no
// call of the choice was released.
func rewritesFinish(finish string, ch *choiceState) bool {
	return (finish == finishToolCalls || finish == finishFunctionCall) && (ch == nil || !ch.released)
}

// carriesCall reports whether a message or delta object carries tool_calls or a function_call.
func carriesCall(m gjson.Result) bool {
	return meaningful(m.Get(pathToolCalls)) || meaningful(m.Get(pathFunctionCall))
}

// meaningful reports whether a value would change what a client accumulates: present, not null
// and not an empty string.
func meaningful(v gjson.Result) bool {
	return v.Exists() && v.Type != gjson.Null && !(v.Type == gjson.String && v.Str == "")
}

// fragment builds the data of an event that carries one tool-call delta of a choice: the event
// with only that choice, whose delta has only key: value, and no finish_reason, logprobs or usage.
func fragment(data []byte, choice gjson.Result, key, value string) []byte {
	c := []byte(choice.Raw)
	c, _ = sjson.SetRawBytes(c, pathDelta, []byte(`{"`+key+`":`+value+`}`))
	if f := choice.Get(pathFinish); f.Exists() && f.Type != gjson.Null {
		c, _ = sjson.SetRawBytes(c, pathFinish, []byte("null"))
	}
	if lp := choice.Get("logprobs"); lp.Exists() && lp.Type != gjson.Null {
		c, _ = sjson.SetRawBytes(c, "logprobs", []byte("null"))
	}
	out, _ := sjson.SetRawBytes(slices.Clone(data), pathChoices, append(append([]byte{'['}, c...), ']'))
	if u := gjson.GetBytes(out, "usage"); u.Exists() && u.Type != gjson.Null {
		out, _ = sjson.SetRawBytes(out, "usage", []byte("null"))
	}
	return out
}

func (s *Stream) choice(index int) *choiceState {
	ch := s.choices[index]
	if ch == nil {
		ch = &choiceState{cur: map[int]*pending{}}
		s.choices[index] = ch
	}
	return ch
}

// choiceKeys returns the indexes of the choices seen so far, in order.
func (s *Stream) choiceKeys() []int {
	keys := make([]int, 0, len(s.choices))
	for k := range s.choices {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// toolDelta handles one entry of delta.tool_calls.
func (s *Stream) toolDelta(ch *choiceState, choice int, e gjson.Result, data, held []byte) {
	// One pass over the entry's keys (unique: the relay checked the event).
	var ix, idv, typ, custom, fn gjson.Result
	e.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathIndex:
			ix = v
		case pathID:
			idv = v
		case pathType:
			typ = v
		case "custom":
			custom = v
		case "function":
			fn = v
		}
		return true
	})
	index, wire := 0, 0
	invalid := false
	if ix.Exists() {
		var ok bool
		if wire, ok = relay.IntField(ix); !ok {
			invalid = true
			index = legacyIndex + 1 // a key no valid delta uses
		} else if wire != -1 {
			index = wire // -1 is 0, as the official SDKs read it (Bedrock sends -1 for a single call)
		}
	}
	id := ""
	if idv.Type == gjson.String {
		id = idv.Str // it may share the reader's buffer: cloned where the call keeps it
	} else if idv.Exists() && idv.Type != gjson.Null {
		invalid = true
	}
	p := ch.cur[index]
	switch {
	case p == nil, id != "" && id != p.Call.ID && (p.done || p.Call.ID != ""):
		p = s.start(ch, choice, index, data)
		if s.Ended {
			return
		}
	case p.done:
		s.late(p, held, wire)
		return
	}
	call := p.Call
	if invalid {
		call.Fail(vet.ReasonInvalidIndex)
	}
	if id != "" && call.ID == "" {
		call.ID = strings.Clone(id)
	}
	if unsupportedType(typ, custom) {
		call.Fail(vet.ReasonUnsupportedType)
	}
	fillFunction(call, fn)
	p.Hold(held, wire)
}

// legacyDelta handles a delta.function_call.
func (s *Stream) legacyDelta(ch *choiceState, choice int, fc gjson.Result, data, held []byte) {
	p := ch.cur[legacyIndex]
	if p == nil {
		p = s.start(ch, choice, legacyIndex, data)
		if s.Ended {
			return
		}
		p.Call.Legacy = true
		p.Call.Index = -1
	} else if p.done {
		s.late(p, held, 0)
		return
	}
	fillFunction(p.Call, fc)
	p.Hold(held, 0)
}

// start begins a new call in a choice; the calls already open there are complete (unless the
// choice's calls are vetted together).
func (s *Stream) start(ch *choiceState, choice, index int, data []byte) *pending {
	if !s.c.Atomic() {
		s.complete(choice, ch)
	}
	p := &pending{Pending: relay.Pending[int]{Call: &vet.Call{Choice: choice, Index: index}, Stream: s.Held()}, tmpl: slices.Clone(data)}
	ch.cur[index] = p
	ch.open = append(ch.open, p)
	s.held++
	return p
}

// release writes the held deltas of an allowed call. Tool calls get the next index of their
// choice, so that a client sees its calls numbered 0, 1, 2, ... whatever was blocked between
// them or whatever index the upstream reused; a delta is rewritten only where its index differs.
func (s *Stream) release(ch *choiceState, p *pending) {
	if !p.Call.Legacy {
		p.client = ch.next
		ch.next++
	}
	held := p.Call.Held()
	size := 0
	for _, h := range held {
		size += len(h) + 8 // room for a reindexed event's longer index
	}
	s.Out = slices.Grow(s.Out, size) // one allocation for the call's events, not one per doubling
	for i, h := range held {
		if !p.Call.Legacy && p.Meta[i] != p.client {
			h = reindex(h, p.client)
		}
		s.Out = append(s.Out, h...)
	}
	p.out = true
	ch.released = true
}

// reindex rewrites the index of the one tool-call delta in a held event.
func reindex(raw []byte, index int) []byte {
	ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
	if err != nil {
		return nil // cannot happen: held events are whole
	}
	data, _ := sjson.SetBytes(slices.Clone(ev.Data), pathChoices+".0."+pathDelta+"."+pathToolCalls+".0."+pathIndex, index)
	return sse.AppendData(nil, data)
}

// late handles a delta for a call that was already vetted. A blocked call's late deltas are
// dropped quietly. A released call's cannot be added to what the client has: they are dropped
// and recorded (in error mode the stream ends; in audit mode they are passed on).
func (s *Stream) late(p *pending, held []byte, wire int) {
	if !p.out {
		return
	}
	switch d := s.AfterRelease(s.c, p.Call); {
	case !d.Blocked():
		if !p.Call.Legacy && wire != p.client {
			held = reindex(held, p.client)
		}
		s.Out = append(s.Out, held...)
	case s.c.Mode() == vet.ModeError:
		s.end(surface.BlockedErrorJSON(d))
	}
}

// complete vets every open call of a choice, then releases or replaces each.
func (s *Stream) complete(choice int, ch *choiceState) {
	if len(ch.open) == 0 {
		return
	}
	open := ch.open
	ch.open = nil
	s.held -= len(open)
	relay.Settle[int](&s.Relay, s.c, open, func(d vet.Decision) { s.end(surface.BlockedErrorJSON(d)) }, func(p *pending, d vet.Decision) {
		p.done = true
		switch {
		case d.Blocked() && choice == 0 && relay.Answerable(s.c, p.Call, d):
			s.Refuse(relay.Answer(p.Call, d, false))
		default:
			s.Spoil()
		}
		if !d.Blocked() {
			s.release(ch, p)
		} else {
			s.notice(choice, ch, p, d)
		}
		p.tmpl = nil
	})
}

// notice writes the content delta that takes a blocked call's place.
func (s *Stream) notice(choice int, ch *choiceState, p *pending, d vet.Decision) {
	s.noticeText(choice, ch, p.tmpl, vet.Notice(d))
}

// noticeText writes a content delta with a notice, in the shape of the chunk tmpl (the call's first
// event; nil for the first round's id and created alone).
func (s *Stream) noticeText(choice int, ch *choiceState, tmpl []byte, text string) {
	if ch.text {
		text = "\n" + text
	}
	ch.text = true
	c := []byte(`{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}`)
	c, _ = sjson.SetBytes(c, pathIndex, choice)
	c, _ = sjson.SetBytes(c, pathDelta+"."+pathContent, text)
	if len(tmpl) == 0 {
		tmpl = []byte(`{"object":"chat.completion.chunk"}`)
		if s.firstID != nil {
			tmpl, _ = sjson.SetRawBytes(tmpl, pathID, s.firstID)
			tmpl, _ = sjson.SetRawBytes(tmpl, "created", s.firstCreated)
		}
	}
	out, _ := sjson.SetRawBytes(tmpl, pathChoices, append(append([]byte{'['}, c...), ']'))
	if u := gjson.GetBytes(out, "usage"); u.Exists() && u.Type != gjson.Null {
		out, _ = sjson.SetRawBytes(out, "usage", []byte("null"))
	}
	s.Out = sse.AppendData(s.Out, out)
}

// finishAll completes every choice, at [DONE].
func (s *Stream) finishAll() {
	for _, k := range s.choiceKeys() {
		s.complete(k, s.choices[k])
		if s.Ended {
			return
		}
	}
}

// end writes a final error event and stops reading upstream.
func (s *Stream) end(errJSON []byte) {
	for _, ch := range s.choices {
		for _, p := range ch.open {
			p.Drop()
		}
		s.held -= len(ch.open)
		ch.open = nil
	}
	s.Out = sse.AppendData(s.Out, errJSON)
	s.Ended = true
}

var (
	contentKey = []byte(`"content"`)
	finishKey  = []byte(`"finish_reason"`)
	finishNull = []byte(`"finish_reason":null`)
)

// allNull reports whether bytes.Count(data, finishKey) == bytes.Count(data, finishNull), which is
// how noteFinish recognises an event whose every finish_reason is null, in one pass in the usual
// case: each finishKey followed by :null counts once on both sides and no occurrence of either can
// straddle the end of such a match, so only from the first finishKey that is not followed by :null
// on are the counts taken.
func allNull(data []byte) bool {
	for {
		i := indexQuoted(data, finishKey)
		if i < 0 {
			return true
		}
		if !bytes.HasPrefix(data[i:], finishNull) {
			return bytes.Count(data, finishKey) == bytes.Count(data, finishNull)
		}
		data = data[i+len(finishNull):]
	}
}

// noteFinish records whether the event carries a string finish_reason in some choice. Most chunks
// carry "finish_reason":null and are recognised without parsing.
func (s *Stream) noteFinish(data []byte) {
	if s.finished || allNull(data) {
		return
	}
	for _, f := range relay.Get(data, "choices.#.finish_reason").Array() {
		if f.Type == gjson.String && f.String() != "" {
			s.finished = true
			return
		}
	}
}

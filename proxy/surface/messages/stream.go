package messages

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
)

// Event types of the Messages stream.
const (
	evMessageStart = "message_start"
	evBlockStart   = "content_block_start"
	evBlockDelta   = "content_block_delta"
	evBlockStop    = "content_block_stop"
	evMessageDelta = "message_delta"
	evMessageStop  = "message_stop"
	evError        = "error"
	deltaInputJSON = "input_json_delta"
	pathIndex      = "index"
)

// Stream vets a streamed Messages answer. Read yields the upstream SSE stream with every tool_use
// block held until it is complete and vetted:
//
//   - Events of other blocks (text, thinking, server tool blocks), pings and message events go out byte for
//     byte as soon as they are complete.
//   - A tool_use block's events — content_block_start, its content_block_delta (input_json_delta) events and
//     content_block_stop — are held, keyed by the block index. At its content_block_stop the call is vetted
//     (with atomicParallelCalls: every call waits for message_delta and they are vetted together). Its input is
//     the concatenated partial_json, or the start's input when no fragment came; a block that starts with a
//     non-empty input and then gets fragments is blocked (clients differ on what it means).
//   - An allowed call's held events are then released unchanged. On refuse a blocked call's events are
//     dropped and a text block with the notice takes its place (content_block_start, one text_delta,
//     content_block_stop); on error the stream ends with an error event (code tool_call_blocked).
//   - Block indexes are renumbered where needed so that the client sees 0, 1, 2, ... in the order the blocks
//     reach it, as the official SDKs require. message_delta's stop_reason "tool_use" becomes "end_turn"
//     when no tool_use block was released.
//   - Nothing of a blocked call (id, name, input bytes) is ever written; an input_json_delta that belongs to
//     no held call is dropped. An event whose data looks like JSON but is not one valid object with unique
//     keys, or whose event: line names another type than its data, is dropped, and every call still held
//     fails closed.
//   - If the upstream ends (or fails) before message_stop, held calls are dropped and the stream ends with an
//     error event (code upstream_stream_truncated).
//
// Read returns whatever output it has before it reads upstream again, so each event reaches a
// caller that flushes after every Read at once. A Stream is not safe for concurrent use.
type Stream struct {
	relay.Relay
	c *vet.Checker

	blocks   map[int]*block // by upstream index
	open     []*pending     // calls not yet vetted, in the order they started
	nextOut  int            // the index the next block that goes out gets
	released bool           // a tool_use block went out
	finished bool           // message_stop (or an upstream error event) went out

	// In continue mode (SetNext): the round's blocks as sent, for the turn promptgate answers; the
	// index the next block gets back if the round is continued (taken at its first refusal); the
	// round's usage (message_start's, then message_delta's members over it) and that of the rounds
	// continued, summed.
	turn                    turnBlocks
	rollback                int
	roundUsage, roundsUsage []byte

	// args reads the input_json_delta events of a held call after the first of their shape (see
	// argsTemplate).
	args argsTemplate
}

var _ io.ReadCloser = (*Stream)(nil)

// block is one content block of the message.
type block struct {
	client int      // the index the client sees
	call   *pending // nil for a block that is not vetted
}

// pending is one tool_use block being assembled.
type pending struct {
	relay.Pending[held]
	idx     int    // upstream index
	start   []byte // the raw input of content_block_start, nil when it had none
	frags   bool   // a non-empty input_json_delta arrived
	stopped bool   // its content_block_stop arrived

	vetted   bool
	released bool
}

// held is what the stream needs of a held event to write it again.
type held struct {
	idx  int    // the index the event carries
	name string // its event: line
}

// NewStream wraps an upstream SSE body. c vets the calls; rec, which may be nil, is called for
// every vetted call.
func NewStream(upstream io.ReadCloser, c *vet.Checker, rec relay.Recorder) *Stream {
	s := &Stream{c: c, blocks: map[int]*block{}}
	s.Relay = relay.New(upstream, rec, relay.Surface{
		Finished: func() bool { return s.finished && len(s.open) == 0 },
		Truncated: func() {
			s.end(ErrorJSON("upstream stream ended before message_stop", "api_error", relay.CodeTruncated))
		},
		Malformed: s.malformed,
		Event:     s.event,
		MaxDepth:  maxDepth,
		Typed:     true,
		Names:     eventNames,
	})
	return s
}

// eventNames are the event types of a Messages stream, the most frequent first
// (relay.Surface.Names).
var eventNames = []string{evBlockDelta, evBlockStart, evBlockStop, evMessageStart, evMessageDelta, evMessageStop,
	"ping", "error"}

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
	if relay.FoldedKeyOutside(data, anthKeys, pathInput) {
		s.malformed() // dropped: a client on Go's encoding/json would read it differently
		return
	}
	var typ, blockType, deltaType string
	var index, delta gjson.Result
	others := false // a top-level key besides type, index and delta
	relay.Get(data, "@this").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathType:
			typ = v.String()
		case pathIndex:
			index = v
		case "content_block":
			blockType = v.Get(pathType).String()
			others = true
		case "delta":
			delta = v
			deltaType = v.Get(pathType).String()
		default:
			others = true
		}
		return true
	})
	if foldedType(typ) || foldedType(blockType) || foldedType(deltaType) {
		s.malformed() // dropped: a client that reads enums without regard to case would read it differently
		return
	}
	idx, hasIdx := relay.IntField(index)
	if s.Continuing() {
		s.turn.note(typ, data)
	}
	switch typ {
	case evMessageStart:
		if s.Continuing() {
			s.roundUsage = []byte(gjson.GetBytes(data, "message.usage").Raw)
		}
		if s.Round() > 0 {
			return // one message to the client: its message_start went out in the first round
		}
		s.messageStart(ev)
		return
	case evMessageDelta:
		s.completeAll()
		if s.Ended {
			return
		}
		var out []byte
		if delta.Get("stop_reason").String() == stopToolUse && !s.released {
			out, _ = sjson.SetBytes(slices.Clone(data), "delta.stop_reason", stopEndTurn)
		}
		if s.Continuing() {
			u := gjson.GetBytes(data, "usage")
			s.roundUsage = overUsage(s.roundUsage, u)
			if s.roundsUsage != nil && u.IsObject() {
				if out == nil {
					out = slices.Clone(data)
				}
				out, _ = sjson.SetRawBytes(out, "usage", relay.AddUsage(s.roundsUsage, s.roundUsage))
			}
		}
		s.write(ev, out, -1, -1)
		return
	case evMessageStop:
		s.completeAll()
		if s.Ended {
			return
		}
		if s.Continuing() && s.EndRound(relay.Turn{Raw: s.turn.content()}) {
			s.nextRound()
			for _, n := range s.Kept() { // the held calls' notices, with their codes: the client must see them
				s.notice(s.nextOut, n)
				s.nextOut++
			}
			return
		}
		s.finished = true
		s.write(ev, nil, -1, -1)
		return
	case evError:
		s.dropOpen()
		s.finished = true
		s.write(ev, nil, -1, -1)
		return
	case evBlockStart, evBlockDelta, evBlockStop:
	default:
		s.write(ev, nil, -1, -1) // ping, and what this package does not know
		return
	}

	inputFrag := typ == evBlockDelta && deltaType == deltaInputJSON
	toolStart := typ == evBlockStart && blockType == typeToolUse
	if !hasIdx {
		if !inputFrag && !toolStart {
			s.write(ev, nil, -1, -1)
		}
		return // a call fragment that cannot be placed: no client may assemble it
	}
	st := s.blocks[idx]
	if typ == evBlockStart {
		if st != nil && st.call != nil && !st.call.vetted {
			st.call.Call.Fail(ReasonIncomplete)
			s.complete([]*pending{st.call})
			if s.Ended {
				return
			}
		}
		if toolStart {
			p := s.start(idx, gjson.GetBytes(data, "content_block"))
			p.Hold(ev.Raw, held{idx, ev.Event})
			return
		}
		st = &block{client: s.nextOut}
		s.nextOut++
		s.blocks[idx] = st
		s.write(ev, nil, idx, st.client)
		return
	}
	switch {
	case st == nil:
		// Events of a block that never started: a client cannot place them either.
	case st.call == nil:
		// Server tool blocks stream their input as input_json_delta too: they pass with their
		// block.
		s.write(ev, nil, idx, st.client)
	case !st.call.vetted:
		p := st.call
		if p.stopped {
			p.Call.Fail(ReasonIncomplete)
			return
		}
		if inputFrag {
			s.fragment(p, delta.Get("partial_json"))
		}
		p.Hold(ev.Raw, held{idx, ev.Event})
		if inputFrag && !others {
			s.args.learn(ev, p, idx, delta)
		}
		if typ == evBlockStop {
			p.stopped = true
			if !s.c.Atomic() {
				s.complete([]*pending{p})
			}
		}
	default:
		s.late(st, ev, idx)
	}
}

// nextRound starts the next round of a continued message: its blocks are numbered on from what the
// client has, and its usage adds to the rounds' before it.
func (s *Stream) nextRound() {
	s.roundsUsage = relay.AddUsage(s.roundsUsage, s.roundUsage)
	s.roundUsage = nil
	s.blocks, s.open, s.turn = map[int]*block{}, nil, turnBlocks{}
	s.nextOut = s.rollback
	s.c.NewRound()
}

// overUsage is a message's usage once a message_delta's usage members are read over it (each is the
// message's total so far).
func overUsage(start []byte, delta gjson.Result) []byte {
	if !delta.IsObject() {
		return start
	}
	if !gjson.ValidBytes(start) || !gjson.ParseBytes(start).IsObject() {
		start = []byte("{}")
	}
	out := slices.Clone(start)
	delta.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.Null {
			out, _ = sjson.SetRawBytes(out, gjson.Escape(k.Str), []byte(v.Raw))
		}
		return true
	})
	return out
}

// messageStart vets the (normally empty) content of message_start and counts its blocks.
func (s *Stream) messageStart(ev sse.Event) {
	msg := gjson.GetBytes(ev.Data, "message")
	// Only an empty content is passed unread: a block's type may be spelt with escapes
	// ("tool\u005fuse").
	if !msg.IsObject() || len(msg.Get(pathContent).Array()) == 0 {
		s.nextOut += len(msg.Get(pathContent).Array())
		s.write(ev, nil, -1, -1)
		return
	}
	out, res, info, err := vetMessage([]byte(msg.Raw), s.c, s.Record)
	if res.ErrorCall != nil {
		s.end(blockedJSON(*res.ErrorCall))
		return
	}
	if err != nil {
		return
	}
	s.nextOut += info.blocks
	s.released = s.released || info.toolUse
	data, err := sjson.SetRawBytes(slices.Clone(ev.Data), "message", out)
	if err != nil {
		return
	}
	s.write(ev, data, -1, -1)
}

// start begins a tool_use call at a block index.
// knownTypes are the type values of the events and blocks a client assembles a tool_use block from.
var knownTypes = []string{evMessageStart, evBlockStart, evBlockDelta, evBlockStop, evMessageDelta, evMessageStop,
	evError, typeToolUse, deltaInputJSON}

// foldedType reports whether a type value differs from one of knownTypes in case only: a client
// that reads enums without regard to case (System.Text.Json's JsonStringEnumConverter) takes it for
// that type, this package not.
func foldedType(typ string) bool {
	// knownTypes are lowercase ASCII: a value without capitals or non-ASCII bytes is one of them or
	// no variant.
	if !strings.ContainsFunc(typ, func(r rune) bool { return r >= utf8.RuneSelf || 'A' <= r && r <= 'Z' }) {
		return false
	}
	for _, k := range knownTypes {
		if len(typ) >= len(k) && typ != k && strings.EqualFold(typ, k) {
			return true
		}
	}
	return false
}

func (s *Stream) start(idx int, cb gjson.Result) *pending {
	p := &pending{Pending: relay.Pending[held]{Call: &vet.Call{Index: idx}, Stream: s.Held()}, idx: idx}
	if id := cb.Get(pathID); id.Type == gjson.String {
		p.Call.ID = id.Str
	}
	if name := cb.Get(pathName); name.Type == gjson.String {
		p.Call.AddName(name.Str)
	}
	if in := cb.Get(pathInput); in.Exists() {
		p.start = []byte(in.Raw)
	}
	s.blocks[idx] = &block{client: -1, call: p}
	s.open = append(s.open, p)
	return p
}

// fragment appends an input_json_delta's partial_json.
func (s *Stream) fragment(p *pending, pj gjson.Result) {
	if pj.Type != gjson.String {
		p.Call.Fail(vet.ReasonNotString)
		return
	}
	if pj.Str == "" {
		return
	}
	if !p.frags && p.start != nil && string(p.start) != "{}" {
		p.Call.Fail(ReasonAmbiguousInput)
	}
	p.frags = true
	p.Call.AppendArgs(pj.Str)
}

// argsTemplate spares event the reading of a held call's input_json_delta events after the first of
// their shape. An event that was read whole and did nothing but add to the input of a held call
// (keys type, index and delta alone; a delta of type and partial_json alone) becomes the template.
// The relay hands event only valid JSON objects with unique keys: an event with the same event:
// line whose bytes are the template's but for the contents of partial_json (their end found by
// escapes) is the same event for another fragment of the same block, which event would append to
// the same call and hold, which is all the template path does — while that call is still the held,
// unstopped call of its block, and outside continue mode (which notes every event).
type argsTemplate struct {
	relay.Template
	p    *pending
	idx  int
	name string
}

// learn makes ev, an input_json_delta event of call p at block idx of the template's shape but for
// its delta, the template when its delta has the shape too.
func (t *argsTemplate) learn(ev sse.Event, p *pending, idx int, delta gjson.Result) {
	t.p = nil
	t.Reset()
	var pj gjson.Result
	plain := true
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case pathType:
		case "partial_json":
			pj = v
		default:
			plain = false
		}
		return plain
	})
	slot, ok := relay.SlotOf(ev.Data, pj, relay.Escaped)
	if !plain || !ok {
		return
	}
	t.Set(ev.Data, []relay.Slot{slot})
	t.p, t.idx, t.name = p, idx, ev.Event
}

// argsByTemplate handles ev when it matches the argument template, as event would.
func (s *Stream) argsByTemplate(ev sse.Event) bool {
	t := &s.args
	if t.p == nil || s.Continuing() || ev.Event != t.name {
		return false
	}
	p := t.p
	if st := s.blocks[t.idx]; st == nil || st.call != p || p.vetted || p.stopped {
		return false
	}
	var got [1][]byte
	if !t.Match(ev.Data, got[:]) {
		return false
	}
	s.fragment(p, relay.Get(got[0], "@this"))
	p.Hold(ev.Raw, held{t.idx, ev.Event})
	return true
}

// completeAll vets every open call, at the end of the message: a block that did not stop is
// blocked.
func (s *Stream) completeAll() {
	if len(s.open) == 0 {
		return
	}
	for _, p := range s.open {
		if !p.stopped {
			p.Call.Fail(ReasonIncomplete)
		}
	}
	s.complete(slices.Clone(s.open))
}

// complete vets calls together, then releases or replaces each.
func (s *Stream) complete(ps []*pending) {
	s.open = slices.DeleteFunc(s.open, func(p *pending) bool { return slices.Contains(ps, p) })
	for _, p := range ps {
		if !p.frags && p.Call.Problem() == "" {
			p.Call.Args = append(p.Call.Args[:0], p.start...)
		}
	}
	relay.Settle[held](&s.Relay, s.c, ps, func(d vet.Decision) { s.end(blockedJSON(d)) }, func(p *pending, d vet.Decision) {
		p.vetted = true
		switch {
		case d.Blocked() && relay.Answerable(s.c, p.Call, d):
			if !s.Parking() {
				s.rollback = s.nextOut
			}
			s.Refuse(relay.Answer(p.Call, d, false))
		default:
			s.Spoil()
		}
		st := s.blocks[p.idx]
		st.client = s.nextOut
		s.nextOut++
		if !d.Blocked() {
			p.released = true
			s.released = true
			for j, raw := range p.Call.Held() {
				s.writeHeld(raw, p.Meta[j].name, p.Meta[j].idx, st.client)
			}
		} else {
			s.notice(st.client, vet.Notice(d))
		}
		p.start = nil
	})
}

// notice writes a text block with the notice at index idx.
func (s *Stream) notice(idx int, text string) {
	start, _ := sjson.SetBytes([]byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`), pathIndex, idx)
	delta, _ := sjson.SetBytes([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`), pathIndex, idx)
	delta, _ = sjson.SetBytes(delta, "delta.text", text)
	stop, _ := sjson.SetBytes([]byte(`{"type":"content_block_stop","index":0}`), pathIndex, idx)
	s.Out = sse.AppendEvent(s.Out, evBlockStart, start)
	s.Out = sse.AppendEvent(s.Out, evBlockDelta, delta)
	s.Out = sse.AppendEvent(s.Out, evBlockStop, stop)
}

// late handles an event for a call that was already vetted. A blocked call's events are dropped
// quietly. A released call cannot take back what the client has: its late events are dropped and
// recorded (in error mode the stream ends; in audit mode they are passed on).
func (s *Stream) late(st *block, ev sse.Event, idx int) {
	if !st.call.released {
		return
	}
	switch d := s.AfterRelease(s.c, st.call.Call); {
	case !d.Blocked():
		s.write(ev, nil, idx, st.client)
	case s.c.Mode() == vet.ModeError:
		s.end(blockedJSON(d))
	}
}

// write puts a live event out: byte for byte unless data replaces its data or its index changes.
// client >= 0 is the index the client sees of a block event whose index is idx; -1 leaves the
// event's index as it is.
func (s *Stream) write(ev sse.Event, data []byte, idx, client int) {
	reindex := client >= 0 && idx != client
	if data == nil && !reindex {
		s.Out = append(s.Out, ev.Raw...)
		return
	}
	if data == nil {
		data = slices.Clone(ev.Data)
	}
	if reindex {
		data, _ = sjson.SetBytes(data, pathIndex, client)
	}
	s.Out = sse.AppendEvent(s.Out, ev.Event, data)
}

// writeHeld puts a held event out, with its index rewritten where it differs from the client's.
func (s *Stream) writeHeld(raw []byte, name string, idx, client int) {
	if idx == client {
		s.Out = append(s.Out, raw...)
		return
	}
	ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
	if err != nil {
		return // cannot happen: held events are whole
	}
	data, _ := sjson.SetBytes(slices.Clone(ev.Data), pathIndex, client)
	s.Out = sse.AppendEvent(s.Out, name, data)
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
	s.Out = sse.AppendEvent(s.Out, evError, errJSON)
	s.Ended = true
}

// blockedJSON is the error event data for a call blocked in error mode.
func blockedJSON(d vet.Decision) []byte {
	return ErrorJSON(vet.Notice(d), "permission_error", relay.CodeToolCallBlocked)
}

package gemini

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
)

// Stream vets a streamed answer (streamGenerateContent?alt=sse: each event one
// GenerateContentResponse). Read yields the upstream stream with every functionCall part held until
// it is vetted:
//
//   - An event without a call goes out byte for byte as soon as it is complete: text flows.
//   - Gemini sends a call whole, in one event. Its part is vetted when its event arrives (with
//     atomicParallelCalls, when every candidate has finished: the calls of the answer are vetted together,
//     and the events before go out without them). The event then goes out with each allowed call's part
//     where it was, a blocked call's part removed and, where no call of the candidate is left, a text part
//     with the notices (a held call's notice takes its place where a call is left); on error the stream
//     ends with an error event (Google's shape, reason tool_call_blocked).
//   - finishReason stays as the upstream sent it (STOP, whether or not the model called a function).
//   - An event whose data looks like JSON but is not one valid object with unique keys, whose keys differ
//     from known ones in case alone, or that gives a field by both its names is dropped, and every call
//     still held fails closed.
//   - If the upstream ends (or fails) before every candidate has a finishReason (or the prompt was blocked, or
//     it sent an error), held calls are dropped and the stream ends with an error event (reason
//     upstream_stream_truncated).
//
// In continue mode (SetNext) a round whose every call was refused is answered by promptgate and the
// upstream's next answer follows in the same stream, with the first round's responseId and the
// usage of every round summed into usageMetadata; the text an event holds before its refused call
// goes out at once (see split). A Stream is not safe for concurrent use.
type Stream struct {
	relay.Relay
	c    *vet.Checker
	keys []string

	// crlf: the upstream ends its events with CRLF lines (as Google does); promptgate's own events
	// follow it, since the official Go client splits a read at the first blank line of either kind,
	// and a mix of both in one read joins two events.
	crlf bool

	held     []*pending   // calls not yet vetted (atomic mode), in order
	finished map[int]bool // candidate index -> whether it has a finishReason
	ended    bool         // an error event, or a blocked prompt, ended the answer

	// In continue mode: the round's parts of candidate 0 as sent, for the turn promptgate answers;
	// the first round's responseId; the round's usage and the rounds' before it, summed.
	turn                    []string
	responseID              []byte
	roundUsage, roundsUsage []byte
}

var _ io.ReadCloser = (*Stream)(nil)

// pending is one functionCall part held until it is vetted.
type pending struct {
	relay.Pending[struct{}]
	cand int    // the candidate's index
	part []byte // the part as the upstream sent it
}

// NewStream wraps an upstream SSE body. c vets the calls; rec, which may be nil, is called for
// every vetted call.
func NewStream(upstream io.ReadCloser, c *vet.Checker, rec relay.Recorder) *Stream {
	s := &Stream{c: c, keys: answerKeys(), finished: map[int]bool{}}
	s.Relay = relay.New(upstream, rec, relay.Surface{
		Finished:  func() bool { return s.done() && len(s.held) == 0 },
		Truncated: func() { s.end(truncatedJSON()) },
		Malformed: s.malformed,
		Event:     s.event,
		MaxDepth:  maxDepth,
		End:       s.endRound,
	})
	return s
}

// done reports whether the answer is complete: every candidate finished, or the answer ended
// otherwise.
func (s *Stream) done() bool {
	if s.ended {
		return true
	}
	for _, f := range s.finished {
		if !f {
			return false
		}
	}
	return len(s.finished) > 0
}

// malformed fails every held call: an event that a client might read differently from us was
// dropped.
func (s *Stream) malformed() {
	for _, p := range s.held {
		p.Fail(vet.ReasonMalformedStream)
	}
}

// event handles one event whose data is a valid JSON object.
func (s *Stream) event(ev sse.Event) {
	s.crlf = bytes.HasSuffix(ev.Raw, []byte("\r\n\r\n"))
	data := ev.Data
	if relay.FoldedKeyOutside(data, s.keys, fArgs.camel()) {
		s.malformed()
		return
	}
	root := gjson.ParseBytes(data)
	if e, _ := get(root, fError); e.Exists() {
		s.dropHeld()
		s.ended = true
		s.Out = append(s.Out, ev.Raw...)
		return
	}
	cands, ok := get(root, fCandidates)
	if !ok {
		s.malformed()
		return
	}
	var ccs []candidate
	var calls []*pending
	for pos, cand := range cands.Array() {
		cc, err := readCandidate(cand, pos)
		if err != nil {
			s.malformed()
			return
		}
		f, _ := get(cand, fFinish)
		s.finished[cc.index] = s.finished[cc.index] || f.String() != ""
		for i, call := range cc.calls {
			p := &pending{Pending: relay.Pending[struct{}]{Call: call, Stream: s.Held()}, cand: cc.index, part: []byte(cc.parts[cc.at[i]].Raw)}
			p.Hold(p.part, struct{}{})
			calls = append(calls, p)
		}
		ccs = append(ccs, cc)
	}
	if fb, _ := get(root, fFeedback); fb.IsObject() {
		if br, _ := get(fb, fBlockReason); br.String() != "" {
			s.ended = true
		}
	}
	s.note(root, ccs)
	s.held = append(s.held, calls...)
	if len(s.held) == 0 || s.c.Atomic() && !s.done() {
		s.write(ev, root, ccs, nil, calls, nil)
		return
	}
	settled := s.held
	s.held = nil
	decided := map[*pending]vet.Decision{}
	relay.Settle[struct{}](&s.Relay, s.c, settled, func(d vet.Decision) { s.end(blockedJSON(d)) }, func(p *pending, d vet.Decision) {
		if d.Blocked() && relay.Answerable(s.c, p.Call, d) {
			s.Refuse(relay.Answer(p.Call, d, false))
		} else {
			s.Spoil()
		}
		decided[p] = d
	})
	if s.Ended {
		return
	}
	s.write(ev, root, ccs, settled, calls, decided)
}

// note keeps, in continue mode, what the round's turn and usage need: candidate 0's parts and the
// latest usageMetadata.
func (s *Stream) note(root gjson.Result, ccs []candidate) {
	if !s.Continuing() {
		return
	}
	for _, cc := range ccs {
		if cc.index == 0 {
			for _, p := range cc.parts {
				s.turn = append(s.turn, p.Raw)
			}
		}
	}
	if u, _ := get(root, fUsage); u.IsObject() {
		s.roundUsage = []byte(u.Raw)
	}
	if s.Round() == 0 && s.responseID == nil {
		if id, _ := get(root, fResponseID); id.Exists() {
			s.responseID = []byte(id.Raw)
		}
	}
}

// write puts the event out: byte for byte when nothing of it changes; else with the calls of this
// event (own) that are not vetted yet taken out, the settled calls placed as their decisions (ds)
// say, and, in a continued round, the first round's responseId and the usage summed.
func (s *Stream) write(ev sse.Event, root gjson.Result, ccs []candidate, settled, own []*pending, ds map[*pending]vet.Decision) {
	var data []byte
	edit := func(path string, raw []byte) {
		if data == nil {
			data = slices.Clone(ev.Data)
		}
		data, _ = sjson.SetRawBytes(data, path, raw)
	}
	if len(own) > 0 || len(settled) > 0 {
		ck := key(root, fCandidates)
		for _, cp := range placed(ccs, settled, own, ds) {
			if cp.pos < 0 {
				edit(ck+".-1", []byte(`{"content":{"role":"model","parts":`+string(relay.JoinArray(cp.parts))+`},"index":`+strconv.Itoa(cp.cand)+`}`))
				continue
			}
			cc := ccs[cp.pos]
			if sameParts(cc.parts, cp.parts) {
				continue
			}
			edit(ck+"."+strconv.Itoa(cp.pos)+"."+cc.contentKey+"."+cc.partsKey, relay.JoinArray(cp.parts))
		}
	}
	if s.Round() > 0 {
		if s.responseID != nil && root.Get(key(root, fResponseID)).Exists() {
			edit(key(root, fResponseID), s.responseID)
		}
		if u, _ := get(root, fUsage); u.IsObject() {
			edit(key(root, fUsage), relay.AddUsage(s.roundsUsage, []byte(u.Raw)))
		}
	}
	if len(settled) > 0 && s.Parking() {
		if data == nil {
			data = slices.Clone(ev.Data)
		}
		data = s.split(ev.Data, data, root, ccs, own)
	}
	if data == nil {
		s.Out = append(s.Out, ev.Raw...)
		return
	}
	s.appendEvent(data)
}

// split is for an event whose calls were all refused in a round that waits to be continued (one
// event holds a call whole, and often the text before it): what the client gets whatever becomes of
// the round — each candidate's parts before its first call of the event, without its finishReason
// or the usage — goes out at once as an event of its own; the rest of the event as written
// (written), which the round parks, is returned: the notices, the finish, the usage. orig is the
// event as the upstream sent it.
func (s *Stream) split(orig, written []byte, root gjson.Result, ccs []candidate, own []*pending) []byte {
	first := map[int]int{} // candidate index -> the part of its first call in this event
	for _, p := range own {
		if j, ok := first[p.cand]; !ok || p.Call.Index < j {
			first[p.cand] = p.Call.Index
		}
	}
	lead, rest := slices.Clone(orig), written
	ck := key(root, fCandidates)
	delivered := false
	for pos, cc := range ccs {
		n := len(cc.parts)
		if j, ok := first[cc.index]; ok {
			n = j
		}
		delivered = delivered || n > 0
		at := ck + "." + strconv.Itoa(pos)
		path := at + "." + cc.contentKey + "." + cc.partsKey
		var head, tail []string
		for i, p := range gjson.GetBytes(written, path).Array() {
			if i < n {
				head = append(head, p.Raw)
			} else {
				tail = append(tail, p.Raw)
			}
		}
		lead, _ = sjson.SetRawBytes(lead, path, relay.JoinArray(head))
		lead, _ = sjson.DeleteBytes(lead, at+"."+key(root.Get(at), fFinish))
		rest, _ = sjson.SetRawBytes(rest, path, relay.JoinArray(tail))
	}
	if !delivered {
		return written
	}
	lead, _ = sjson.DeleteBytes(lead, key(root, fUsage))
	if s.Round() > 0 && s.responseID != nil && root.Get(key(root, fResponseID)).Exists() {
		lead, _ = sjson.SetRawBytes(lead, key(root, fResponseID), s.responseID)
	}
	s.Deliver(s.frame(lead))
	return rest
}

// appendEvent writes an event of promptgate's with data, its lines ended as the upstream ends them.
func (s *Stream) appendEvent(data []byte) {
	if !s.crlf {
		s.Out = sse.AppendData(s.Out, data)
		return
	}
	s.Out = append(s.Out, s.frame(data)...)
}

// frame is an event of promptgate's with data, its lines ended as the upstream ends them.
func (s *Stream) frame(data []byte) []byte {
	ev := sse.AppendData(nil, data)
	if s.crlf {
		ev = bytes.ReplaceAll(ev, []byte("\n"), []byte("\r\n"))
	}
	return ev
}

// sameParts reports whether parts are the raw parts of was, in order.
func sameParts(was []gjson.Result, parts []string) bool {
	if len(was) != len(parts) {
		return false
	}
	for i, p := range was {
		if p.Raw != parts[i] {
			return false
		}
	}
	return true
}

// candidateParts are the parts a candidate gets in the event: of the event's candidate at pos, or
// of a new candidate (pos -1) for calls of an earlier event.
type candidateParts struct {
	cand, pos int
	parts     []string
}

// placed are the candidates' parts once the calls are placed (see Stream), in order: the event's
// candidates, then those it did not have. A call of this event keeps its place (or its notice does,
// when it is held and a call of its candidate is released); a settled call of an earlier event, and
// the notices of a candidate none of whose calls is released, follow its parts.
func placed(ccs []candidate, settled, own []*pending, ds map[*pending]vet.Decision) []*candidateParts {
	ownAt := map[[2]int]*pending{}
	for _, p := range own {
		ownAt[[2]int{p.cand, p.Call.Index}] = p
	}
	released := map[int]bool{}
	for _, p := range settled {
		if !ds[p].Blocked() {
			released[p.cand] = true
		}
	}
	var out []*candidateParts
	byCand := map[int]*candidateParts{}
	for pos, cc := range ccs {
		cp := &candidateParts{cand: cc.index, pos: pos}
		for j, part := range cc.parts {
			p := ownAt[[2]int{cc.index, j}]
			d, now := ds[p]
			switch {
			case p == nil || now && !d.Blocked():
				cp.parts = append(cp.parts, part.Raw)
			case now && released[cc.index] && d.Verdict == vet.VerdictHeld:
				cp.parts = append(cp.parts, string(textPart(vet.Notice(d))))
			}
		}
		out = append(out, cp)
		byCand[cc.index] = cp
	}
	notices := map[int][]string{}
	for _, p := range settled {
		d := ds[p]
		cp := byCand[p.cand]
		if cp == nil {
			cp = &candidateParts{cand: p.cand, pos: -1}
			out = append(out, cp)
			byCand[p.cand] = cp
		}
		earlier := ownAt[[2]int{p.cand, p.Call.Index}] != p
		switch {
		case !d.Blocked() && earlier:
			cp.parts = append(cp.parts, string(p.part))
		case d.Blocked() && !released[p.cand]:
			notices[p.cand] = append(notices[p.cand], vet.Notice(d))
		case d.Verdict == vet.VerdictHeld && earlier:
			cp.parts = append(cp.parts, string(textPart(vet.Notice(d))))
		}
	}
	for _, cp := range out {
		if ns := notices[cp.cand]; len(ns) > 0 {
			cp.parts = append(cp.parts, string(textPart(strings.Join(ns, "\n"))))
		}
	}
	return out
}

// endRound is called at the clean end of a round: in continue mode, when its calls were refused,
// the upstream is asked again and its answer read in place (see relay.Relay.EndRound).
func (s *Stream) endRound() bool {
	if !s.Continuing() || !s.EndRound(relay.Turn{Raw: relay.JoinArray(s.turn)}) {
		return false
	}
	s.roundsUsage = relay.AddUsage(s.roundsUsage, s.roundUsage)
	s.roundUsage, s.turn = nil, nil
	s.finished, s.ended = map[int]bool{}, false
	s.c.NewRound()
	if kept := s.Kept(); len(kept) > 0 { // the held calls' notices, with their codes: the client must see them
		data := []byte(`{"candidates":[{"content":{"role":"model","parts":[]},"index":0}]}`)
		data, _ = sjson.SetRawBytes(data, "candidates.0.content.parts", relay.JoinArray([]string{string(textPart(strings.Join(kept, "\n")))}))
		if s.responseID != nil {
			data, _ = sjson.SetRawBytes(data, fResponseID.camel(), s.responseID)
		}
		s.appendEvent(data)
	}
	return true
}

// dropHeld lets go of every held call without vetting it (the upstream failed).
func (s *Stream) dropHeld() {
	for _, p := range s.held {
		p.Drop()
	}
	s.held = nil
}

// end writes a final error event and stops reading upstream.
func (s *Stream) end(errJSON []byte) {
	s.dropHeld()
	s.appendEvent(errJSON)
	s.Ended = true
}

// Package relay is what the stream vetters of the surfaces (proxy/surface/chat,
// proxy/surface/responses, proxy/surface/messages, proxy/surface/gemini) share: the loop that reads
// upstream events and hands out the output they produce (Relay, which each surface's Stream embeds:
// it is the Stream's Read, Close, Err and Blocked), the one representation of a tool call being
// assembled from a stream (Pending), whose raw events are held until the call is complete and
// vetted, and the bookkeeping of decisions that a stream and a non-stream body share (Recorder,
// Result, Relay.Record).
//
// A surface package translates its wire format only: which events belong to which call, what a
// fragment adds, how a released event is renumbered and how a refusal is written. It does not
// know how SSE is split into events (proxy/sse does) or how a call is judged (policy/vet does).
package relay

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/sse"
)

// MaxCallBytes caps what is held for one streamed call (its raw events plus its arguments); a call
// that grows beyond it is blocked with vet.ReasonTooLarge and its bytes are let go at once.
const MaxCallBytes = 16 << 20

// MaxStreamBytes caps what the calls of one stream hold together (Held): the call that would grow
// them past it is blocked with vet.ReasonTooLarge and let go at once, as one past MaxCallBytes is.
const MaxStreamBytes = 4 * MaxCallBytes

// MaxEventBytes caps one upstream event: a bigger one (a line the upstream never ends, say) ends
// the stream as truncated instead of being buffered without bound.
const MaxEventBytes = MaxCallBytes

// doneData is the data of the [DONE] event that ends an OpenAI stream.
var doneData = []byte("[DONE]")

// doneEvent is the [DONE] event written in place of one whose data goes on after [DONE].
var doneEvent = []byte("data: [DONE]\n\n")

// Surface is what a Relay asks of the surface it relays. Finished, Truncated, Malformed and Event
// are required; Done, Observe and Pass may be nil.
type Surface struct {
	// Finished reports whether a clean end of the upstream now ends the stream quietly: a terminal
	// event went out and no call is held.
	Finished func() bool
	// Truncated writes what ends a stream whose upstream ended (or failed, see Relay.Err) before it
	// was finished, and ends it.
	Truncated func()
	// Done, when not nil, is called at a [DONE] event (data that starts with [DONE], as the
	// official SDKs read it): it vets every call still held. Unless that ended the stream, the
	// [DONE] event then goes out (as "data: [DONE]" alone, if its data went on) and the stream
	// ends. When nil, [DONE] is data like any other (it is not JSON, so it passes).
	Done func()
	// Observe, when not nil, sees the data of every event that carries data (other than [DONE])
	// before anything else is done with it.
	Observe func(data []byte)
	// Pass, when not nil, is asked about every event whose data starts like a JSON object before
	// it is checked; it returns true when it has handled the event (written it out), as a surface
	// does with an event that cannot carry a call.
	Pass func(ev sse.Event) bool
	// Malformed is called for an event whose data starts like a JSON object but is not one valid
	// object with unique keys (within MaxDepth): the event is dropped, and the surface fails every
	// held call, one of whose fragments it may have held.
	Malformed func()
	// Event handles an event whose data is one valid JSON object.
	Event func(ev sse.Event)
	// MaxDepth caps the nesting of an event's JSON (jsoncheck.DefaultMaxDepth when zero).
	MaxDepth int
	// Typed says that an event's data names its type in a "type" field: an event whose event: line
	// names another type is malformed, since clients that go by the line and clients that go by the
	// field would read it differently.
	Typed bool
	// Names are the event names (event: lines) the surface's streams use: the reader gives their
	// events these strings (sse.Reader.Names) instead of allocating one for each stream.
	Names []string
	// End, when not nil, is called when the upstream ends cleanly (at [DONE] once Done has run, or
	// at the end of its body once Finished): it returns true when the stream goes on, the surface
	// having continued it in place of the upstream (Relay.EndRound); [DONE] is then not written.
	End func() bool
}

// Relay reads an upstream SSE stream event by event and hands out what its Surface writes to Out.
// Comments and other events without data, and data that is not JSON, go out as they came. It is
// not safe for concurrent use.
type Relay struct {
	// Out is the output not yet read; the surface appends to it. It is reused once read.
	Out []byte
	// Ended is set when nothing more is to be read from upstream.
	Ended bool

	off int // read position in Out
	up  io.ReadCloser
	rd  *sse.Reader
	s   Surface
	err error

	// atDone is set when the stream ended at [DONE]: the upstream's body may still have its last
	// bytes to send.
	atDone bool

	rec     Recorder
	blocked int
	held    Held
	round   rounds

	// members is where the check of the event being handled found its members (Members); top
	// backs its Top for events of up to that many members.
	members jsoncheck.Members
	top     [12]jsoncheck.Member

	// known is text the surface has seen checked (Know); cut is the last event check read without
	// it (in the room after Out), cuts counts those events.
	known, cut []byte
	cuts       int
	// knownLent is the body that lent known's buffer, if one did.
	knownLent BufferLender
}

// New returns a Relay of upstream for s. rec, which may be nil, is called for every decision the
// surface records (see Record).
func New(upstream io.ReadCloser, rec Recorder, s Surface) Relay {
	rd := newReader(upstream)
	rd.Names(s.Names)
	return Relay{up: upstream, rd: rd, s: s, rec: rec}
}

// BufferLender is an upstream body that lends the relay's event reader its first buffer (from a
// pool of the proxy's, instead of one allocation per stream) and takes it back when the relay is
// done with that body.
type BufferLender interface {
	LendBuffer() []byte
	ReturnBuffer([]byte)
}

// newReader is the event reader of an upstream body, on the body's lent buffer when it lends one.
func newReader(up io.Reader) *sse.Reader {
	rd := sse.NewReaderMax(up, MaxEventBytes)
	if l, ok := up.(BufferLender); ok {
		rd.Lend(l.LendBuffer())
	}
	return rd
}

// closeUpstream gives the reader's and the known text's lent buffers back to the upstream body (no
// event of it is used after this, and the known text starts anew) and closes the body.
func (r *Relay) closeUpstream() error {
	r.returnKnown()
	if buf := r.rd.Release(); buf != nil {
		if l, ok := r.up.(BufferLender); ok {
			l.ReturnBuffer(buf)
		}
	}
	return r.up.Close()
}

// Err is the upstream's read error, if the upstream failed (other than by ending early).
func (r *Relay) Err() error { return r.err }

// Held is what the calls of this stream hold together: every Pending of the stream takes it.
func (r *Relay) Held() *Held { return &r.held }

// Finisher is an upstream body that can read what is left of it after the stream's last event (the
// end of a chunked body), within bounds of its own, so that its connection goes back to the pool
// instead of being dropped by a close before the body's end.
type Finisher interface {
	Finish()
}

// Close closes the upstream body; Read returns io.EOF once its output is read. A stream that ended
// at [DONE] has its body finished first, when the body is a Finisher (nothing after [DONE] is
// relayed).
func (r *Relay) Close() error {
	if f, ok := r.up.(Finisher); ok && r.atDone && r.err == nil {
		f.Finish()
	}
	r.Ended = true
	return r.closeUpstream()
}

// Read implements io.Reader. It reads the upstream only when it has no output left to give, so
// each event reaches a caller that flushes after every Read at once; events that are already
// buffered whole are handled first, while p has room for their output.
func (r *Relay) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.off == len(r.Out) {
		r.Out, r.off = r.Out[:0], 0
		if r.Ended {
			return 0, io.EOF
		}
		r.step()
	}
	n := copy(p, r.Out[r.off:])
	r.off += n
	// Events already buffered whole go out in the same Read (one write and flush for a burst), as
	// far as p has room; the relay never waits for more input while it has output. Each step's
	// output is moved to p at once, so that Out holds about one event's output, not a whole burst's
	// (it grew to the size of p, by doubling, on every stream).
	for n < len(p) && !r.Ended && r.rd.Buffered() {
		r.Out, r.off = r.Out[:0], 0 // n < len(p): all of Out is in p
		r.step()
		r.off = copy(p[n:], r.Out)
		n += r.off
	}
	return n, nil
}

// step reads one upstream event and has it handled. While a round waits to be continued (see
// Refuse), what the event writes is parked instead of handed out.
func (r *Relay) step() {
	if r.round.parking {
		r.round.mark = len(r.Out)
	}
	r.handle()
	if r.round.parking {
		r.round.parked = append(r.round.parked, r.Out[r.round.mark:]...)
		r.Out = r.Out[:r.round.mark]
		if r.Ended {
			r.flushRound() // the stream ends: what waited goes out
		}
	}
}

// handle reads one upstream event and has it handled.
func (r *Relay) handle() {
	ev, err := r.rd.Next()
	if errors.Is(err, io.EOF) && !ev.Truncated && r.s.Finished() {
		if r.s.End != nil && r.s.End() {
			return
		}
		r.Ended = true
		return
	}
	if err != nil || ev.Truncated {
		if err == nil {
			// The reader gives the unfinished event first and the cause on the next call: keep the
			// cause, so that the operator's log says why the stream broke off.
			_, err = r.rd.Next()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			r.err = err
		}
		r.s.Truncated()
		return
	}
	if !ev.Plain && !Canonical(ev.Raw) {
		// Clients split lines differently (openai-go at LF only, go-openai trims each line): what
		// goes out is what this relay read, framed so that every client reads the same.
		ev.Raw = Reframe(ev)
	}
	if !ev.HasData {
		r.Out = append(r.Out, ev.Raw...) // comment, keep-alive
		return
	}
	if r.s.Done != nil && bytes.HasPrefix(ev.Data, doneData) {
		r.s.Done()
		if !r.Ended && r.s.End != nil && r.s.End() {
			return
		}
		if !r.Ended {
			// What follows [DONE] in its data (a client may read it) is not forwarded.
			if bytes.Equal(ev.Data, doneData) {
				r.Out = append(r.Out, ev.Raw...)
			} else {
				r.Out = append(r.Out, doneEvent...)
			}
			r.Ended, r.atDone = true, true
		}
		return
	}
	if r.s.Observe != nil {
		r.s.Observe(ev.Data)
	}
	if !LooksJSON(ev.Data) {
		r.Out = append(r.Out, ev.Raw...) // not a JSON object or array: no client reads a call from it
		return
	}
	if r.s.Pass != nil && r.s.Pass(ev) {
		return
	}
	if r.check(ev.Data) != nil ||
		r.s.Typed && ev.Event != "" && Get(ev.Data, "type").Str != ev.Event {
		// A client might read it differently from us.
		r.s.Malformed()
		return
	}
	r.s.Event(ev)
}

// Members is where the check of the event that Surface.Event is handling found the members of its
// data (their offsets in ev.Data as Event got it), and whether some key of it may fold: what the
// surface would otherwise walk the data again to find. It is valid during that Event call only.
func (r *Relay) Members() *jsoncheck.Members { return &r.members }

// LooksJSON reports whether some client could read data, or one of its lines, as a JSON object
// or array (a client of a streaming API that also answers as an array of objects, as Gemini's
// does without alt=sse, may take an array's objects as events): a line that starts with '{' or
// '[' after any white space (Unicode spaces, form feed, vertical tab and a byte-order mark
// included; lenient clients trim those, and go-openai reads every data line of an event alone),
// but for the end marker [DONE]. Such data must be one valid object, or it is malformed.
func LooksJSON(data []byte) bool {
	if len(data) > 0 && data[0] == '{' {
		return true // its first line does
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimLeftFunc(line, func(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' })
		if len(line) > 0 && (line[0] == '{' || line[0] == '[' && !bytes.Equal(bytes.TrimRightFunc(line, unicode.IsSpace), doneData)) {
			return true
		}
	}
	return false
}

// Canonical reports whether every SSE client reads raw (one whole event) as proxy/sse does: its
// lines end in LF or CRLF (a lone CR is a line end for the SSE specification but not for
// openai-go, which splits at LF only, nor for go-openai), and each line is blank, a comment or
// starts with a field name this relay knows (go-openai trims a line before it looks for
// "data:", the WHATWG parser drops a byte-order mark; a line such as " data: ..." is read by one
// and not by another).
func Canonical(raw []byte) bool {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return false // a truncated event is never forwarded as it came
		}
		line := raw[:i]
		raw = raw[i+1:]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return false
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		ok := false
		for _, f := range fieldPrefixes {
			if bytes.HasPrefix(line, f) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// fieldPrefixes are the line starts Canonical accepts.
var fieldPrefixes = [][]byte{[]byte("data:"), []byte("event:"), []byte("id:"), []byte("retry:")}

// Reframe writes ev again from its parsed fields, with LF line ends and no comment or unknown
// line, so that every client reads the event, and only the event, that proxy/sse read. An event
// with no field left is a comment line (it still keeps an idle connection alive).
func Reframe(ev sse.Event) []byte {
	var b []byte
	if ev.Event != "" {
		b = append(append(append(b, "event: "...), ev.Event...), '\n')
	}
	if ev.HasID {
		b = append(append(append(b, "id: "...), ev.ID...), '\n')
	}
	if ev.HasRetry {
		b = append(append(append(b, "retry: "...), strconv.FormatInt(ev.Retry, 10)...), '\n')
	}
	switch {
	case ev.HasData:
		return sse.AppendData(b, ev.Data)
	case len(b) > 0:
		return append(b, '\n')
	default:
		return []byte(":\n\n")
	}
}

// FoldedKey reports whether some object key in data (at any depth) is not one of names but equals
// one of them under Unicode case folding, as Go's encoding/json matches keys (go-openai reads
// "TOOL_CALLS" or "tool_callſ" as tool_calls, and the last of two such keys wins): such data is
// malformed, since this relay reads keys exactly. data must be valid JSON.
func FoldedKey(data []byte, names []string) bool {
	return FoldedKeyOutside(data, names, "")
}

// FoldedKeyOutside is FoldedKey that does not look inside the values of the keys named skip (a
// tool's own arguments, whose keys are the tool's).
func FoldedKeyOutside(data []byte, names []string, skip string) bool {
	lower := lowerASCII(names)
	if lower && !keysMayFold(data) {
		return false // no key of data can fold to a name without being it (see mayFold)
	}
	return foldedKey(Get(data, "@this"), names, skip, lower)
}

// KeysMayFold reports whether some key of data, which must be valid JSON, may equal one of names
// under case folding without being it: false is certain (no key holds a capital, a non-ASCII byte
// or a \u escape, and every name is lowercase ASCII), true means a walk of the keys must decide.
func KeysMayFold(data []byte, names []string) bool {
	return !lowerASCII(names) || keysMayFold(data)
}

// lowerASCII reports whether every name is lowercase ASCII.
func lowerASCII(names []string) bool {
	for _, n := range names {
		for i := range len(n) {
			if c := n[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
				return false
			}
		}
	}
	return true
}

// mayFold reports whether s holds an uppercase ASCII letter, a byte of a non-ASCII character or,
// where escapes count (s is raw JSON), a \u escape, the only one that can spell a letter. A key
// without any is ASCII without capitals: under case folding it equals a lowercase ASCII name only
// when it is that name.
func mayFold[T ~string | ~[]byte](s T, escapes bool) bool {
	for i := range len(s) {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' || escapes && c == '\\' && i+1 < len(s) && s[i+1] == 'u' {
			return true
		}
	}
	return false
}

// keysMayFold reports whether some key of data, which is valid JSON, may fold (see mayFold), in one
// pass over its bytes that reads the raw bytes of keys only: a value's capitals (text, a call's
// arguments) do not cost the walk of every key.
func keysMayFold(data []byte) bool {
	for i := 0; ; {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return false
		}
		start := i + q + 1
		end := stringEnd(data, start)
		if end < 0 {
			return true // not valid JSON: the walk decides
		}
		k := end + 1
		for k < len(data) && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r') {
			k++
		}
		if k < len(data) && data[k] == ':' && mayFold(data[start:end], true) {
			return true
		}
		i = end + 1
	}
}

// stringEnd returns the index of the quote that closes the JSON string whose contents start at
// start, or -1.
func stringEnd(data []byte, start int) int {
	for i := start; ; {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return -1
		}
		end := i + q
		n := 0 // backslashes right before the quote: an odd count escapes it
		for j := end - 1; j >= start && data[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return end
		}
		i = end + 1
	}
}

func foldedKey(v gjson.Result, names []string, skip string, lower bool) bool {
	found := false
	isObj := v.IsObject()
	if !isObj && !v.IsArray() {
		return false
	}
	v.ForEach(func(k, val gjson.Result) bool {
		if isObj && (!lower || mayFold(k.Str, false)) {
			for _, n := range names {
				if k.Str != n && strings.EqualFold(k.Str, n) {
					found = true
					return false
				}
			}
		}
		if isObj && skip != "" && k.Str == skip {
			return true
		}
		found = foldedKey(val, names, skip, lower)
		return !found
	})
	return found
}

// ContainsFold reports whether s is in data, ASCII letters matched without regard to case (Unicode
// folds only k and s to other letters; sub must hold neither, and must start with a byte that is
// not a letter).
func ContainsFold(data []byte, sub string) bool {
	for i := 0; i+len(sub) <= len(data); i++ {
		j := bytes.IndexByte(data[i:], sub[0])
		if j < 0 || i+j+len(sub) > len(data) {
			return false
		}
		i += j
		if bytes.EqualFold(data[i:i+len(sub)], []byte(sub)) {
			return true
		}
	}
	return false
}

// Pending is one tool call being assembled from a stream, the same on every surface: the vet.Call
// that gathers its id, name and arguments and holds its raw events, and per held event what the
// surface needs to write it again (M). A call whose held events had to be let go before it was
// vetted (Lost) can never be released.
type Pending[M any] struct {
	Call *vet.Call
	// Meta has one entry per held event.
	Meta []M
	// Lost is why the held events were let go before the call was vetted ("" while they are held).
	Lost string
	// Stream is what the calls of the stream hold together (Relay.Held); nil bounds the call alone.
	Stream *Held
	// counted is what this call adds to Stream.
	counted int
}

// Held counts the bytes that the calls of one stream hold together, against MaxStreamBytes.
type Held struct{ bytes int }

// Hold keeps a raw event of the call and its meta, or lets go of everything once the call would
// hold more than MaxCallBytes, or its stream's calls more than MaxStreamBytes together (the call
// fails with vet.ReasonTooLarge). A call that lost its events holds nothing more, its arguments
// included.
func (p *Pending[M]) Hold(raw []byte, m M) {
	if p.Lost != "" {
		p.Call.Args = nil
		return
	}
	size := p.Call.HeldBytes() + len(raw)
	if size > MaxCallBytes || (p.Stream != nil && p.Stream.bytes-p.counted+size > MaxStreamBytes) {
		p.Fail(vet.ReasonTooLarge)
		return
	}
	p.Call.Hold(raw)
	p.Meta = append(p.Meta, m)
	p.count(size)
}

// count records that the call now holds size bytes.
func (p *Pending[M]) count(size int) {
	if p.Stream != nil {
		p.Stream.bytes += size - p.counted
	}
	p.counted = size
}

// Fail fails the call for reason and lets go of its held events and arguments: it can never be
// released.
func (p *Pending[M]) Fail(reason string) {
	p.Call.Fail(reason)
	if p.Lost == "" {
		p.Lost = reason
	}
	p.Drop()
	p.Call.Args = nil
}

// Drop lets go of the held events; the arguments no longer count against the stream's bound
// (whoever drops them keeps them only to vet the call).
func (p *Pending[M]) Drop() {
	p.Call.Drop()
	p.Meta = nil
	p.count(0)
}

// Call is a surface's own call type: one that embeds a Pending.
type Call[M any] interface{ pending() *Pending[M] }

func (p *Pending[M]) pending() *Pending[M] { return p }

// Verdicts vets calls together. A call that lost its held events is blocked for that reason,
// whatever the mode. culprit is as Culprit says.
func Verdicts[M any, P Call[M]](c *vet.Checker, ps []P) (ds []vet.Decision, culprit int) {
	calls := make([]*vet.Call, len(ps))
	for i, p := range ps {
		calls[i] = p.pending().Call
	}
	ds = c.VetBatch(calls)
	for i, p := range ps {
		if lost := p.pending().Lost; lost != "" {
			ds[i].Kind, ds[i].Verdict, ds[i].Reason, ds[i].Rule = vet.KindToolCall, vet.VerdictBlocked, lost, ""
			ds[i].Notice, ds[i].More = "", nil
		}
	}
	return ds, Culprit(c, ds)
}

// Culprit is, in error mode, the decision whose block ends the stream: the first call blocked for
// itself (not for its batch, nor held for confirmation: a held call's notice goes to the client in
// every mode, and so do the notices of its batch); -1 when there is none or the mode is not error.
func Culprit(c *vet.Checker, ds []vet.Decision) int {
	if c.Mode() != vet.ModeError {
		return -1
	}
	for i, d := range ds {
		if d.Verdict == vet.VerdictBlocked && d.Reason != vet.ReasonBatch {
			return i
		}
	}
	return -1
}

// Get is gjson.GetBytes without its copies: the strings of the result alias data, so nothing of
// it may be kept beyond the event (strings.Clone what is kept). It is for the reads of the text
// path, which must not allocate per event.
func Get(data []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), path)
}

// Parse reads the JSON value v, as gjson.Parse does, its strings aliasing v (see Get).
func Parse(v []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(v), len(v)))
}

// IntField reads an integer JSON number (no fraction or exponent), as a strict client would.
func IntField(v gjson.Result) (int, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	n, err := strconv.Atoi(v.Raw)
	return n, err == nil
}

// JoinArray builds a JSON array of raw elements.
func JoinArray(raws []string) []byte {
	n := 2
	for _, r := range raws {
		n += len(r) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, r := range raws {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	return append(b, ']')
}

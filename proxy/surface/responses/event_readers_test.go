package responses

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// readersRun is what a stream did: its output (notice ids made alike), decisions, and what its
// callbacks were given.
type readersRun struct {
	out     []byte
	ds      []vet.Decision
	blocked int
	calls   []string // the callbacks, in order, with what each was given
}

// readersOpts are the options of a stream that the fuzz target varies.
type readersOpts struct {
	mode                 vet.Mode
	atomic, hosted, inst bool
	split                int
	seed                 uint64
}

// runReaders pipes input through a Stream, with full (every event read by the stream's own walks)
// or without (the head and key check taken from the relay's check).
func runReaders(t *testing.T, input []byte, o readersOpts, full bool) readersRun {
	t.Helper()
	var r readersRun
	c := checkerFor(o.mode, o.atomic)
	if o.hosted {
		c = hostedCheckerFuzz(o.mode)
	}
	var up io.Reader = bytes.NewReader(input)
	if o.split > 0 {
		up = &relaytest.ChunkReader{Data: input, Rnd: rand.New(rand.NewPCG(o.seed, 1)), Max: o.split}
	}
	s := NewStream(io.NopCloser(up), c, func(d vet.Decision) { r.ds = append(r.ds, d) })
	s.full = full
	s.Hosted = o.hosted
	if o.inst {
		s.Instructions = []byte(`"be brief"`)
	}
	s.OnResponseID = func(id string) { r.calls = append(r.calls, "id "+id) }
	s.OnShown = func(sh Shown) {
		r.calls = append(r.calls, fmt.Sprintf("shown %s %s %d %d %t", normID(sh.Output), sh.Usage, sh.Blocked, sh.Rounds, sh.Unanswered))
	}
	s.OnFinal = func(out []byte) { r.calls = append(r.calls, "final "+string(normID(out))) }
	s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
		r.calls = append(r.calls, fmt.Sprintf("next %s", normID([]byte(fmt.Sprintf("%s %s %s %+v", tu.Raw, tu.ResponseID, tu.Text, tu.Calls)))))
		return io.NopCloser(strings.NewReader(hostedRound2())), nil
	})
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	r.out, r.blocked = normID(out), s.Blocked()
	return r
}

// FuzzEventReaders: the shortcuts change nothing — the templates (pass and argument deltas), the
// text deltas known to the relay's check of the done events (relay.Relay.Know), the head and key
// check that event takes from the relay's check (headOf, Members.FoldableKey): the same stream
// read without any (Stream.full: every event checked whole and read with the stream's own walks,
// readHead and foldedKeys on every event) gives the same bytes, decisions and callbacks, in every
// mode, atomic or not, hosted or not, instructions replaced or not, split at random.
func FuzzEventReaders(f *testing.F) {
	for _, tc := range streamCases {
		f.Add([]byte(tc.in), relaytest.ModeByte(tc.mode), tc.atomic, uint8(0), uint64(1), uint8(0))
		f.Add([]byte(tc.in), relaytest.ModeByte(tc.mode), !tc.atomic, uint8(5), uint64(2), uint8(3))
	}
	// Case variants of the keys a client reads a call from, and keys written with escapes.
	for _, ev := range caseVariantEvents() {
		r := (&rs{}).created().message(0, "msg_1", "Hi.", 4)
		f.Add([]byte(r.ev(ev[0], ev[1]).completed().String()), byte(0), false, uint8(0), uint64(1), uint8(0))
	}
	escaped := (&rs{}).created().message(0, "msg_1", "Hi.", 4).
		ev("response.output_item.added", `{"output_\u0069ndex":1,"item":`+fnItem("fc_1", "call_1", "get_weather", "", "in_progress")+`}`).
		ev("response.function_call_arguments.delta", `{"item_id":"fc_1","output_index":1,"d\u0065lta":"{}"}`).
		ev("response.output_item.done", `{"output_index":1,"\u0069tem":`+fnItem("fc_1", "call_1", "get_weather", "{}", "completed")+`}`)
	f.Add([]byte(escaped.completed().String()), byte(0), false, uint8(0), uint64(1), uint8(0))
	f.Add([]byte(benchText()), byte(0), false, uint8(0), uint64(1), uint8(2))
	for i, in := range knownTextStreams() {
		f.Add([]byte(in), byte(i), i%2 == 0, uint8(i%3*5), uint64(i), uint8(i%4))
	}
	f.Add([]byte(benchTools()), byte(1), true, uint8(7), uint64(3), uint8(1))
	f.Add([]byte(hostedRound2()), byte(2), false, uint8(0), uint64(1), uint8(1))
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64, opts uint8) {
		o := readersOpts{mode: relaytest.FuzzMode(mode), atomic: atomic, hosted: opts&1 != 0, inst: opts&2 != 0,
			split: int(split % 16), seed: seed}
		short, full := runReaders(t, input, o, false), runReaders(t, input, o, true)
		if !bytes.Equal(short.out, full.out) {
			i := 0
			for i < min(len(short.out), len(full.out)) && short.out[i] == full.out[i] {
				i++
			}
			t.Fatalf("output differs from byte %d:\nshortcut %q\nfull     %q", i, short.out[i:], full.out[i:])
		}
		if !reflect.DeepEqual(short.ds, full.ds) || short.blocked != full.blocked {
			t.Fatalf("decisions differ:\nshortcut %+v (%d blocked)\nfull     %+v (%d blocked)", short.ds, short.blocked, full.ds, full.blocked)
		}
		if !reflect.DeepEqual(short.calls, full.calls) {
			t.Fatalf("callbacks differ:\nshortcut %q\nfull     %q", short.calls, full.calls)
		}
	})
}

// FuzzHeadOf: for every object the relay's check accepts, headOf reads what readHead reads, and
// where the check found no key that may fold, neither does foldedKeys.
func FuzzHeadOf(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"delta":"x"}`,
		`{"type":"response.output_item.done","output_index":1e0,"item":{"id":"fc_1","type":"function_call"}}`,
		`{"typ\u0065":"error","sequence_number":-1.5,"response":null}`,
		`{"response":{"output":[{"Type":"function_call"}]},"item":[],"item_id":7}`,
		`{"type":"x","ITEM":{"type":"function_call"},"item_id":"a\"b"}`,
		`{"type":"x","item":{"tyṗe":1},"output_index":"0"}`,
		` {"type" : "x" , "sequence_number" : 12 , "output_index" : -0 } `,
		`{"":{"type":"function_call"},"type":true,"item_id":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m jsoncheck.Members
		if jsoncheck.ObjectMembers(data, jsoncheck.Limits{MaxDepth: maxDepth}, "", &m) != nil {
			return
		}
		if !m.FoldableKey && (foldedKeys(data) || relay.KeysMayFold(data, respKeys)) {
			t.Fatalf("the check found no key that may fold, the walk does: %q", data)
		}
		h, ok := headOf(data, m.Top)
		if !ok {
			for _, mb := range m.Top {
				if mb.KeyEscaped {
					return
				}
			}
			t.Fatalf("headOf refused an object without escaped keys: %q", data)
		}
		want := readHead(data)
		for i, pair := range [][2]gjson.Result{{h.typ, want.typ}, {h.seq, want.seq}, {h.oi, want.oi},
			{h.itemID, want.itemID}, {h.item, want.item}, {h.response, want.response}} {
			g, w := pair[0], pair[1]
			if g.Type != w.Type || g.Raw != w.Raw || g.Str != w.Str || g.Num != w.Num || g.Exists() != w.Exists() {
				t.Fatalf("member %d of %q: headOf %+v, readHead %+v", i, data, g, w)
			}
		}
	})
}

// knownTextStreams are streams whose done events repeat a text long enough to be known to the
// relay's check, as it was cut into deltas (escapes, quotes, non-ASCII, emoji) or not: the text
// changed in a done event, held in a key, twice in an event, after an escaped quote; and text
// deltas that the check refuses (an unknown escape, a control byte, a byte that is not UTF-8, half
// a surrogate pair) while a call is held, passed by no template.
func knownTextStreams() []string {
	text := strings.Repeat("Zürich \"quoted\" back\\slash 😀 tab\t\u0001 ", 4)
	long := strings.Repeat(" word", 30)
	msg := func(r *rs, oi int, id string, deltas []string, doneText string) *rs {
		at := `"item_id":"` + id + `","output_index":` + itoa(oi) + `,"content_index":0`
		r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":{"id":"`+id+`","type":"message","status":"in_progress","content":[],"role":"assistant"}}`)
		for _, d := range deltas {
			r.ev("response.output_text.delta", `{`+at+`,"delta":`+d+`,"logprobs":[]}`)
		}
		part := `{"type":"output_text","annotations":[],"text":` + doneText + `}`
		r.ev("response.output_text.done", `{`+at+`,"text":`+doneText+`,"logprobs":[]}`)
		r.ev("response.content_part.done", `{`+at+`,"part":`+part+`}`)
		done := `{"id":"` + id + `","type":"message","status":"completed","content":[` + part + `],"role":"assistant"}`
		r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+done+`}`)
		r.output = append(r.output, done)
		return r
	}
	pieces := func(s string, n int) []string {
		var out []string
		for _, p := range splitRunes(s, n) {
			out = append(out, jstr(p))
		}
		return out
	}
	heldCall := func(r *rs) *rs {
		return r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_1", "call_1", "get_weather", "", "in_progress")+`}`).
			ev("response.function_call_arguments.delta", `{"item_id":"fc_1","output_index":0,"delta":`+jstr(weatherArgs)+`}`).
			ev("response.output_item.done", `{"output_index":0,"item":`+fnItem("fc_1", "call_1", "get_weather", weatherArgs, "completed")+`}`)
	}
	var out []string
	out = append(out, (&rs{}).created().message(0, "msg_1", text, 3).completed().String())
	out = append(out, msg((&rs{}).created(), 0, "msg_1", pieces(text, 5), jstr(text)).completed().String())
	out = append(out, msg((&rs{}).created(), 0, "msg_1", pieces(long, 4), jstr(long+"!")).completed().String())
	out = append(out, msg((&rs{}).created(), 0, "msg_1", pieces(long, 4), `"\u0020`+jstr(long)[2:]).completed().String())
	r := (&rs{}).created()
	heldCall(r)
	out = append(out, msg(r, 1, "msg_1", pieces(long, 7), jstr(long)).completed().String())
	r = msg((&rs{}).created(), 0, "msg_1", pieces(long, 6), jstr(long))
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":0,"content_index":0,`+jstr(long)+`:1,"text":`+jstr(long)+`}`)
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":0,"content_index":0,"text":`+jstr(long)+`,`+jstr(long)+`:1}`)
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":0,"content_index":0,"text":"x\"`+jstr(long)[1:]+`}`)
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":0,"content_index":0,"text":`+jstr(long)+jstr(long)+`}`)
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":0,"content_index":0,"a":`+jstr(long)+`,"b":`+jstr(long)+`}`)
	out = append(out, r.completed().String())
	// The members that event reads after the known text: the head of a done event, and the
	// instructions of the final response.
	r = msg((&rs{}).created(), 0, "msg_1", pieces(long, 6), jstr(long))
	r.evs = append(r.evs, "event: response.output_text.done\ndata: {\"text\":"+jstr(long)+`,"type":"response.output_text.done",`+
		`"sequence_number":`+itoa(r.seq)+`,"item_id":"msg_1","output_index":0,"content_index":0}`+"\n\n")
	r.seq++
	r.ev("response.completed", `{"response":{"output":[`+strings.Join(r.output, ",")+`],"instructions":"be long","id":"resp_1",`+
		`"object":"response","status":"completed","usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}`)
	out = append(out, r.String())
	r = (&rs{}).created()
	heldCall(r)
	r = msg(r, 1, "msg_1", pieces(long, 6), jstr(long))
	r.ev("response.output_text.done", `{"item_id":"msg_1","output_index":1,"content_index":0,`+jstr(long)+`:1,`+jstr(long)+`:2}`)
	out = append(out, r.completed().String())
	for _, bad := range []string{`"x\q"`, "\"x\x01\"", "\"x\xff\"", `"\ud800"`, `"\ud83d"`, `"\ude00"`} {
		r := (&rs{}).created()
		heldCall(r)
		deltas := append(pieces(long, 5), bad)
		deltas = append(deltas, pieces(long, 5)...)
		out = append(out, msg(r, 1, "msg_1", deltas, jstr(long+long)).completed().String())
	}
	return out
}

// TestDoneEventsReadKnownText: the four events that repeat a message's text whole (output_text.done,
// content_part.done, the message's output_item.done, response.completed) are checked without
// reading it again, however it was cut into deltas and escaped; with full, none is.
func TestDoneEventsReadKnownText(t *testing.T) {
	for _, in := range [][]byte{benchText(), []byte(knownTextStreams()[0]), []byte(knownTextStreams()[1])} {
		for _, full := range []bool{false, true} {
			s := NewStream(io.NopCloser(bytes.NewReader(in)), checkerFor(vet.ModeRefuse, false), nil)
			s.full = full
			if _, err := io.ReadAll(s); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 3, true: 0}[full]; s.KnownCuts() != want {
				t.Errorf("full %v: %d events checked without the known text, want %d", full, s.KnownCuts(), want)
			}
		}
	}
}

// TestDigitsValue: a sequence number the templates read is what strconv.Atoi reads, or left to the
// full reading.
func TestDigitsValue(t *testing.T) {
	for _, d := range []string{"0", "7", "007", "123456789", "999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808", ""} {
		got, ok := digitsValue([]byte(d))
		want, err := strconv.Atoi(d)
		if ok && (err != nil || got != int64(want)) {
			t.Errorf("digitsValue(%q) = %d, Atoi %d %v", d, got, want, err)
		}
		if !ok && len(d) > 0 && len(d) <= 18 {
			t.Errorf("digitsValue(%q) refused", d)
		}
	}
}

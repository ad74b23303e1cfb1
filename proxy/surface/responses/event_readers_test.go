package responses

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
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

// FuzzEventReaders: the head and key check that event takes from the relay's check of an event
// (headOf, Members.FoldableKey) change nothing: the same stream read with the stream's own walks
// (readHead, foldedKeys on every event) gives the same bytes, decisions and callbacks.
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

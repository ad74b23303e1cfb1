package messages

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

const noticeBadFetch = "[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed"

type streamCase struct {
	name   string
	in     string
	mode   vet.Mode
	atomic bool
	// want
	types     []string // block types the client assembles, in order
	tools     []cblock // tool_use blocks: ID, Name, Input
	text      string
	stop      string
	errCode   string
	identical bool
	blocked   int
	leaks     []string
}

func tb(id, name, input string) cblock {
	return cblock{Type: "tool_use", ID: id, Name: name, Input: input}
}

var streamCases = []streamCase{
	{
		name: "allowed calls pass byte for byte",
		in: (&as{}).start().text(0, "Checking.", 3).tool(1, "toolu_a", "web_fetch", fetchGood, 4).
			tool(2, "toolu_c", "get_weather", weatherArgs, 1).end("tool_use").String(),
		mode: vet.ModeRefuse, identical: true,
		types: []string{"text", "tool_use", "tool_use"},
		tools: []cblock{tb("toolu_a", "web_fetch", fetchGood), tb("toolu_c", "get_weather", weatherArgs)},
		text:  "Checking.", stop: "tool_use",
	},
	{
		name: "refuse replaces the bad call by a text block",
		in: (&as{}).start().text(0, "Checking.", 3).tool(1, "toolu_a", "web_fetch", fetchGood, 4).
			tool(2, "toolu_b", "web_fetch", fetchBad, 2).tool(3, "toolu_c", "get_weather", weatherArgs, 1).end("tool_use").String(),
		mode:  vet.ModeRefuse,
		types: []string{"text", "tool_use", "text", "tool_use"},
		tools: []cblock{tb("toolu_a", "web_fetch", fetchGood), tb("toolu_c", "get_weather", weatherArgs)},
		text:  "Checking." + noticeBadFetch, stop: "tool_use",
		blocked: 1, leaks: []string{"toolu_b", "evil", "SECRET123"},
	},
	{
		name: "no call left: stop_reason end_turn",
		in:   (&as{}).start().text(0, "Checking.", 3).tool(1, "toolu_b", "web_fetch", fetchBad, 2).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text", "text"}, text: "Checking." + noticeBadFetch, stop: "end_turn",
		blocked: 1, leaks: []string{"toolu_b", "SECRET123"},
	},
	{
		name: "error mode ends the stream",
		in:   (&as{}).start().text(0, "Checking.", 3).tool(1, "toolu_b", "web_fetch", fetchBad, 2).end("tool_use").String(),
		mode: vet.ModeError, types: []string{"text"}, text: "Checking.", errCode: relay.CodeToolCallBlocked,
		blocked: 1, leaks: []string{"toolu_b", "SECRET123"},
	},
	{
		name: "audit passes everything byte for byte",
		in:   (&as{}).start().tool(0, "toolu_b", "web_fetch", fetchBad, 2).tool(1, "toolu_x", "delete_all", `{}`, 2).end("tool_use").String(),
		mode: vet.ModeAudit, identical: true, types: []string{"tool_use", "tool_use"},
		tools: []cblock{tb("toolu_b", "web_fetch", fetchBad), tb("toolu_x", "delete_all", `{}`)}, stop: "tool_use",
	},
	{
		name: "a tool that is not allowed",
		in:   (&as{}).start().tool(0, "toolu_x", "delete_all", `{"all":true}`, 3).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text"}, stop: "end_turn", blocked: 1,
		text:  "[promptgate] blocked tool call delete_all: tool not allowed",
		leaks: []string{"toolu_x", `\"all\"`},
	},
	{
		name: "schema violation",
		in:   (&as{}).start().tool(0, "toolu_w", "get_weather", `{"town":"Oslo"}`, 3).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text"}, stop: "end_turn", blocked: 1,
		text:  "[promptgate] blocked tool call get_weather: arguments do not match schema: at #: missing property 'city'",
		leaks: []string{"toolu_w", "town"},
	},
	{
		name: "invalid json input",
		in:   (&as{}).start().tool(0, "toolu_j", "search", `{"q":"x"`, 3).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text"}, stop: "end_turn", blocked: 1,
		text:  "[promptgate] blocked tool call search: arguments are not valid json: syntax error at offset 8",
		leaks: []string{"toolu_j"},
	},
	{
		name: "a tool without input fragments keeps its start input",
		in: (&as{}).start().ev("content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"toolu_s","name":"search","input":{}}}`).
			ev("content_block_stop", `{"index":0}`).end("tool_use").String(),
		mode: vet.ModeRefuse, identical: true, types: []string{"tool_use"}, tools: []cblock{tb("toolu_s", "search", `{}`)}, stop: "tool_use",
	},
	{
		name: "input at the start and in fragments is ambiguous",
		in: (&as{}).start().ev("content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"toolu_s","name":"search","input":{"q":"a"}}}`).
			ev("content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\":\"b\"}"}}`).
			ev("content_block_stop", `{"index":0}`).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text"}, stop: "end_turn", blocked: 1,
		text: "[promptgate] blocked tool call search: " + ReasonAmbiguousInput, leaks: []string{"toolu_s"},
	},
	{
		name: "atomic blocks the whole batch",
		in: (&as{}).start().tool(0, "toolu_a", "web_fetch", fetchGood, 4).tool(1, "toolu_b", "web_fetch", fetchBad, 2).
			end("tool_use").String(),
		mode: vet.ModeRefuse, atomic: true, types: []string{"text", "text"}, stop: "end_turn", blocked: 2,
		text:  "[promptgate] blocked tool call web_fetch: another call of the batch was blocked" + noticeBadFetch,
		leaks: []string{"toolu_a", "toolu_b", "SECRET123"},
	},
	{
		name: "atomic: text after a held call goes first, the call is renumbered",
		in:   (&as{}).start().tool(0, "toolu_a", "web_fetch", fetchGood, 4).text(1, "Done.", 2).end("tool_use").String(),
		mode: vet.ModeRefuse, atomic: true, types: []string{"text", "tool_use"},
		tools: []cblock{tb("toolu_a", "web_fetch", fetchGood)}, text: "Done.", stop: "tool_use",
	},
	{
		name: "server tool blocks pass",
		in: (&as{}).start().ev("content_block_start", `{"index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`).
			ev("content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"x\"}"}}`).
			ev("content_block_stop", `{"index":0}`).
			ev("content_block_start", `{"index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}`).
			ev("content_block_stop", `{"index":1}`).text(2, "Found.", 3).end("end_turn").String(),
		mode: vet.ModeRefuse, identical: true, types: []string{"server_tool_use", "web_search_tool_result", "text"}, text: "Found.", stop: "end_turn",
	},
	{
		name: "the stream ends before message_stop",
		in: (&as{}).start().text(0, "Hi.", 5).ev("content_block_start", `{"index":1,"content_block":{"type":"tool_use","id":"toolu_a","name":"web_fetch","input":{}}}`).
			ev("content_block_delta", `{"index":1,"delta":{"type":"input_json_delta","partial_json":"{\"url\":"}}`).String(),
		mode: vet.ModeRefuse, types: []string{"text"}, text: "Hi.", errCode: relay.CodeTruncated, leaks: []string{"toolu_a"},
	},
	{
		name: "a malformed event fails the held call",
		in: func() string {
			a := (&as{}).start().ev("content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"web_fetch","input":{}}}`)
			a.evs = append(a.evs, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"index\":0,\"delta\":{}}\n\n")
			return a.ev("content_block_delta", `{"index":0,"delta":{"type":"input_json_delta","partial_json":`+jstr(fetchGood)+`}}`).
				ev("content_block_stop", `{"index":0}`).end("tool_use").String()
		}(),
		mode: vet.ModeRefuse, types: []string{"text"}, stop: "end_turn", blocked: 1,
		text: "[promptgate] blocked tool call web_fetch: upstream event is not valid json", leaks: []string{"toolu_a"},
	},
	{
		// Clients that go by the event: line would see a tool_use block start; the data says ping.
		name: "an event whose name and type disagree is dropped and fails the held call",
		in: func() string {
			a := (&as{}).start().text(0, "Hi.", 5).ev("content_block_start", `{"index":1,"content_block":{"type":"tool_use","id":"toolu_a","name":"web_fetch","input":{}}}`)
			a.evs = append(a.evs, "event: content_block_start\ndata: {\"type\":\"ping\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_x\",\"name\":\"web_fetch\",\"input\":"+fetchBad+"}}\n\n")
			return a.ev("content_block_delta", `{"index":1,"delta":{"type":"input_json_delta","partial_json":`+jstr(fetchGood)+`}}`).
				ev("content_block_stop", `{"index":1}`).end("tool_use").String()
		}(),
		mode: vet.ModeRefuse, types: []string{"text", "text"}, stop: "end_turn", blocked: 1,
		text:  "Hi.[promptgate] blocked tool call web_fetch: upstream event is not valid json",
		leaks: []string{"toolu_a", "toolu_x", "SECRET123"},
	},
	{
		name: "a fragment for no call is dropped",
		in: (&as{}).start().text(0, "Hi.", 5).tool(1, "toolu_a", "web_fetch", fetchGood, 40).
			ev("content_block_delta", `{"index":7,"delta":{"type":"input_json_delta","partial_json":"x"}}`).end("tool_use").String(),
		mode: vet.ModeRefuse, types: []string{"text", "tool_use"}, text: "Hi.", stop: "tool_use",
		tools: []cblock{tb("toolu_a", "web_fetch", fetchGood)},
	},
}

func TestStream(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			relaytest.CheckSplits(t, func(split int, seed uint64) ([]byte, []vet.Decision, int) {
				return runStream(t, tc.in, checkerFor(tc.mode, tc.atomic), split, seed)
			}, nil, func(out []byte, ds []vet.Decision, blocked int) { check(t, tc, out, ds, blocked) })
		})
	}
}

func check(t *testing.T, tc streamCase, out []byte, ds []vet.Decision, blocked int) {
	t.Helper()
	if tc.identical && string(out) != tc.in {
		t.Fatalf("output differs from input:\n%s\n---\n%s", out, tc.in)
	}
	v := assemble(t, out)
	var types []string
	for _, b := range v.Blocks {
		types = append(types, b.Type)
	}
	if !slices.Equal(types, tc.types) {
		t.Errorf("blocks %v, want %v\n%s", types, tc.types, out)
	}
	if !slices.Equal(v.tools(), tc.tools) {
		t.Errorf("tools %+v, want %+v", v.tools(), tc.tools)
	}
	if v.text() != tc.text {
		t.Errorf("text %q, want %q", v.text(), tc.text)
	}
	if v.Stop != tc.stop {
		t.Errorf("stop_reason %q, want %q", v.Stop, tc.stop)
	}
	if v.Error != tc.errCode {
		t.Errorf("error %q, want %q", v.Error, tc.errCode)
	}
	if tc.errCode == "" && !v.Done {
		t.Errorf("no message_stop")
	}
	if v.After != 0 {
		t.Errorf("%d events after the end", v.After)
	}
	if blocked != tc.blocked {
		t.Errorf("blocked %d, want %d", blocked, tc.blocked)
	}
	relaytest.CheckBlocked(t, ds, blocked)
	relaytest.CheckNoLeak(t, out, tc.leaks)
}

// TestTextNotDelayed: text before a call reaches the client before the upstream sends the call.
func TestTextNotDelayed(t *testing.T) {
	tail := relaytest.TextFirst(t, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)),
		(&as{}).start().text(0, "Hello there", 6).String(), `"text":"there"`, `"text":"Hello "`,
		(&as{}).tool(1, "toolu_b", "web_fetch", fetchBad, 3).end("tool_use").String())
	if bytes.Contains(tail, []byte("SECRET123")) || !bytes.Contains(tail, []byte("blocked tool call web_fetch")) || !bytes.Contains(tail, []byte(`"end_turn"`)) {
		t.Fatalf("tail: %s", tail)
	}
}

func TestBody(t *testing.T) {
	msg := func(stop string, blocks ...string) string {
		return `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` + strings.Join(blocks, ",") +
			`],"stop_reason":"` + stop + `","stop_sequence":null,"x_vendor":{"keep":[1,2]},"usage":{"input_tokens":1,"output_tokens":2}}`
	}
	text := `{"type":"text","text":"Checking."}`
	good := `{"type":"tool_use","id":"toolu_a","name":"web_fetch","input":` + fetchGood + `}`
	bad := `{"type":"tool_use","id":"toolu_b","name":"web_fetch","input":` + fetchBad + `}`

	t.Run("refuse keeps the good call", func(t *testing.T) {
		out, res, err := Body([]byte(msg("tool_use", text, good, bad)), checkerFor(vet.ModeRefuse, false), nil)
		if err != nil || res.Blocked != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		if want := msg("tool_use", text, good); string(out) != want {
			t.Fatalf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("refuse with no call left", func(t *testing.T) {
		out, res, err := Body([]byte(msg("tool_use", text, bad)), checkerFor(vet.ModeRefuse, false), nil)
		if err != nil || res.Blocked != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		if want := msg("end_turn", text, `{"type":"text","text":"`+noticeBadFetch+`"}`); string(out) != want {
			t.Fatalf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("error mode", func(t *testing.T) {
		in := msg("tool_use", good, bad)
		out, res, err := Body([]byte(in), checkerFor(vet.ModeError, false), nil)
		if err != nil || res.ErrorCall == nil || res.ErrorCall.CallID != "toolu_b" || string(out) != in {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("audit", func(t *testing.T) {
		in := msg("tool_use", good, bad)
		out, res, err := Body([]byte(in), checkerFor(vet.ModeAudit, false), nil)
		if err != nil || res.Blocked != 0 || string(out) != in {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("input must be an object", func(t *testing.T) {
		for _, b := range []string{
			`{"type":"tool_use","id":"toolu_s","name":"search","input":"{}"}`,
			`{"type":"tool_use","id":"toolu_s","name":"search"}`,
			`{"type":"tool_use","name":"search","input":{}}`,
		} {
			_, res, err := Body([]byte(msg("tool_use", b)), checkerFor(vet.ModeRefuse, false), nil)
			if err != nil || res.Blocked != 1 {
				t.Errorf("%s: %v %+v", b, err, res)
			}
		}
	})
	t.Run("malformed bodies are errors", func(t *testing.T) {
		for _, in := range []string{`{"content":[],"content":[]}`, `[1]`, `{"content":`} {
			if _, _, err := Body([]byte(in), checkerFor(vet.ModeRefuse, false), nil); err == nil {
				t.Errorf("%s: no error", in)
			}
		}
	})
}

// TestArgsTemplate: after an input_json_delta read whole, a fragment of the same block and shape
// matches the template (escapes and all); anything else is read whole.
func TestArgsTemplate(t *testing.T) {
	frag := func(idx int, pj string) string {
		return `{"type":"content_block_delta","index":` + itoa(idx) + `,"delta":{"type":"input_json_delta","partial_json":` + jstr(pj) + `}}`
	}
	for _, tc := range []struct {
		name, next string
		want       bool
	}{
		{"next piece", frag(1, `": "T-1`), true},
		{"escapes and quotes", frag(1, `\"}],\u0022x\":{"`), true},
		{"empty", frag(1, ``), true},
		{"another block", frag(2, `b`), false},
		{"another delta type", strings.Replace(frag(1, `b`), "input_json_delta", "text_delta", 1), false},
		{"another key", strings.Replace(frag(1, `b`), `"index"`, `"usage":{},"index"`, 1), false},
		{"escaped key", strings.Replace(frag(1, `b`), `"partial_json"`, `"partial\u005fjson"`, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := (&as{}).start().text(0, "hi", 2).ev("content_block_start", `{"index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`).
				ev("content_block_delta", strings.TrimPrefix(frag(1, `{"ci`), `{"type":"content_block_delta",`)).String()
			s := NewStream(io.NopCloser(strings.NewReader(in)), checkerFor(vet.ModeRefuse, false), nil)
			if _, err := io.ReadAll(s); err != nil {
				t.Fatal(err)
			}
			if s.args.p == nil || s.args.name != "content_block_delta" || s.args.idx != 1 {
				t.Fatalf("no template learnt: %+v", s.args)
			}
			got := make([][]byte, 1)
			if ok := s.args.Match([]byte(tc.next), got); ok != tc.want {
				t.Fatalf("Match(%s) = %v, want %v", tc.next, ok, tc.want)
			}
		})
	}
}

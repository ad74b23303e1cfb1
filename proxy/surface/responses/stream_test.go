package responses

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

// streamCase is one input stream and what a client must make of it.
type streamCase struct {
	name   string
	in     string
	mode   vet.Mode
	atomic bool
	// want
	types     []string // item types the client is shown, in order
	calls     []call   // function calls the client assembles
	text      string
	final     []string // item types of the final output
	errCode   string
	identical bool // output byte for byte the input
	blocked   int
	leaks     []string // strings that must never appear in the output
}

var streamCases = []streamCase{
	{
		name: "allowed calls pass byte for byte",
		in: (&rs{}).created().message(0, "msg_1", "Checking.", 3).
			call(1, "fc_a", "call_a", "web_fetch", fetchGood, 4).call(2, "fc_c", "call_c", "get_weather", weatherArgs, 1).completed().String(),
		mode: vet.ModeRefuse, identical: true,
		types: []string{"message", "function_call", "function_call"},
		calls: []call{{"call_a", "web_fetch", fetchGood}, {"call_c", "get_weather", weatherArgs}},
		text:  "Checking.", final: []string{"message", "function_call", "function_call"},
	},
	{
		name: "refuse replaces the bad call by a notice item",
		in: (&rs{}).created().message(0, "msg_1", "Checking.", 3).
			call(1, "fc_a", "call_a", "web_fetch", fetchGood, 4).call(2, "fc_b", "call_b", "web_fetch", fetchBad, 2).
			call(3, "fc_c", "call_c", "get_weather", weatherArgs, 1).completed().String(),
		mode:    vet.ModeRefuse,
		types:   []string{"message", "function_call", "message", "function_call"},
		calls:   []call{{"call_a", "web_fetch", fetchGood}, {"call_c", "get_weather", weatherArgs}},
		text:    "Checking." + noticeBadFetch,
		final:   []string{"message", "function_call", "message", "function_call"},
		blocked: 1, leaks: []string{`"fc_b"`, `"call_b"`, "evil", "SECRET123"},
	},
	{
		name: "a reasoning item goes with the blocked call after it",
		in: (&rs{}).created().reasoning(0, "rs_1", "Fetching.").call(1, "fc_b", "call_b", "web_fetch", fetchBad, 2).
			message(2, "msg_1", "Done.", 2).completed().String(),
		mode:    vet.ModeRefuse,
		types:   []string{"message", "message"},
		text:    noticeBadFetch + "Done.",
		final:   []string{"message", "message"},
		blocked: 1, leaks: []string{`"rs_1"`, "gAAArs_1", "Fetching.", `"call_b"`, "SECRET123"},
	},
	{
		name: "a reasoning item before an allowed call, or before text, passes byte for byte",
		in: (&rs{}).created().reasoning(0, "rs_1", "Fetching.").call(1, "fc_a", "call_a", "web_fetch", fetchGood, 3).
			reasoning(2, "rs_2", "Writing.").message(3, "msg_1", "Done.", 2).completed().String(),
		mode: vet.ModeRefuse, identical: true,
		types: []string{"reasoning", "function_call", "reasoning", "message"},
		calls: []call{{"call_a", "web_fetch", fetchGood}},
		text:  "Done.", final: []string{"reasoning", "function_call", "reasoning", "message"},
	},
	{
		name: "two reasoning items before a blocked call go with it; atomic calls wait for the end",
		in: (&rs{}).created().reasoning(0, "rs_1", "A.").reasoning(1, "rs_2", "B.").call(2, "fc_b", "call_b", "web_fetch", fetchBad, 2).
			message(3, "msg_1", "Done.", 2).completed().String(),
		mode: vet.ModeRefuse, atomic: true,
		types:   []string{"message", "message"},
		text:    "Done." + noticeBadFetch,
		final:   []string{"message", "message"},
		blocked: 1, leaks: []string{`"rs_1"`, `"rs_2"`, "gAAArs_", `"call_b"`, "SECRET123"},
	},
	{
		name: "audit passes a reasoning item with the call after it, byte for byte",
		in:   (&rs{}).created().reasoning(0, "rs_1", "Fetching.").call(1, "fc_b", "call_b", "web_fetch", fetchBad, 2).completed().String(),
		mode: vet.ModeAudit, identical: true,
		types: []string{"reasoning", "function_call"},
		calls: []call{{"call_b", "web_fetch", fetchBad}},
		final: []string{"reasoning", "function_call"},
	},
	{
		name: "error mode ends the stream",
		in: (&rs{}).created().message(0, "msg_1", "Checking.", 3).
			call(1, "fc_b", "call_b", "web_fetch", fetchBad, 2).completed().String(),
		mode: vet.ModeError, types: []string{"message"}, text: "Checking.", errCode: relay.CodeToolCallBlocked,
		blocked: 1, leaks: []string{`"fc_b"`, `"call_b"`, "evil", "SECRET123"},
	},
	{
		name: "audit passes everything byte for byte",
		in: (&rs{}).created().call(0, "fc_b", "call_b", "web_fetch", fetchBad, 2).
			call(1, "fc_x", "call_x", "delete_all", `{}`, 2).completed().String(),
		mode: vet.ModeAudit, identical: true,
		types: []string{"function_call", "function_call"},
		calls: []call{{"call_b", "web_fetch", fetchBad}, {"call_x", "delete_all", `{}`}},
		final: []string{"function_call", "function_call"},
	},
	{
		name: "a tool that is not allowed",
		in:   (&rs{}).created().call(0, "fc_x", "call_x", "delete_all", `{"all":true}`, 3).completed().String(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"},
		text: "[promptgate] blocked tool call delete_all: tool not allowed", blocked: 1,
		leaks: []string{`"fc_x"`, `"call_x"`, `\"all\"`},
	},
	{
		name: "schema violation",
		in:   (&rs{}).created().call(0, "fc_w", "call_w", "get_weather", `{"town":"Oslo"}`, 3).completed().String(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call get_weather: arguments do not match schema: at #: missing property 'city'",
		leaks: []string{`"fc_w"`, `"call_w"`, "town"},
	},
	{
		name: "invalid json arguments",
		in:   (&rs{}).created().call(0, "fc_j", "call_j", "search", `{"q":"x"`, 3).completed().String(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call search: arguments are not valid json: syntax error at offset 8",
		leaks: []string{`"fc_j"`, `"call_j"`},
	},
	{
		name: "duplicate key",
		in:   (&rs{}).created().call(0, "fc_d", "call_d", "search", `{"q":"a","q":"b"}`, 3).completed().String(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call search: arguments are not valid json: duplicate key at offset 9",
		leaks: []string{`"fc_d"`, `"call_d"`},
	},
	{
		name: "atomic blocks the whole batch",
		in: (&rs{}).created().call(0, "fc_a", "call_a", "web_fetch", fetchGood, 4).
			call(1, "fc_b", "call_b", "web_fetch", fetchBad, 2).completed().String(),
		mode: vet.ModeRefuse, atomic: true, types: []string{"message", "message"}, final: []string{"message", "message"},
		text:    "[promptgate] blocked tool call web_fetch: another call of the batch was blocked" + noticeBadFetch,
		blocked: 2, leaks: []string{`"fc_a"`, `"call_a"`, `"fc_b"`, `"call_b"`, "SECRET123"},
	},
	{
		name: "atomic releases a good batch at the end, text first",
		in: (&rs{}).created().call(0, "fc_a", "call_a", "web_fetch", fetchGood, 4).
			message(1, "msg_1", "Done.", 2).completed().String(),
		mode: vet.ModeRefuse, atomic: true,
		types: []string{"message", "function_call"}, calls: []call{{"call_a", "web_fetch", fetchGood}},
		text: "Done.", final: []string{"message", "function_call"},
	},
	{
		name: "arguments that change between delta and done",
		in: func() string {
			r := (&rs{}).created()
			r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", "", "in_progress")+`}`)
			r.ev("response.function_call_arguments.delta", `{"item_id":"fc_a","output_index":0,"delta":`+jstr(fetchGood)+`}`)
			r.ev("response.function_call_arguments.done", `{"item_id":"fc_a","output_index":0,"arguments":`+jstr(fetchBad)+`}`)
			r.ev("response.output_item.done", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", fetchBad, "completed")+`}`)
			r.output = append(r.output, fnItem("fc_a", "call_a", "web_fetch", fetchBad, "completed"))
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call web_fetch: " + ReasonChanged,
		leaks: []string{`"fc_a"`, `"call_a"`, "SECRET123", "docs.example.com/a"},
	},
	{
		name: "a name that changes",
		in: func() string {
			r := (&rs{}).created()
			r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "search", "", "in_progress")+`}`)
			r.ev("response.function_call_arguments.done", `{"item_id":"fc_a","output_index":0,"arguments":"{}"}`)
			r.ev("response.output_item.done", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "delete_all", "{}", "completed")+`}`)
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{}, blocked: 1,
		text:  "[promptgate] blocked tool call search: name changed mid-stream",
		leaks: []string{`"fc_a"`, `"call_a"`, "delete_all"},
	},
	{
		name: "custom tool calls are unsupported",
		in: func() string {
			r := (&rs{}).created()
			it := `{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_ct","name":"search","input":""}`
			r.ev("response.output_item.added", `{"output_index":0,"item":`+it+`}`)
			r.ev("response.custom_tool_call_input.delta", `{"item_id":"ctc_1","output_index":0,"delta":"rm -rf"}`)
			r.ev("response.custom_tool_call_input.done", `{"item_id":"ctc_1","output_index":0,"input":"rm -rf"}`)
			done := `{"id":"ctc_1","type":"custom_tool_call","status":"completed","call_id":"call_ct","name":"search","input":"rm -rf"}`
			r.ev("response.output_item.done", `{"output_index":0,"item":`+done+`}`)
			r.output = append(r.output, done)
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call search: unsupported tool call type",
		leaks: []string{`"ctc_1"`, `"call_ct"`, "rm -rf"},
	},
	{
		name: "a call only in the final response is vetted there",
		in: func() string {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 5)
			r.output = append(r.output, fnItem("fc_b", "call_b", "web_fetch", fetchBad, "completed"))
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, text: "Hi.", final: []string{"message", "message"}, blocked: 1,
		leaks: []string{`"fc_b"`, `"call_b"`, "SECRET123"},
	},
	{
		name: "the stream ends before the response completes",
		in: func() string {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 5)
			r.ev("response.output_item.added", `{"output_index":1,"item":`+fnItem("fc_a", "call_a", "web_fetch", "", "in_progress")+`}`)
			r.ev("response.function_call_arguments.delta", `{"item_id":"fc_a","output_index":1,"delta":`+jstr(fetchGood)+`}`)
			return r.String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, text: "Hi.", errCode: relay.CodeTruncated,
		leaks: []string{`"fc_a"`, `"call_a"`},
	},
	{
		name: "a malformed event fails the held call",
		in: func() string {
			r := (&rs{}).created()
			r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", "", "in_progress")+`}`)
			r.evs = append(r.evs, "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"output_index\":1,\"delta\":\"x\"}\n\n")
			r.ev("response.function_call_arguments.done", `{"item_id":"fc_a","output_index":0,"arguments":`+jstr(fetchGood)+`}`)
			r.ev("response.output_item.done", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", fetchGood, "completed")+`}`)
			r.output = append(r.output, fnItem("fc_a", "call_a", "web_fetch", fetchGood, "completed"))
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call web_fetch: upstream event is not valid json",
		leaks: []string{`"fc_a"`, `"call_a"`},
	},
	{
		// Clients that go by the event: line would see a function_call item; the data says text
		// delta.
		name: "an event whose name and type disagree is dropped",
		in: func() string {
			r := (&rs{}).created().message(0, "msg_1", "Hi.", 5)
			r.evs = append(r.evs, "event: response.output_item.added\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":90,\"output_index\":0,\"item_id\":\"msg_1\",\"delta\":\"\",\"item\":"+fnItem("fc_x", "call_x", "web_fetch", fetchBad, "completed")+"}\n\n")
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, text: "Hi.", final: []string{"message"},
		leaks: []string{`"fc_x"`, `"call_x"`, "SECRET123"},
	},
	{
		// The open fuzz finding: a fragment placed by item_id only. The vetter saw the whole
		// arguments (allowed); a client that places events by output_index (a Go client reads the
		// missing one as 0) would drop the first fragment and run the rest, here a different
		// (disallowed) fetch.
		name: "a fragment without output_index fails the call",
		in: func() string {
			prefix := `{"url":"https://docs.example.com/","a":`
			r := (&rs{}).created()
			r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", "", "in_progress")+`}`)
			r.ev("response.function_call_arguments.delta", `{"item_id":"fc_a","delta":`+jstr(prefix)+`}`)
			r.ev("response.function_call_arguments.delta", `{"item_id":"fc_a","output_index":0,"delta":`+jstr(fetchBad+"}")+`}`)
			r.ev("response.function_call_arguments.done", `{"item_id":"fc_a","output_index":0,"arguments":`+jstr(prefix+fetchBad+"}")+`}`)
			done := fnItem("fc_a", "call_a", "web_fetch", prefix+fetchBad+"}", "completed")
			r.ev("response.output_item.done", `{"output_index":0,"item":`+done+`}`)
			r.output = append(r.output, done)
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call web_fetch: " + vet.ReasonInvalidIndex,
		leaks: []string{`"fc_a"`, `"call_a"`, "SECRET123"},
	},
	{
		// The mirror case: a client that places events by item_id would drop a fragment without
		// one.
		name: "a fragment without item_id fails the call",
		in: func() string {
			r := (&rs{}).created()
			r.ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_a", "call_a", "web_fetch", "", "in_progress")+`}`)
			r.ev("response.function_call_arguments.delta", `{"output_index":0,"delta":`+jstr(fetchGood[:5])+`}`)
			r.ev("response.function_call_arguments.delta", `{"item_id":"fc_a","output_index":0,"delta":`+jstr(fetchGood[5:])+`}`)
			r.ev("response.function_call_arguments.done", `{"item_id":"fc_a","output_index":0,"arguments":`+jstr(fetchGood)+`}`)
			done := fnItem("fc_a", "call_a", "web_fetch", fetchGood, "completed")
			r.ev("response.output_item.done", `{"output_index":0,"item":`+done+`}`)
			r.output = append(r.output, done)
			return r.completed().String()
		}(),
		mode: vet.ModeRefuse, types: []string{"message"}, final: []string{"message"}, blocked: 1,
		text:  "[promptgate] blocked tool call web_fetch: " + ReasonChanged,
		leaks: []string{`"fc_a"`, `"call_a"`},
	},
}

func TestStream(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			// The same stream split into 1..7-byte reads (and 1-byte reads) gives the same output,
			// notice ids aside.
			relaytest.CheckSplits(t, func(split int, seed uint64) ([]byte, []vet.Decision, int) {
				return runStream(t, tc.in, checkerFor(tc.mode, tc.atomic), split, seed)
			}, normalizeIDs, func(out []byte, ds []vet.Decision, blocked int) { check(t, tc, out, ds, blocked) })
		})
	}
}

// normalizeIDs replaces notice item ids, which are random.
func normalizeIDs(b []byte) []byte {
	out := []byte{}
	for {
		i := bytes.Index(b, []byte("msg_promptgate_"))
		if i < 0 {
			return append(out, b...)
		}
		out = append(out, b[:i]...)
		out = append(out, "msg_promptgate_X"...)
		b = b[i+len("msg_promptgate_")+24:]
	}
}

func check(t *testing.T, tc streamCase, out []byte, ds []vet.Decision, blocked int) {
	t.Helper()
	if tc.identical && string(out) != tc.in {
		t.Fatalf("output differs from input:\n%s\n---\n%s", out, tc.in)
	}
	v := assemble(t, out)
	if !slices.Equal(v.Types, tc.types) {
		t.Errorf("items %v, want %v\n%s", v.Types, tc.types, out)
	}
	if !slices.Equal(v.Calls, tc.calls) || !slices.Equal(v.DoneCalls, tc.calls) {
		t.Errorf("calls %+v / done %+v, want %+v", v.Calls, v.DoneCalls, tc.calls)
	}
	if v.Text != tc.text {
		t.Errorf("text %q, want %q", v.Text, tc.text)
	}
	if v.Error != tc.errCode {
		t.Errorf("error %q, want %q", v.Error, tc.errCode)
	}
	if tc.errCode == "" && tc.final != nil {
		if !v.HasFinal {
			t.Fatalf("no final response")
		}
		if got := v.finalTypes(); !slices.Equal(got, tc.final) && !(len(got) == 0 && len(tc.final) == 0) {
			t.Errorf("final output %v, want %v", got, tc.final)
		}
		if !slices.Equal(v.finalCalls(), tc.calls) {
			t.Errorf("final calls %+v, want %+v", v.finalCalls(), tc.calls)
		}
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
	head := (&rs{}).created().message(0, "msg_1", "Hello there", 2)
	rest := &rs{seq: head.seq, output: head.output}
	rest.call(1, "fc_b", "call_b", "web_fetch", fetchBad, 3).completed()
	tail := relaytest.TextFirst(t, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)),
		head.String(), "response.output_item.done", `"delta":"He"`, rest.String())
	if bytes.Contains(tail, []byte("SECRET123")) || !bytes.Contains(tail, []byte("blocked tool call web_fetch")) {
		t.Fatalf("tail: %s", tail)
	}
}

func TestBody(t *testing.T) {
	resp := func(items ...string) string {
		return `{"id":"resp_1","object":"response","status":"completed","x_vendor":{"keep":[1,2]},"output":[` + strings.Join(items, ",") + `],"usage":{"total_tokens":3}}`
	}
	msg := `{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","text":"Checking.","annotations":[]}],"role":"assistant"}`
	good := fnItem("fc_a", "call_a", "web_fetch", fetchGood, "completed")
	bad := fnItem("fc_b", "call_b", "web_fetch", fetchBad, "completed")
	search := `{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","query":"x"}}`

	t.Run("refuse keeps the good call", func(t *testing.T) {
		in := resp(msg, good, bad)
		out, res, err := Body([]byte(in), checkerFor(vet.ModeRefuse, false), nil)
		if err != nil || res.Blocked != 1 || res.ErrorCall != nil {
			t.Fatalf("%v %+v", err, res)
		}
		if want := resp(msg, good); string(out) != want {
			t.Fatalf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("refuse with no call left adds a notice message", func(t *testing.T) {
		out, res, err := Body([]byte(resp(msg, search, bad)), checkerFor(vet.ModeRefuse, false), nil)
		if err != nil || res.Blocked != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		v := assembleBody(t, out)
		if !slices.Equal(v.finalTypes(), []string{"message", "web_search_call", "message"}) || v.Final[2].Get("content.0.text").String() != noticeBadFetch {
			t.Fatalf("%s", out)
		}
		if !strings.HasPrefix(v.Final[2].Get("id").String(), "msg_promptgate_") || bytes.Contains(out, []byte("SECRET123")) || bytes.Contains(out, []byte("call_b")) {
			t.Fatalf("%s", out)
		}
		if !bytes.Contains(out, []byte(`"x_vendor":{"keep":[1,2]}`)) {
			t.Fatalf("unknown field lost: %s", out)
		}
	})
	t.Run("error mode", func(t *testing.T) {
		in := resp(good, bad)
		out, res, err := Body([]byte(in), checkerFor(vet.ModeError, false), nil)
		if err != nil || res.ErrorCall == nil || res.ErrorCall.CallID != "call_b" || string(out) != in {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("audit", func(t *testing.T) {
		in := resp(good, bad)
		var ds []vet.Decision
		out, res, err := Body([]byte(in), checkerFor(vet.ModeAudit, false), func(d vet.Decision) { ds = append(ds, d) })
		if err != nil || res.Blocked != 0 || string(out) != in || len(ds) != 2 || ds[1].Verdict != vet.VerdictAudited {
			t.Fatalf("%v %+v %+v", err, res, ds)
		}
	})
	t.Run("duplicate call ids", func(t *testing.T) {
		dup := fnItem("fc_z", "call_a", "web_fetch", fetchGood, "completed")
		_, res, err := Body([]byte(resp(good, dup)), checkerFor(vet.ModeRefuse, false), nil)
		if err != nil || res.Blocked != 1 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("malformed bodies are errors", func(t *testing.T) {
		for _, in := range []string{`{"output":[],"output":[]}`, `[1]`, `{"output":`} {
			if _, _, err := Body([]byte(in), checkerFor(vet.ModeRefuse, false), nil); err == nil {
				t.Errorf("%s: no error", in)
			}
		}
	})
}

// assembleBody reads a non-stream body as a view.
func assembleBody(t *testing.T, body []byte) view {
	t.Helper()
	r := &rs{}
	r.ev("response.completed", `{"response":`+string(body)+`}`)
	return assemble(t, []byte(r.String()))
}

// OnResponseID hears the response's id once, from response.created, before the first call is
// vetted, however the stream is split.
func TestOnResponseID(t *testing.T) {
	in := (&rs{}).created().call(0, "fc_1", "call_1", "web_fetch", `{"url":"https://evil.example.net/"}`, 3).completed().String()
	for _, split := range []int{0, 1, 7} {
		var got []string
		var decisionsBefore int
		var ds []vet.Decision
		open := func(up io.ReadCloser, rec func(vet.Decision)) relaytest.Stream {
			s := NewStream(up, checkerFor(vet.ModeRefuse, false), func(d vet.Decision) { ds = append(ds, d); rec(d) })
			s.OnResponseID = func(id string) {
				got = append(got, id)
				decisionsBefore = len(ds)
			}
			return s
		}
		relaytest.Run(t, in, split, 1, open)
		if len(got) != 1 || got[0] != "resp_1" || decisionsBefore != 0 || len(ds) != 1 || !ds[0].Blocked() {
			t.Fatalf("split %d: ids %v, decisions before the id %d, decisions %+v", split, got, decisionsBefore, ds)
		}
	}
}

// TestArgsTemplate: after an argument delta read whole, a delta of the same call and shape matches
// the template (escapes, another sequence number and padding and all); anything else is read whole.
func TestArgsTemplate(t *testing.T) {
	delta := func(seq, oi int, id, d string) string {
		return `{"type":"response.function_call_arguments.delta","sequence_number":` + itoa(seq) + `,"item_id":"` + id +
			`","output_index":` + itoa(oi) + `,"delta":` + jstr(d) + `,"obfuscation":"ab"}`
	}
	for _, tc := range []struct {
		name, next string
		want       bool
	}{
		{"next piece", delta(7, 1, "fc_1", `": "T-1`), true},
		{"escapes and quotes", delta(1234, 1, "fc_1", `\"}],\u0022x\":{"`), true},
		{"other padding", strings.Replace(delta(8, 1, "fc_1", `x`), `"ab"`, `"zz9"`, 1), true},
		{"a backslash in the padding", strings.Replace(delta(8, 1, "fc_1", `x`), `"ab"`, `"a\"b"`, 1), false},
		{"a negative sequence number", delta(-8, 1, "fc_1", `x`), false},
		{"another item", delta(8, 1, "fc_2", `x`), false},
		{"another index", delta(8, 2, "fc_1", `x`), false},
		{"another key", strings.Replace(delta(8, 1, "fc_1", `x`), `"obfuscation"`, `"item"`, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := (&rs{}).created().message(0, "msg_1", "hi", 2)
			r.ev("response.output_item.added", `{"output_index":1,"item":`+fnItem("fc_1", "call_1", "get_weather", "", "in_progress")+`}`)
			in := r.String() + "event: response.function_call_arguments.delta\ndata: " + delta(r.seq, 1, "fc_1", `{"ci`) + "\n\n"
			s := NewStream(io.NopCloser(strings.NewReader(in)), checkerFor(vet.ModeRefuse, false), nil)
			if _, err := io.ReadAll(s); err != nil {
				t.Fatal(err)
			}
			if s.args.p == nil || s.args.m.oi != 1 || !s.args.m.hasSeq {
				t.Fatalf("no template learnt: %+v", s.args)
			}
			got := make([][]byte, 2)
			if ok := s.args.Match([]byte(tc.next), got); ok != tc.want {
				t.Fatalf("Match(%s) = %v, want %v", tc.next, ok, tc.want)
			}
		})
	}
}

// TestPassTemplate: after a text delta read whole and written, the next of its shape matches the
// template, whatever its strings hold; its keys, numbers other than the sequence number, and item
// id are compared whole.
func TestPassTemplate(t *testing.T) {
	text := func(seq int, id, d string) string {
		return `{"type":"response.output_text.delta","sequence_number":` + itoa(seq) + `,"item_id":"` + id +
			`","output_index":0,"content_index":0,"delta":` + jstr(d) + `,"logprobs":[],"obfuscation":"ab"}`
	}
	in := "event: response.output_item.added\ndata: " + `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}` +
		"\n\nevent: response.output_text.delta\ndata: " + text(2, "msg_1", "hi") + "\n\n"
	s := NewStream(io.NopCloser(strings.NewReader(in)), checkerFor(vet.ModeRefuse, false), nil)
	if _, err := io.ReadAll(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		next string
		want bool
	}{
		{text(3, "msg_1", `there \"_call\u0022`), true},
		{strings.Replace(text(4, "msg_1", "x"), `"ab"`, `"a\\b"`, 1), true},
		{text(3, "msg_2", "x"), false},
		{strings.Replace(text(4, "msg_1", "x"), `"content_index":0`, `"content_index":1`, 1), false},
		{strings.Replace(text(4, "msg_1", "x"), `"logprobs":[]`, `"logprobs":[{}]`, 1), false},
	} {
		if ok := s.pass.Match([]byte(tc.next), make([][]byte, maxSlots)); ok != tc.want {
			t.Errorf("Match(%s) = %v, want %v", tc.next, ok, tc.want)
		}
	}
}

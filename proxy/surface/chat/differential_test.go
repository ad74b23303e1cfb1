package chat

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// evilEntry is a tool_calls entry of a call that is not allowed; its id and arguments carry
// markers that must never reach the client.
const evilEntry = `{"index":0,"id":"call_EVIL","type":"function","function":{"name":"delete_all","arguments":"{\"k\":\"SECRET\"}"}}`

// evilChunk is a whole chunk carrying the evil call.
var evilChunk = `{"choices":[{"index":0,"delta":{"tool_calls":[` + evilEntry + `]},"finish_reason":null}]}`

// differentialCases are raw upstream streams that some real SSE client (the official SDKs, the
// WHATWG parser, go-openai's line reader, Go's case-insensitive encoding/json) reads as a call of
// delete_all, whatever the proxy's own parser makes of them.
var differentialCases = []struct{ name, raw string }{
	// openai-go splits lines at LF only: a lone CR stays in the data, and CR is JSON whitespace.
	{"lone CR hides the JSON from the spec parser", "data: \r" + evilChunk + "\n\n" + sseOf(finish(0, "tool_calls"), done)},
	{"lone CR splits one JSON over a field line", "data: {\"choices\":[{\"index\":0,\"delta\":\r{\"tool_calls\":[" + evilEntry + "]}}]}\n\n" + sseOf(done)},
	// openai-go drops one CR before LF: CR CR LF is not a blank line for it, so three of our
	// events are one of its.
	{"CR CR LF joins events for openai-go", "data: {\"choices\":[{\"index\":0,\"delta\":\r\r\ndata: {\"tool_calls\":[" + evilEntry + "]}\r\r\ndata: }]}\n\n" + sseOf(done)},
	// The WHATWG parser (eventsource-parser, browsers) drops a BOM at the start of the stream.
	{"BOM at stream start", "\ufeffdata: " + evilChunk + "\n\n" + sseOf(done)},
	// go-openai trims every line and takes ^data:\s* as the prefix.
	{"space before data", " data: " + evilChunk + "\n\n" + sseOf(done)},
	{"tab before data", "\tdata: " + evilChunk + "\n\n" + sseOf(done)},
	{"form feed after data:", "data:\f" + evilChunk + "\n\n" + sseOf(done)},
	{"vertical tab after data:", "data: \v" + evilChunk + "\n\n" + sseOf(done)},
	{"NBSP before JSON", "data: \u00a0" + evilChunk + "\n\n" + sseOf(done)},
	// go-openai reads every data line as an event of its own.
	{"second data line after text", "data: x\ndata: " + evilChunk + "\n\n" + sseOf(done)},
	// Go's encoding/json (go-openai) matches keys without regard to case, Unicode folding included.
	{"upper-case tool_calls", sseOf(strings.Replace(evilChunk, `"tool_calls"`, `"TOOL_CALLS"`, 1), done)},
	{"long s in tool_calls", sseOf(strings.Replace(evilChunk, `"tool_calls"`, `"tool_callſ"`, 1), done)},
	{"upper-case choices", sseOf(strings.Replace(evilChunk, `"choices"`, `"Choices"`, 1), done)},
	{"upper-case delta", sseOf(strings.Replace(evilChunk, `"delta"`, `"Delta"`, 1), done)},
	{"upper-case function_call", sseOf(`{"choices":[{"index":0,"delta":{"Function_Call":{"name":"delete_all","arguments":"{\"k\":\"SECRET\"}"}}}]}`, done)},
	{"long s in arguments after good ones", sseOf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_EVIL","type":"function","function":{"name":"web_fetch","arguments":"{\"url\":\"https://docs.example.com/a\"}","argumentſ":"{\"url\":\"https://SECRET.example.net/\"}"}}]}}]}`, done)},
	// A custom tool's member beside an allowed function, without a type: read by the member, it is
	// a custom call.
	{"custom member beside a function", sseOf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_EVIL","function":{"name":"get_weather","arguments":"{\"city\":\"x\"}"},"custom":{"name":"delete_all","input":"SECRET"}}]}}]}`, finish(0, "tool_calls"), done)},
	// The SDKs stop at data that starts with [DONE]; a lenient client might read on.
	{"a call after [DONE] in its data", "data: [DONE]" + evilChunk + "\n\n"},
	{"a call after [DONE] on a second data line", "data: [DONE]\ndata: " + evilChunk + "\n\n"},
	// The non-stream shape inside a chunk.
	{"a call in message of a chunk", sseOf(`{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[`+evilEntry+`]},"finish_reason":null}]}`, done)},
	{"no choices, a call at the top", sseOf(`{"tool_calls":[`+evilEntry+`]}`, done)},
	{"upper-case name after an allowed one", sseOf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_ok","type":"function","function":{"name":"get_weather","NAME":"delete_all","arguments":"{\"city\":\"SECRET\"}"}}]}}]}`, done)},
}

// TestDifferentialStreams feeds each case through a Stream (whole and split into random reads)
// and checks that no byte of the evil call's id or arguments goes out: the output is searched as
// bytes, so that whatever parser the client uses, it cannot assemble the call.
func TestDifferentialStreams(t *testing.T) {
	for _, tc := range differentialCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, split := range []int{0, 1, 5} {
				out, _, _ := runStream(t, tc.raw, checkerFor(vet.ModeRefuse, false), split, 7)
				for _, marker := range []string{"call_EVIL", "SECRET"} {
					if bytes.Contains(out, []byte(marker)) {
						t.Fatalf("split %d: %s reached the client:\n%q", split, marker, out)
					}
				}
			}
			// The official client sees no call either.
			s := NewStream(io.NopCloser(&relaytest.ChunkReader{Data: []byte(tc.raw), Rnd: rand.New(rand.NewPCG(1, 2)), Max: 9}), checkerFor(vet.ModeRefuse, false), nil)
			cc, _ := clientView(t, s)
			for _, c := range cc.Choices {
				if len(c.Message.ToolCalls) > 0 {
					t.Fatalf("official client assembled %+v", c.Message.ToolCalls)
				}
			}
		})
	}
}

// TestBOMStreamKeepsFirstEvent: a stream that starts with a byte-order mark (dropped by the SSE
// specification) loses nothing, and goes out without the mark.
func TestBOMStreamKeepsFirstEvent(t *testing.T) {
	in := "\ufeff" + sseOf(text("Hi"), text(" there"), finish(0, "stop"), done)
	out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), 1, 3)
	if v := assemble(t, out); v.Content[0] != "Hi there" || !v.Done || bytes.HasPrefix(out, []byte("\ufeff")) {
		t.Fatalf("%+v\n%q", v, out)
	}
}

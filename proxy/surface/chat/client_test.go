package chat

import (
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// clientView runs the official Go SDK's SSE decoder and ChatCompletionAccumulator over the
// output of a Stream.
func clientView(t *testing.T, s io.ReadCloser) (openai.ChatCompletion, error) {
	t.Helper()
	res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: s}
	stream := ssestream.NewStream[openai.ChatCompletionChunk](ssestream.NewDecoder(res), nil)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	return acc.ChatCompletion, stream.Err()
}

func TestOfficialClient(t *testing.T) {
	in := frame(concat([]string{role(), text("Checking both."), toolEv(0, tc(0, "call_a", "web_fetch", ""))},
		callEvents(0, 0, "call_a", "web_fetch", fetchGood, 1)[1:],
		callEvents(0, 1, "call_b", "web_fetch", fetchBad, 2),
		callEvents(0, 2, "call_c", "get_weather", weatherArgs, 1),
		[]string{finish(0, "tool_calls"), done}))
	s := NewStream(io.NopCloser(&relaytest.ChunkReader{Data: []byte(in), Rnd: rand.New(rand.NewPCG(3, 1)), Max: 7}), checkerFor(vet.ModeRefuse, false), nil)
	cc, err := clientView(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 1 {
		t.Fatalf("choices: %+v", cc.Choices)
	}
	m := cc.Choices[0].Message
	if m.Content != "Checking both.\n[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed" {
		t.Errorf("content %q", m.Content)
	}
	var got []call
	for _, c := range m.ToolCalls {
		got = append(got, call{0, c.ID, c.Function.Name, c.Function.Arguments})
	}
	want := []call{{0, "call_a", "web_fetch", fetchGood}, {0, "call_c", "get_weather", weatherArgs}}
	if !slices.Equal(got, want) {
		t.Errorf("tool calls:\n got %+v\nwant %+v", got, want)
	}
	if cc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish %q", cc.Choices[0].FinishReason)
	}

	// error mode: the SDK reports the error event.
	s = NewStream(io.NopCloser(strings.NewReader(in)), checkerFor(vet.ModeError, false), nil)
	if _, err := clientView(t, s); err == nil || !strings.Contains(err.Error(), "tool_call_blocked") {
		t.Errorf("error mode: %v", err)
	}
}

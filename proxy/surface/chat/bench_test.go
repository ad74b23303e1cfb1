package chat

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// textStream is a recorded-style 200-chunk text stream.
func textStream() []byte {
	in := []string{role()}
	for i := range 198 {
		in = append(in, text(fmt.Sprintf(" word%d", i)))
	}
	in = append(in, finish(0, "stop"), done)
	return []byte(frame(in))
}

// toolStream has some text and three parallel calls, one of them blocked.
func toolStream() []byte {
	in := concat([]string{role(), text("Let me check."), toolEv(0, tc(0, "call_a", "get_weather", ""))},
		callEvents(0, 0, "call_a", "get_weather", `{"city":"Zürich","unit":"celsius","days":3}`, 3)[1:],
		callEvents(0, 1, "call_b", "web_fetch", fetchGood, 3),
		callEvents(0, 2, "call_c", "web_fetch", fetchBad, 3),
		[]string{finish(0, "tool_calls"), done})
	return []byte(frame(in))
}

// callStream is the bench harness's stream-tool answer in shape: text, then one call whose
// arguments come in eight deltas, all held until the call is vetted and released together.
func callStream() []byte {
	in := []string{role()}
	for i := range 20 {
		in = append(in, text(fmt.Sprintf(" word%d", i)))
	}
	in = concat(in, callEvents(0, 0, "call_a", "get_weather", `{"city":"Zürich","unit":"celsius"}`, 8), []string{finish(0, "tool_calls"), done})
	return []byte(frame(in))
}

func BenchmarkStream(b *testing.B) {
	// One checker for every stream, as the proxy keeps one per policy version: the relay is
	// measured.
	relaytest.Bench(b, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)),
		relaytest.Named{Name: "text200", Data: textStream()}, relaytest.Named{Name: "tools3", Data: toolStream()},
		relaytest.Named{Name: "call8", Data: callStream()})
}

func TestBenchStreams(t *testing.T) {
	// The benchmark inputs do what they say.
	out, _, blocked := runStream(t, string(textStream()), checkerFor(vet.ModeRefuse, false), 0, 0)
	if !bytes.Equal(out, textStream()) || blocked != 0 || strings.Count(string(out), "data: ") != 201 {
		t.Fatalf("text stream changed or has the wrong size")
	}
	out, _, blocked = runStream(t, string(toolStream()), checkerFor(vet.ModeRefuse, false), 0, 0)
	got := assemble(t, out)
	if call, _, n := runStream(t, string(callStream()), checkerFor(vet.ModeRefuse, false), 0, 0); n != 0 || len(assemble(t, call).Calls) != 1 {
		t.Fatalf("call stream: blocked %d, %s", n, call)
	}
	if blocked != 1 || len(got.Calls) != 2 || got.Content[0] == "" {
		t.Fatalf("tool stream: blocked %d, %+v", blocked, got)
	}
}

// textOf is a text answer of n deltas.
func textOf(n int) []byte {
	in := []string{role()}
	for i := range n {
		in = append(in, text(fmt.Sprintf(" word%d", i)))
	}
	return []byte(frame(append(in, finish(0, "stop"), done)))
}

// TestTextPathAllocs: relaying text deltas allocates nothing per event (the relay's fixed cost
// aside).
func TestTextPathAllocs(t *testing.T) {
	relaytest.CheckTextAllocs(t, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)), textOf)
}

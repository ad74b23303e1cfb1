package responses

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// benchText is a message of 200 text deltas.
func benchText() []byte {
	var words strings.Builder
	for i := range 200 {
		fmt.Fprintf(&words, " w%04d", i)
	}
	return []byte((&rs{}).created().message(0, "msg_1", words.String(), 6).completed().String())
}

// benchTools has some text and three calls, one of them blocked.
func benchTools() []byte {
	return []byte((&rs{}).created().message(0, "msg_1", "Let me check.", 3).
		call(1, "fc_a", "call_a", "get_weather", `{"city":"Zürich","unit":"celsius","days":3}`, 3).
		call(2, "fc_b", "call_b", "web_fetch", fetchGood, 3).call(3, "fc_c", "call_c", "web_fetch", fetchBad, 3).
		completed().String())
}

func BenchmarkStream(b *testing.B) {
	// One checker for every stream, as the proxy keeps one per policy version: the relay is
	// measured.
	relaytest.Bench(b, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)),
		relaytest.Named{Name: "text200", Data: benchText()}, relaytest.Named{Name: "tools3", Data: benchTools()})
}

func TestBenchStreams(t *testing.T) {
	// The benchmark inputs do what they say.
	out, _, blocked := runStream(t, string(benchText()), checkerFor(vet.ModeRefuse, false), 0, 0)
	if !bytes.Equal(out, benchText()) || blocked != 0 || strings.Count(string(out), "output_text.delta\n") != 200 {
		t.Fatalf("text stream changed or has the wrong size")
	}
	out, _, blocked = runStream(t, string(benchTools()), checkerFor(vet.ModeRefuse, false), 0, 0)
	if v := assemble(t, out); blocked != 1 || len(v.Calls) != 2 || v.Text == "" {
		t.Fatalf("tool stream: blocked %d, %+v", blocked, v)
	}
}

// textOf is a text answer of n deltas.
func textOf(n int) []byte {
	return []byte((&rs{}).created().message(0, "msg_1", strings.Repeat(" w0001", n), 6).completed().String())
}

// TestTextPathAllocs: relaying text deltas allocates nothing per event (the relay's fixed cost
// aside).
func TestTextPathAllocs(t *testing.T) {
	relaytest.CheckTextAllocs(t, relaytest.Opener(NewStream, checkerFor(vet.ModeRefuse, false)), textOf)
}

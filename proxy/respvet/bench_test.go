package respvet

import (
	"bytes"
	"fmt"
	"io"
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

func openBench(up io.ReadCloser, rec func(vet.Decision)) relaytest.Stream {
	return NewStream(up, policy(vet.ModeRefuse, false), rec)
}

func BenchmarkStream(b *testing.B) {
	relaytest.Bench(b, "text200", benchText(), openBench)
	relaytest.Bench(b, "tools3", benchTools(), openBench)
}

func TestBenchStreams(t *testing.T) {
	// The benchmark inputs do what they say.
	out, _, blocked := runStream(t, string(benchText()), policy(vet.ModeRefuse, false), 0, 0)
	if !bytes.Equal(out, benchText()) || blocked != 0 || strings.Count(string(out), "output_text.delta\n") != 200 {
		t.Fatalf("text stream changed or has the wrong size")
	}
	out, _, blocked = runStream(t, string(benchTools()), policy(vet.ModeRefuse, false), 0, 0)
	if v := assemble(t, out); blocked != 1 || len(v.Calls) != 2 || v.Text == "" {
		t.Fatalf("tool stream: blocked %d, %+v", blocked, v)
	}
}

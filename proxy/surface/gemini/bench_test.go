package gemini

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// textStream is an answer of n text events and its last event.
func textStream(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(chunk(false, text("some words of the answer ")))
	}
	b.WriteString(chunk(true, text(".")))
	return b.String()
}

// BenchmarkStream relays text answers of two sizes, and one with calls, beside a plain copy of the
// same bytes.
func BenchmarkStream(b *testing.B) {
	tools := chunk(false, text("Checking.")) + chunk(false, fcall("get_weather", weather)) + chunk(false, fcall("web_fetch", evil)) +
		chunk(true, fcall("search", `{"q":"x"}`))
	relaytest.Bench(b, relaytest.Opener(NewStream, relaytest.Policy(vet.ModeRefuse, false)),
		relaytest.Named{Name: "text200", Data: []byte(textStream(200))},
		relaytest.Named{Name: "text400", Data: []byte(textStream(400))},
		relaytest.Named{Name: "tools3", Data: []byte(tools)})
}

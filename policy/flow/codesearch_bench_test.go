package flow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// codeSearchSpec holds send_money for confirmation when its IBAN occurs in no trusted source; the
// outputs of every get_* tool are trusted, each a source of its own.
const codeSearchSpec = `{"toolOutputs":{"trusted":["get_*"]},
  "provenance":[{"id":"payee","tool":"send_money","path":"iban","as":"iban","from":["user","tool:get_*"],"verdict":"confirm","keyArgs":["iban"]}]}`

// codeSearchConversation is the worst case of the code search, of about size bytes: rounds of an
// assistant message that shows a code, a user message of code-shaped words that are near misses of
// it (one character off, hyphenated, spaced, or ordinary eight-letter words), and a call of a
// distinct trusted tool with its output.
func codeSearchConversation(size int) []turn {
	turns := []turn{{App: "You pay the user's bills."}, {User: "Pay the bills in my inbox."}}
	total := 0
	for i := 0; total < size; i++ {
		shown := fmt.Sprintf("%04X-%04X", i%0xFFFF, (i*7)%0xFFFF)
		notice := "[promptgate] held tool call send_money for your confirmation. To run it once, reply with the code " +
			strings.NewReplacer("I", "J", "L", "K", "O", "P", "U", "V").Replace(shown) + " (valid for 10 minutes)."
		var words []string
		for j := 0; j < 24; j++ {
			words = append(words, fmt.Sprintf("%04X-%04X", (i+j+1)%0xFFFF, j), fmt.Sprintf("%04X %04X", j, i%0xFFFF), "standard", "payments")
		}
		user := strings.Join(words, " ")
		id := fmt.Sprintf("c%d", i)
		tool := fmt.Sprintf("get_bills_%d", i)
		out := fmt.Sprintf("Bill %d: pay account %d by Friday.", i, i)
		turns = append(turns, turn{Assistant: notice}, turn{User: user},
			turn{Calls: []neutralCall{{ID: id, Tool: tool, Args: json.RawMessage(`{}`)}}}, turn{Tool: id, Output: out})
		total += len(notice) + len(user) + len(out) + 2*len(id) + len(tool) + 200
	}
	return turns
}

// BenchmarkCodeSearch measures a call held for confirmation in the code search's worst case, at 1
// and 10 MiB (the check reads the typed codes, the shown codes and the trusted sources of the whole
// conversation), beside one read of every byte of the same texts: the two must grow alike.
func BenchmarkCodeSearch(b *testing.B) {
	p := mustCompile(b, codeSearchSpec)
	call := flow.Call{Tool: "send_money", Args: []byte(`{"iban":"GB82WEST12345698765432"}`)}
	for _, mb := range []int{1, 10} {
		tr := flowtest.Transcript(codeSearchConversation(mb << 20))
		size := 0
		for _, seg := range tr.Segments() {
			size += len(seg.Text)
		}
		cf, err := flow.NewConfirmer(key32, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		opt := flow.Options{Confirmer: cf}
		b.Run(fmt.Sprintf("%dMiB/baseline-read-every-byte", mb), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				n := 0
				for _, seg := range tr.Segments() {
					n += utf8.RuneCountInString(seg.Text)
				}
				if n == 0 {
					b.Fatal("no text")
				}
			}
		})
		b.Run(fmt.Sprintf("%dMiB/analyze+check", mb), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				c, err := p.Analyze(tr, opt)
				if err != nil {
					b.Fatal(err)
				}
				if r := c.Check(call); r.Verdict != flow.VerdictHeld {
					b.Fatalf("%s: %s", r.Verdict, r.Reason)
				}
			}
		})
	}
}

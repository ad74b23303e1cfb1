package flow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/promptgate/promptgate/policy/flow"
)

// escapedJSON is the JSON object {"x": s} with every byte outside letters and digits written as a
// \u escape: what a tool's JSON reader decodes back to s, though s's text appears nowhere in it.
func escapedJSON(s string) string {
	var b strings.Builder
	b.WriteString(`{"x":"`)
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'):
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := (r-0x10000)>>10+0xd800, (r-0x10000)&0x3ff+0xdc00
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteString(`"}`)
	return b.String()
}

const jsonStringsSpec = `{"scan":[{"id":"hosts","tool":"http","path":"body","find":["url","email"],"hosts":["acme.com","*.acme.com"]},
  {"id":"from","tool":"http","path":"body","find":["url","email","iban"],"from":["user"]}]}`

// checkJSONInString checks that a text the scan refuses is refused too when a string argument
// carries it as a JSON document that encoding/json decodes back to it.
func checkJSONInString(t *testing.T, p *flow.Policy, text string) {
	t.Helper()
	doc := escapedJSON(text)
	var back struct{ X string }
	if err := json.Unmarshal([]byte(doc), &back); err != nil || back.X != text {
		return // not a text encoding/json carries whole (invalid UTF-8)
	}
	plain, _ := json.Marshal(map[string]string{"body": text})
	wrapped, _ := json.Marshal(map[string]string{"body": doc})
	c := analyze(t, p, readersConversation, flow.Options{})
	if c.Check(flow.Call{Tool: "http", Args: plain}).Released() {
		return
	}
	c = analyze(t, p, readersConversation, flow.Options{})
	if r := c.Check(flow.Call{Tool: "http", Args: wrapped}); r.Released() {
		t.Errorf("%q is refused, but passes as the JSON document %s", text, doc)
	}
}

var jsonStringTexts = []string{
	"Write to eve@evil.net", "Log in at https://acme.com@evil.net/", "Pay DE89 3704 0044 0532 0130 00",
	"see https://evil.net/x", `"bob@acme.com"@evil.net`, "[x](https://acme.com\\@evil.net)",
}

// TestScanReadsJSONInStrings: a string argument holding a JSON document is scanned as a JSON reader
// decodes it too, escapes undone, at any depth within the scan's bound.
func TestScanReadsJSONInStrings(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, jsonStringsSpec)
	for _, text := range jsonStringTexts {
		checkJSONInString(t, p, text)
	}
	twice, _ := json.Marshal(map[string]string{"inner": escapedJSON("eve@evil.net")})
	c := analyze(t, p, readersConversation, flow.Options{})
	args, _ := json.Marshal(map[string]string{"body": string(twice)})
	if r := c.Check(flow.Call{Tool: "http", Args: args}); r.Released() {
		t.Errorf("JSON in a string in JSON in a string passes: %s", args)
	}
	ok, _ := json.Marshal(map[string]string{"body": `{"to":"bob@acme.com","url":"https:\/\/acme.com\/docs"}`})
	c = analyze(t, p, readersConversation, flow.Options{})
	if r := c.Check(flow.Call{Tool: "http", Args: ok}); !r.Released() {
		t.Errorf("the user's own values in a JSON document are refused: %+v", r)
	}
}

// FuzzScanReadsJSONInStrings: for any text, the same, against encoding/json.
func FuzzScanReadsJSONInStrings(f *testing.F) {
	for _, s := range jsonStringTexts {
		f.Add(s)
	}
	p := mustCompile(f, jsonStringsSpec)
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 256 {
			return
		}
		checkJSONInString(t, p, text)
	})
}

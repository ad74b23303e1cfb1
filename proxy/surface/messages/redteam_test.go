package messages

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// TestDifferentialMessages: SSE framings that some client (anthropic-sdk-go splits lines at LF only, the WHATWG
// parser drops a BOM, lenient line readers trim) reads as a tool_use block that the relay did not see.
func TestDifferentialMessages(t *testing.T) {
	start := `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_EVIL","name":"delete_all","input":{"k":"SECRET"}}}`
	for name, raw := range map[string]string{
		"lone CR before the JSON":   "event: content_block_start\ndata: \r" + start + "\n\n",
		"space before data":         "event: content_block_start\n data: " + start + "\n\n",
		"form feed before the JSON": "event: content_block_start\ndata:\f" + start + "\n\n",
		"BOM before data":           "event: content_block_start\n\ufeffdata: " + start + "\n\n",
		"CR CR LF":                  "event: content_block_start\r\r\ndata: " + start + "\r\r\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			in := (&as{}).start().String() + raw + (&as{}).ev("content_block_stop", `{"index":0}`).end("tool_use").String()
			for _, split := range []int{0, 4} {
				out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), split, 3)
				if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
					t.Fatalf("split %d reached the client:\n%q", split, out)
				}
				if strings.Contains(string(out), `"stop_reason":"tool_use"`) {
					t.Fatalf("stop_reason tool_use with no tool_use released:\n%s", out)
				}
			}
		})
	}
}

// TestCaseVariantKeys: keys that Go's encoding/json (community Anthropic clients) reads as type, content_block,
// name ... make an event or a body malformed; keys inside a tool's input are the tool's own and stay allowed.
func TestCaseVariantKeys(t *testing.T) {
	for name, start := range map[string]string{
		"TYPE beside type":                   `{"index":0,"content_block":{"type":"text","text":"","TYPE":"tool_use","id":"toolu_EVIL","name":"delete_all","input":{"k":"SECRET"}}}`,
		"Content_Block":                      `{"index":0,"Content_Block":{"type":"tool_use","id":"toolu_EVIL","name":"delete_all","input":{"k":"SECRET"}}}`,
		"NAME beside name":                   `{"index":0,"content_block":{"type":"tool_use","id":"toolu_EVIL","name":"search","NAME":"delete_all","input":{"k":"SECRET"}}}`,
		"Content_Block beside content_block": `{"index":0,"content_block":{"type":"text","text":""},"Content_Block":{"type":"tool_use","id":"toolu_EVIL","name":"delete_all","input":{"k":"SECRET"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			in := (&as{}).start().ev("content_block_start", start).ev("content_block_stop", `{"index":0}`).end("tool_use").String()
			out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1)
			if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("reached the client:\n%s", out)
			}
		})
	}
	msg := func(block string) []byte {
		return []byte(`{"id":"msg_1","type":"message","role":"assistant","content":[` + block + `],"stop_reason":"tool_use"}`)
	}
	if _, _, err := Body(msg(`{"type":"tool_use","id":"toolu_1","name":"search","Name":"delete_all","input":{}}`), checkerFor(vet.ModeRefuse, false), nil); err == nil {
		t.Error("body with Name beside name: no error")
	}
	out, res, err := Body(msg(`{"type":"tool_use","id":"toolu_1","name":"search","input":{"q":"x","Type":"y","NAME":"z"}}`), checkerFor(vet.ModeRefuse, false), nil)
	if err != nil || res.Blocked != 0 || !bytes.Contains(out, []byte(`"NAME":"z"`)) {
		t.Fatalf("a tool's own keys: %v %+v %s", err, res, out)
	}
	in := (&as{}).start().ev("content_block_start", `{"index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"search","input":{"q":"x","Type":"y"}}}`).
		ev("content_block_stop", `{"index":0}`).end("tool_use").String()
	if out, _, blocked := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1); blocked != 0 || !bytes.Contains(out, []byte(`"Type":"y"`)) {
		t.Fatalf("stream, a tool's own keys: blocked %d\n%s", blocked, out)
	}
}

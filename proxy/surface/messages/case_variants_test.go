package messages

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// TestCaseVariantTypes: a block or event type that differs from tool_use, content_block_start ...
// in case only is what a client that reads enums without regard to case (System.Text.Json's
// JsonStringEnumConverter) takes for it: such a block is blocked, such an event malformed.
func TestCaseVariantTypes(t *testing.T) {
	evilBlock := func(typ string) string {
		return `{"type":"` + typ + `","id":"toolu_EVIL","name":"get_weather","input":{"city":"SECRET"}}`
	}
	for _, typ := range []string{"TOOL_USE", "Tool_Use", "tool_usE", "tool_uſe"} {
		t.Run("body "+typ, func(t *testing.T) {
			body := `{"id":"msg_1","type":"message","role":"assistant","content":[` + evilBlock(typ) + `],"stop_reason":"tool_use"}`
			out, res, err := Body([]byte(body), checkerFor(vet.ModeRefuse, false), nil)
			if err != nil || res.Blocked != 1 || bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("%v %+v\n%s", err, res, out)
			}
		})
		t.Run("stream block "+typ, func(t *testing.T) {
			in := (&as{}).start().ev("content_block_start", `{"index":0,"content_block":`+evilBlock(typ)+`}`).
				ev("content_block_stop", `{"index":0}`).end("tool_use").String()
			for _, split := range []int{0, 3} {
				out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), split, 5)
				if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
					t.Fatalf("split %d:\n%s", split, out)
				}
			}
		})
	}
	for _, evTyp := range []string{"CONTENT_BLOCK_START", "Content_Block_Start"} {
		t.Run("stream event "+evTyp, func(t *testing.T) {
			in := (&as{}).start().String() + "event: " + evTyp + "\ndata: " +
				`{"type":"` + evTyp + `","index":0,"content_block":` + evilBlock("tool_use") + "}\n\n" +
				(&as{}).ev("content_block_stop", `{"index":0}`).end("tool_use").String()
			out, _, _ := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1)
			if bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("reached the client:\n%s", out)
			}
			if strings.Contains(string(out), `"stop_reason":"tool_use"`) {
				t.Fatalf("stop_reason tool_use with no tool_use released:\n%s", out)
			}
		})
	}
}

// TestMessageStartEscapedType: a tool_use block in message_start's content (the SDKs take the
// message as the start of what they accumulate) whose type is spelt with a JSON escape or in
// another case is vetted like any other.
func TestMessageStartEscapedType(t *testing.T) {
	for name, typ := range map[string]string{"escaped": `tool\u005fuse`, "escaped u": `tool_\u0075se`, "case": `TOOL_USE`} {
		t.Run(name, func(t *testing.T) {
			in := (&as{}).ev("message_start", `{"message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"`+typ+`","id":"toolu_EVIL","name":"delete_all","input":{"k":"SECRET"}}],"model":"m","stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}`).
				end("tool_use").String()
			out, _, blocked := runStream(t, in, checkerFor(vet.ModeRefuse, false), 0, 1)
			if blocked != 1 || bytes.Contains(out, []byte("EVIL")) || bytes.Contains(out, []byte("SECRET")) {
				t.Fatalf("blocked %d:\n%s", blocked, out)
			}
		})
	}
}

// TestCaseVariantKeys: keys that Go's encoding/json (community Anthropic clients) reads as type,
// content_block, name ... make an event or a body malformed; keys inside a tool's input are the
// tool's own and stay allowed.
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

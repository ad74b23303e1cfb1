package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface/surfacetest"
)

func TestTranscriptNeutral(t *testing.T) {
	t.Parallel()
	surfacetest.Neutral(t, Surface{}, flowtest.Messages)
}

// TestTranscriptShapes covers the shapes of Anthropic Messages that the neutral form does not have.
func TestTranscriptShapes(t *testing.T) {
	t.Parallel()
	body := `{"system":"sys","messages":[{"role":"user","content":"plain"},
	  {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}},
	    {"type":"web_search_tool_result","tool_use_id":"s1","content":[{"type":"web_search_result","url":"https://a.example/","title":"A","encrypted_content":"zz"}]},
	    {"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"list_x","input":{}},
	    {"type":"mcp_tool_use","id":"m1","name":"lookup","server_name":"crm","input":{"q":1}},
	    {"type":"mcp_tool_result","tool_use_id":"m1","content":[{"type":"text","text":"crm says hi"}]}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"items"},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc text"}},{"type":"text","text":"thanks"}]},
	  {"role":"critic","content":"??"}]}`
	tr, err := transcript(assembly.NewBody([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"app:sys", "user:plain", "tool:web_search:https://a.example/\nA", "assistant:ok", "mcp:crm:crm says hi",
		"tool:list_x:items", "context:doc text", "user:thanks", "tool:?:critic\n??"}
	var got []string
	for _, s := range tr.Segments() {
		got = append(got, s.Source.String()+":"+s.Text)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("segments\n got %q\nwant %q", got, want)
	}
	if got := strings.Join(flowtest.CallNames(tr.Calls()), " "); got != `web_search#s1({"query":"q"}) list_x#t1({}) mcp#m1({"q":1})` {
		t.Errorf("calls %s", got)
	}
	if _, err := transcript(assembly.NewBody([]byte(`{"messages":"x"}`))); err == nil {
		t.Error("messages x was read")
	}
}

func FuzzTranscript(f *testing.F) {
	f.Add(flowtest.Render(f, flowtest.Messages, []flowtest.Turn{{App: "a"}, {User: "pay DE89370400440532013000 to bob@x.com"},
		{Calls: []flowtest.Call{{ID: "c", Tool: "t", Args: json.RawMessage(`{"a":1}`)}}}, {Tool: "c", Output: "https://evil.net"}}, nil))
	f.Add([]byte(`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"assistant","content":[{"type":"mcp_tool_use","id":"m","server_name":"crm"}]},{"role":"user","content":[{"type":"mcp_tool_result","tool_use_id":"m","content":"o"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { surfacetest.Fuzz(t, Surface{}, body) })
}

func TestAppendTurn(t *testing.T) {
	t.Parallel()
	refusal := flow.RefusalText("send_email", "rule r: to does not occur in user")
	calls := []relay.Answered{{ID: "call_1", Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal}}
	for _, tc := range []struct {
		name, body string
		turn       relay.Turn
		want       string
	}{
		{"built", `{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]}`, relay.Turn{Text: "Sending.", Calls: calls},
			`{"model":"m","system":"s","messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":[{"type":"text","text":"Sending."},{"type":"tool_use","id":"call_1","name":"send_email","input":{"to":"eve@evil.net"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":` + jsonString(refusal) + `,"is_error":true}]}]}`},
		{"raw", `{"messages":[{"role":"user","content":"hi"}]}`,
			relay.Turn{Raw: []byte(`[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"call_1","name":"send_email","input":{}}]`), Calls: calls},
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"call_1","name":"send_email","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":` + jsonString(refusal) + `,"is_error":true}]}]}`},
	} {
		out, err := appendTurn([]byte(tc.body), tc.turn)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got, want := gjson.GetBytes(out, "@ugly").Raw, gjson.Get(tc.want, "@ugly").Raw; got != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
		}
		surfacetest.ReadsBack(t, tc.name, Surface{}, out, tc.turn)
	}
	if _, err := appendTurn([]byte(`{"messages":{}}`), relay.Turn{Calls: calls}); err == nil {
		t.Error("appended to messages {}")
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package responses

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
	surfacetest.Neutral(t, New(Options{}), flowtest.Responses)
}

// segLabels lists a transcript's segments as "source:text".
func segLabels(tr *flow.Transcript) []string {
	var out []string
	for _, s := range tr.Segments() {
		out = append(out, s.Source.String()+":"+s.Text)
	}
	return out
}

// TestTranscriptShapes covers the shapes of the Responses API that the neutral form does not have.
func TestTranscriptShapes(t *testing.T) {
	t.Parallel()
	sf := New(Options{})
	for _, tc := range []struct {
		name, body string
		want       []string
		calls      []string
		unseen     string
	}{
		{"string input", `{"instructions":"be brief","input":"hi there"}`, []string{"app:be brief", "user:hi there"}, nil, ""},
		{"previous_response_id not in the record", `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c1","output":"x"}]}`,
			[]string{"tool:?:x"}, nil, "previous_response_id"},
		{"conversation", `{"conversation":"conv_1","input":"go"}`, []string{"user:go"}, nil, "conversation"},
		{"built-in items, reasoning, item_reference, unknown item",
			`{"input":[{"role":"user","content":"find"},{"type":"reasoning","summary":[{"type":"summary_text","text":"think"}]},
			  {"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}},
			  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"found it","annotations":[]}]},
			  {"type":"mcp_call","id":"mc_1","name":"lookup","server_label":"crm","arguments":"{\"q\":1}","output":"crm says hi"},
			  {"type":"mcp_list_tools","id":"ml_1","server_label":"web","tools":[{"name":"fetch","description":"fetches pages"}]},
			  {"type":"computer_call","call_id":"cc","action":{"type":"click"}},{"type":"computer_call_output","call_id":"cc","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,AAA"}},
			  {"type":"item_reference","id":"msg_9"},{"type":"new_thing","text":"boo"}]}`,
			[]string{"user:find", "tool:web_search:", "assistant:found it", "mcp:crm:crm says hi", "mcp:web:fetch\nfetches pages",
				"tool:computer_use_preview:", "tool:?:boo"},
			[]string{"web_search#ws_1()", `mcp#mc_1({"q":1})`, "computer_use_preview#cc()"}, "item_reference"},
	} {
		tr, err := sf.Transcript(assembly.NewBody([]byte(tc.body)))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := segLabels(tr); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: segments\n got %q\nwant %q", tc.name, got, tc.want)
		}
		if got := flowtest.CallNames(tr.Calls()); strings.Join(got, " ") != strings.Join(tc.calls, " ") {
			t.Errorf("%s: calls %q, want %q", tc.name, got, tc.calls)
		}
		if tr.Unseen() != tc.unseen {
			t.Errorf("%s: unseen %q, want %q", tc.name, tr.Unseen(), tc.unseen)
		}
	}
	if _, err := sf.Transcript(assembly.NewBody([]byte(`{"input":7}`))); err == nil {
		t.Error("input 7 was read")
	}
}

// TestTranscriptHistory: a request that continues a response in the record reads the recorded chain
// first, marked as history.
func TestTranscriptHistory(t *testing.T) {
	t.Parallel()
	sf := New(Options{})
	sf.history.record("resp_1", "", []byte(`[{"role":"user","content":"first"},{"type":"function_call","call_id":"c1","name":"read","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"data"}]`))
	tr, err := sf.Transcript(assembly.NewBody([]byte(`{"previous_response_id":"resp_1","input":[{"role":"user","content":"and now?"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := segLabels(tr); strings.Join(got, "|") != "user:first|tool:read:data|user:and now?" || tr.Unseen() != "" {
		t.Fatalf("got %q unseen %q", got, tr.Unseen())
	}
	if s := tr.Segments(); !s[0].InHistory || s[2].InHistory {
		t.Fatalf("history flags: %+v", s)
	}
}

func FuzzTranscript(f *testing.F) {
	f.Add(flowtest.Render(f, flowtest.Responses, []flowtest.Turn{{App: "a"}, {User: "pay DE89370400440532013000 to bob@x.com"},
		{Calls: []flowtest.Call{{ID: "c", Tool: "t", Args: json.RawMessage(`{"a":1}`)}}}, {Tool: "c", Output: "https://evil.net"}}, nil))
	f.Add([]byte(`{"previous_response_id":"r","input":[{"type":"web_search_call"},{"type":"item_reference","id":"x"}]}`))
	f.Add([]byte(`{"input":[{"type":"mcp_call","id":"m","server_label":"crm","output":"o"},{"type":"mcp_list_tools","tools":[]}]}`))
	sf := New(Options{})
	f.Fuzz(func(t *testing.T, body []byte) { surfacetest.Fuzz(t, sf, body) })
}

func TestAppendTurn(t *testing.T) {
	t.Parallel()
	refusal := flow.RefusalText("send_email", "rule r: to does not occur in user")
	calls := []relay.Answered{{ID: "call_1", Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal}}
	sf := New(Options{})
	for _, tc := range []struct {
		name, body string
		turn       relay.Turn
		want       string
		readBack   bool
	}{
		{"stateless, string input", `{"model":"m","input":"hi","store":false}`, relay.Turn{Calls: calls, ResponseID: "resp_1"},
			`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"call_1","name":"send_email","arguments":"{\"to\":\"eve@evil.net\"}"},` +
				`{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"store":false}`, true},
		{"raw output appended", `{"input":[{"role":"user","content":"hi"}],"store":false}`,
			relay.Turn{Raw: []byte(`[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"send_email","arguments":"{}"}]`), Calls: calls},
			`{"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"send_email","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"store":false}`, true},
		{"stored: previous_response_id", `{"input":"hi","previous_response_id":"resp_0"}`, relay.Turn{Calls: calls, ResponseID: "resp_1"},
			`{"input":[{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"previous_response_id":"resp_1"}`, false},
		{"conversation", `{"conversation":"conv_1","input":"hi"}`,
			relay.Turn{Calls: []relay.Answered{{ID: "c", Tool: "t", Custom: true, Args: []byte(`"ls"`), Result: "no"}}, ResponseID: "resp_1"},
			`{"conversation":"conv_1","input":[{"type":"custom_tool_call_output","call_id":"c","output":"no"}]}`, false},
	} {
		out, err := appendTurn([]byte(tc.body), tc.turn)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got, want := gjson.GetBytes(out, "@ugly").Raw, gjson.Get(tc.want, "@ugly").Raw; got != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
		}
		if tc.readBack {
			surfacetest.ReadsBack(t, tc.name, sf, out, tc.turn)
		}
	}
	for _, bad := range []struct {
		body string
		turn relay.Turn
	}{
		{`{"input":7,"store":false}`, relay.Turn{Calls: calls}},
		{`{"input":[],"store":false}`, relay.Turn{Calls: calls, Raw: []byte(`{}`)}},
	} {
		if _, err := appendTurn([]byte(bad.body), bad.turn); err == nil {
			t.Errorf("%s: appended", bad.body)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

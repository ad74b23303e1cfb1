package chat

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
	surfacetest.Neutral(t, Surface{}, flowtest.Chat)
}

// TestTranscriptShapes covers the shapes of Chat Completions that the neutral form does not have.
func TestTranscriptShapes(t *testing.T) {
	t.Parallel()
	body := `{"messages":[{"role":"developer","content":"rules"},
	  {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"https://img.example/x.png"}}]},
	  {"role":"assistant","content":null,"function_call":{"name":"list_files","arguments":"{}"}},
	  {"role":"function","name":"list_files","content":"f1"},
	  {"role":"function","name":"other","content":"f2"},
	  {"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"list_a","arguments":"{}"}},{"id":"x","type":"custom","custom":{"name":"shell","input":"ls"}}]},
	  {"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"dup"}]},
	  {"role":"critic","content":"??"}]}`
	tr, err := transcript(assembly.NewBody([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"app:rules", "user:a\nb", "context:https://img.example/x.png", "assistant:", "tool:list_files:f1", "tool:?:f2",
		"assistant:", "tool:?:dup", "tool:?:critic\n??"}
	var got []string
	for _, s := range tr.Segments() {
		got = append(got, s.Source.String()+":"+s.Text)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("segments\n got %q\nwant %q", got, want)
	}
	if got := strings.Join(flowtest.CallNames(tr.Calls()), " "); got != `list_files#({}) list_a#x({}) shell#x("ls")` {
		t.Errorf("calls %s", got)
	}
	for _, bad := range []string{`{"messages":{}}`, `{}`} {
		if _, err := transcript(assembly.NewBody([]byte(bad))); err == nil {
			t.Errorf("%s: read", bad)
		}
	}
}

func FuzzTranscript(f *testing.F) {
	f.Add(flowtest.Render(f, flowtest.Chat, []flowtest.Turn{{App: "a"}, {User: "pay DE89370400440532013000 to bob@x.com"},
		{Calls: []flowtest.Call{{ID: "c", Tool: "t", Args: json.RawMessage(`{"a":1}`)}}}, {Tool: "c", Output: "https://evil.net"}}, nil))
	f.Add([]byte(`{"messages":[{"role":"function","name":"f"},{"role":"x"},{"role":"user","content":[{"type":"image_url"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { surfacetest.Fuzz(t, Surface{}, body) })
}

func TestAppendTurn(t *testing.T) {
	t.Parallel()
	refusal := flow.RefusalText("send_email", "rule r: to does not occur in user")
	calls := []relay.Answered{{ID: "call_1", Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal}}
	for _, tc := range []struct {
		name, body string
		turn       relay.Turn
		want       string // compact JSON of the whole result
	}{
		{"built", `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":1}`,
			relay.Turn{Text: "Sending.", Calls: calls},
			`{"model":"m","messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":"Sending.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"send_email","arguments":"{\"to\":\"eve@evil.net\"}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":` + jsonString(refusal) + `}],"x":1}`},
		{"raw and legacy", `{"messages":[]}`,
			relay.Turn{Raw: []byte(`{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}}`),
				Calls: []relay.Answered{{Tool: "f", Result: "no"}}},
			`{"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"no"}]}`},
		{"custom", `{"messages":[]}`,
			relay.Turn{Calls: []relay.Answered{{ID: "c", Tool: "shell", Custom: true, Args: []byte(`"ls"`), Result: "no"}}},
			`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"custom","custom":{"name":"shell","input":"ls"}}]},{"role":"tool","tool_call_id":"c","content":"no"}]}`},
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
	for _, bad := range []struct {
		body string
		turn relay.Turn
	}{
		{`{}`, relay.Turn{Calls: calls}},
		{`{"messages":{}}`, relay.Turn{Calls: calls}},
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

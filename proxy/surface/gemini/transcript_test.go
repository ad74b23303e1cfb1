package gemini

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface/surfacetest"
)

func TestTranscriptNeutral(t *testing.T) {
	t.Parallel()
	surfacetest.Neutral(t, Surface{}, flowtest.Gemini)
}

// segments lists a transcript's segments as "source:text".
func segments(t *testing.T, body string) []string {
	t.Helper()
	tr, err := transcript(assembly.NewBody([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range tr.Segments() {
		out = append(out, s.Source.String()+":"+s.Text)
	}
	return out
}

// call and resp write a functionCall and a functionResponse part; id "" leaves the id out.
func call(name, id string) string {
	if id == "" {
		return `{"functionCall":{"name":"` + name + `","args":{}}}`
	}
	return `{"functionCall":{"id":"` + id + `","name":"` + name + `","args":{}}}`
}

func resp(name, id, out string) string {
	if id == "" {
		return `{"functionResponse":{"name":"` + name + `","response":{"output":"` + out + `"}}}`
	}
	return `{"functionResponse":{"id":"` + id + `","name":"` + name + `","response":{"output":"` + out + `"}}}`
}

func model(parts ...string) string {
	return `{"role":"model","parts":[` + strings.Join(parts, ",") + `]}`
}
func user(parts ...string) string {
	return `{"role":"user","parts":[` + strings.Join(parts, ",") + `]}`
}

// TestTranscriptMatchesByNameAndOrder checks how functionResponse parts are matched to their calls:
// by id where both carry one, else by name and order within the model's turn; where the match
// cannot be told, the output is tool:? (trusted by no rule).
func TestTranscriptMatchesByNameAndOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		contents []string
		want     []string // the sources of the outputs, in order
	}{
		{"one call by name", []string{model(call("a", "")), user(resp("a", "", "x"))}, []string{"tool:a"}},
		{"parallel calls of two names, answered out of order",
			[]string{model(call("a", ""), call("b", "")), user(resp("b", "", "y"), resp("a", "", "x"))}, []string{"tool:b", "tool:a"}},
		{"two calls of one name, both answered", []string{model(call("a", ""), call("a", "")), user(resp("a", "", "x"), resp("a", "", "y"))},
			[]string{"tool:a", "tool:a"}},
		{"two calls of one name, one answered: which one cannot be told",
			[]string{model(call("a", ""), call("a", ""), call("b", "")), user(resp("a", "", "x"), resp("b", "", "y"))}, []string{"tool:?", "tool:b"}},
		{"more answers than calls", []string{model(call("a", "")), user(resp("a", "", "x"), resp("a", "", "y"))}, []string{"tool:?", "tool:?"}},
		{"an answer of a name never called", []string{model(call("a", "")), user(resp("b", "", "x"))}, []string{"tool:?"}},
		{"an answer before any call", []string{user(resp("a", "", "x")), model(call("a", "")), user(resp("a", "", "y"))},
			[]string{"tool:?", "tool:a"}},
		{"an answer to an earlier turn's call", []string{model(call("a", "")), user(resp("a", "", "x")), model(call("b", "")), user(resp("a", "", "y"))},
			[]string{"tool:a", "tool:?"}},
		{"ids", []string{model(call("a", "1"), call("a", "2")), user(resp("a", "2", "y"), resp("a", "1", "x"))}, []string{"tool:a", "tool:a"}},
		{"an id whose call has another name", []string{model(call("a", "1")), user(resp("b", "1", "x"))}, []string{"tool:?"}},
		{"an id answered twice", []string{model(call("a", "1")), user(resp("a", "1", "x"), resp("a", "1", "y"))}, []string{"tool:a", "tool:?"}},
		{"an id two calls have", []string{model(call("a", "1"), call("a", "1")), user(resp("a", "1", "x"))}, []string{"tool:?"}},
		{"an id no call has", []string{model(call("a", "1")), user(resp("a", "9", "x"))}, []string{"tool:?"}},
		{"a call with an id answered without one", []string{model(call("a", "1")), user(resp("a", "", "x"))}, []string{"tool:a"}},
		{"a response in the model's content takes no call's id", []string{model(call("a", "1"), resp("a", "1", "x")), user(resp("a", "1", "y"))},
			[]string{"tool:?", "tool:a"}},
		{"a response in the model's content takes no call's place", []string{model(call("a", "")), model(resp("a", "", "x"))}, []string{"tool:?"}},
	} {
		body := `{"contents":[` + strings.Join(tc.contents, ",") + `]}`
		var got []string
		for _, s := range segments(t, body) {
			if src, _, _ := strings.Cut(s, ":"); src == "tool" {
				got = append(got, s[:strings.LastIndex(s, ":")])
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: outputs %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTranscriptShapes covers the shapes of the Gemini API that the neutral form does not have.
func TestTranscriptShapes(t *testing.T) {
	t.Parallel()
	body := `{"system_instruction":{"parts":[{"text":"sys"}]},"contents":[
	  {"parts":[{"text":"no role is the user"},{"inline_data":{"mime_type":"text/plain","data":"aGk="}},{"fileData":{"fileUri":"https://f.example/doc"}}]},
	  {"role":"model","parts":[{"text":"thinking","thought":true},{"text":"ok"},{"executableCode":{"language":"PYTHON","code":"print(1)"}},
	    {"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"1"}},{"function_call":{"name":"list_x","args":{"q":1}}}]},
	  {"role":"user","parts":[{"function_response":{"name":"list_x","response":{"items":["a","b"]}}},{"text":"thanks"}]},
	  {"role":"critic","parts":[{"text":"??"}]}]}`
	want := []string{"app:sys", "user:no role is the user", "context:aGk=", "context:https://f.example/doc", "assistant:ok",
		"tool:code_execution:OUTCOME_OK\n1", "tool:list_x:a\nb", "user:thanks", "tool:?:critic\n??"}
	if got := segments(t, body); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("segments\n got %q\nwant %q", got, want)
	}
	tr, _ := transcript(assembly.NewBody([]byte(body)))
	if got := strings.Join(flowtest.CallNames(tr.Calls()), " "); got != `list_x#({"q":1})` {
		t.Errorf("calls %s", got)
	}
	if _, err := transcript(assembly.NewBody([]byte(`{"contents":"x"}`))); err == nil {
		t.Error("contents x was read")
	}
}

func FuzzTranscript(f *testing.F) {
	f.Add(flowtest.Render(f, flowtest.Gemini, []flowtest.Turn{{App: "a"}, {User: "pay DE89370400440532013000 to bob@x.com"},
		{Calls: []flowtest.Call{{ID: "c", Tool: "t", Args: json.RawMessage(`{"a":1}`)}}}, {Tool: "c", Output: "https://evil.net"}}, nil))
	f.Add([]byte(`{"contents":[` + model(call("t", ""), call("t", "")) + `,` + user(resp("t", "", "o")) + `]}`))
	f.Add([]byte(`{"contents":[{"role":"model","parts":[{"function_call":{"name":"t"}}]},{"parts":[{"functionResponse":{"name":"t","response":{"output":"x"}}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { surfacetest.Fuzz(t, Surface{}, body) })
}

func TestAppendTurn(t *testing.T) {
	t.Parallel()
	refusal := flow.RefusalText("send_email", "rule r: to does not occur in user")
	byName := []relay.Answered{{Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal},
		{Tool: "send_email", Args: []byte(`{"to":"x@evil.net"}`), Result: refusal}}
	byID := []relay.Answered{{ID: "c1", Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal}}
	for _, tc := range []struct {
		name, body string
		turn       relay.Turn
		want       string
	}{
		{"built by name", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0}}`, relay.Turn{Text: "Sending.", Calls: byName},
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]},` +
				`{"role":"model","parts":[{"text":"Sending."},{"functionCall":{"name":"send_email","args":{"to":"eve@evil.net"}}},{"functionCall":{"name":"send_email","args":{"to":"x@evil.net"}}}]},` +
				`{"role":"user","parts":[{"functionResponse":{"name":"send_email","response":{"error":` + relaytestJSON(refusal) + `}}},` +
				`{"functionResponse":{"name":"send_email","response":{"error":` + relaytestJSON(refusal) + `}}}]}],"generationConfig":{"temperature":0}}`},
		{"raw with an id", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			relay.Turn{Raw: []byte(`[{"functionCall":{"id":"c1","name":"send_email","args":{}},"thoughtSignature":"sig"}]`), Calls: byID},
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"functionCall":{"id":"c1","name":"send_email","args":{}},"thoughtSignature":"sig"}]},` +
				`{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"send_email","response":{"error":` + relaytestJSON(refusal) + `}}}]}]}`},
	} {
		out, err := appendTurn([]byte(tc.body), tc.turn)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(out) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, out, tc.want)
		}
		surfacetest.ReadsBack(t, tc.name, Surface{}, out, tc.turn)
	}
	if _, err := appendTurn([]byte(`{"contents":{}}`), relay.Turn{Calls: byID}); err == nil {
		t.Error("contents {} was appended to")
	}
}

// relaytestJSON is s as a JSON string.
func relaytestJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

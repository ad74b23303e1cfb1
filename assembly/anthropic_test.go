package assembly

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

func TestParseMessages(t *testing.T) {
	body := `{"model":"claude","stream":true,"system":[{"type":"text","text":"One."},{"type":"text","text":"Two.","cache_control":{"type":"ephemeral"}}],
	  "messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"},{"type":"text","text":"latest"}]}],
	  "tools":[{"name":"f","description":"F.","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"},{"type":"bash_20250124","name":"bash"},{"type":"mystery_2030"}]}`
	m, err := ParseMessages([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if m.Model != "claude" || !m.Stream || m.LatestUser != "latest" || !m.NativeTools || !slices.Equal(m.Application, []string{"One.", "Two."}) {
		t.Errorf("%+v", m)
	}
	if got := toolNames(m.Tools); !slices.Equal(got, []string{"f", "web_search", "bash", "mystery_2030"}) {
		t.Errorf("tools %q", got)
	}
	if string(m.Tools[0].Schema) != `{"type":"object"}` {
		t.Errorf("schema %s", m.Tools[0].Schema)
	}
	m, err = ParseMessages([]byte(`{"system":"Be kind.","messages":[]}`))
	if err != nil || !slices.Equal(m.Application, []string{"Be kind."}) {
		t.Errorf("%+v %v", m, err)
	}
	for _, bad := range []struct{ body, param string }{
		{`{"messages":{}}`, "messages"},
		{`{"messages":[1]}`, "messages[0]"},
		{`{"messages":[],"system":1}`, "system"},
		{`{"messages":[],"system":[{"type":"image"}]}`, "system[0]"},
		{`{"messages":[],"tools":{}}`, "tools"},
	} {
		_, err := ParseMessages([]byte(bad.body))
		wantPolicyError(t, err, "invalid_request", bad.param)
	}
}

func TestMessagesToolChoice(t *testing.T) {
	kept := []policy.Tool{{Name: "f"}, {Name: "web_search"}}
	for _, tc := range []string{`{"type":"auto"}`, `{"type":"none"}`, `{"type":"any"}`, `{"type":"tool","name":"f"}`, `{"type":"tool","name":"web_search"}`} {
		if err := MessagesToolChoice([]byte(`{"tool_choice":`+tc+`}`), kept); err != nil {
			t.Errorf("%s: %v", tc, err)
		}
	}
	err := MessagesToolChoice([]byte(`{"tool_choice":{"type":"tool","name":"g"}}`), kept)
	wantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
	err = MessagesToolChoice([]byte(`{"tool_choice":{"type":"any"}}`), nil)
	wantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
}

func TestRewriteMessages(t *testing.T) {
	p := Prompt{System: "=== SYSTEM CORE ===\nrules"}
	in := `{"model":"m", "system" : [{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"messages":[ {"role":"user","content":"u"} ],"z":1.50,"promptgate":{}}`
	out, err := RewriteMessages([]byte(in), p, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m", "system" : "=== SYSTEM CORE ===\nrules","messages":[ {"role":"user","content":"u"} ],"z":1.50}`; string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	p.ContextMessage = "=== RUNTIME CONTEXT ===\n{}"
	out, _ = RewriteMessages([]byte(`{"messages":[]}`), p, nil, false)
	if got := gjson.GetBytes(out, "system.#.text").Raw; got != `["=== SYSTEM CORE ===\nrules","=== RUNTIME CONTEXT ===\n{}"]` {
		t.Errorf("structured channel: %s", out)
	}
	in = `{"messages":[],"tools":[{"name":"f"},{"name":"gone"},{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"auto"}}`
	out, _ = RewriteMessages([]byte(in), Prompt{}, []policy.Tool{{Name: "f"}, {Name: "web_search"}}, true)
	if got := gjson.GetBytes(out, "tools").Raw; got != `[{"name":"f"},{"type":"web_search_20250305","name":"web_search"}]` {
		t.Errorf("tools %s", got)
	}
	out, _ = RewriteMessages([]byte(in), Prompt{}, nil, true)
	if gjson.GetBytes(out, "tools").Exists() || gjson.GetBytes(out, "tool_choice").Exists() {
		t.Errorf("empty tools kept: %s", out)
	}
}

package messages

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
)

// TestMessagesAnthropicToolNames: an Anthropic-defined tool may carry only the name Anthropic fixes
// for its type (or none, and is then governed by that name); its type and other names are aliases.
func TestMessagesAnthropicToolNames(t *testing.T) {
	for _, tc := range []struct {
		tool, name string
		aliases    []string
	}{
		{`{"type":"web_search_20250305","name":"web_search"}`, "web_search", []string{"web_search_20250305"}},
		{`{"type":"web_search_20250305"}`, "web_search", []string{"web_search_20250305"}},
		{`{"type":"text_editor_20250124","name":"str_replace_editor"}`, "str_replace_editor", []string{"text_editor_20250124"}},
		{`{"type":"text_editor_20250728"}`, "str_replace_based_edit_tool", []string{"text_editor_20250728"}},
		{`{"type":"text_editor_20990101","name":"str_replace_editor"}`, "str_replace_editor", []string{"str_replace_based_edit_tool", "text_editor_20990101"}},
		{`{"type":"tool_search_tool_bm25","name":"tool_search_tool_bm25"}`, "tool_search_tool_bm25", nil},
		{`{"type":"mystery_2030"}`, "mystery_2030", nil},
		{`{"type":"computer_20251124","name":"computer"}`, "computer", []string{"computer_20251124"}},
		{`{"type":"custom","name":"web_search_20250305"}`, "web_search_20250305", nil},
		{`{"name":"get_weather"}`, "get_weather", nil},
	} {
		m, err := parseMessages([]byte(`{"messages":[],"tools":[` + tc.tool + `]}`))
		if err != nil {
			t.Errorf("%s: %v", tc.tool, err)
			continue
		}
		if got := m.Tools[0]; got.Name != tc.name || !slices.Equal(got.Aliases, tc.aliases) {
			t.Errorf("%s: %q %q, want %q %q", tc.tool, got.Name, got.Aliases, tc.name, tc.aliases)
		}
	}
	for _, bad := range []string{
		`{"type":"web_search_20250305","name":"get_weather"}`,
		`{"type":"web_search_20250305","name":"Web_search"}`,
		`{"type":"web_search_20250305","name":"web_search "}`,
		`{"type":"web_search_20250305","name":null}`,
		`{"type":"web_search_20250305","name":["web_search"]}`,
		`{"type":"text_editor_20250728","name":"str_replace_editor"}`,
		`{"type":"bash_20250124","name":"str_replace_editor"}`,
		`{"type":"brand_new_20991231","name":"brand_new_tool"}`,
		`{"type":"web_search_2025030","name":"web_search"}`,
	} {
		_, err := parseMessages([]byte(`{"messages":[],"tools":[{"name":"f"},` + bad + `]}`))
		assemblytest.WantPolicyError(t, err, "invalid_request", "tools[1].name")
	}
}

func TestParseMessages(t *testing.T) {
	body := `{"model":"claude","stream":true,"system":[{"type":"text","text":"One."},{"type":"text","text":"Two.","cache_control":{"type":"ephemeral"}}],
	  "messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"},{"type":"text","text":"latest"}]}],
	  "tools":[{"name":"f","description":"F.","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"},{"type":"bash_20250124","name":"bash"},{"type":"mystery_2030"}]}`
	m, err := parseMessages([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if m.Model != "claude" || !m.Stream || m.LatestUser != "latest" || !m.NativeTools || !slices.Equal(m.Application, []string{"One.", "Two."}) {
		t.Errorf("%+v", m)
	}
	if got := assemblytest.ToolNames(m.Tools); !slices.Equal(got, []string{"f", "web_search", "bash", "mystery_2030"}) {
		t.Errorf("tools %q", got)
	}
	if string(m.Tools[0].Schema) != `{"type":"object"}` {
		t.Errorf("schema %s", m.Tools[0].Schema)
	}
	m, err = parseMessages([]byte(`{"system":"Be kind.","messages":[]}`))
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
		_, err := parseMessages([]byte(bad.body))
		assemblytest.WantPolicyError(t, err, "invalid_request", bad.param)
	}
}

func TestMessagesToolChoice(t *testing.T) {
	kept := []policy.Tool{{Name: "f"}, {Name: "web_search"}}
	for _, tc := range []string{`{"type":"auto"}`, `{"type":"none"}`, `{"type":"any"}`, `{"type":"tool","name":"f"}`, `{"type":"tool","name":"web_search"}`} {
		if err := messagesToolChoice([]byte(`{"tool_choice":`+tc+`}`), kept); err != nil {
			t.Errorf("%s: %v", tc, err)
		}
	}
	err := messagesToolChoice([]byte(`{"tool_choice":{"type":"tool","name":"g"}}`), kept)
	assemblytest.WantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
	err = messagesToolChoice([]byte(`{"tool_choice":{"type":"any"}}`), nil)
	assemblytest.WantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
}

func TestRewriteMessages(t *testing.T) {
	p := assembly.NewPrompt("=== SYSTEM CORE ===\nrules")
	in := `{"model":"m", "system" : [{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"messages":[ {"role":"user","content":"u"} ],"z":1.50,"promptgate":{}}`
	out, err := rewriteMessages([]byte(in), p, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m", "system" : "=== SYSTEM CORE ===\nrules","messages":[ {"role":"user","content":"u"} ],"z":1.50}`; string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	p.ContextMessage = "=== RUNTIME CONTEXT ===\n{}"
	out, _ = rewriteMessages([]byte(`{"messages":[]}`), p, nil, false)
	if got := gjson.GetBytes(out, "system.#.text").Raw; got != `["=== SYSTEM CORE ===\nrules","=== RUNTIME CONTEXT ===\n{}"]` {
		t.Errorf("structured channel: %s", out)
	}
	in = `{"messages":[],"tools":[{"name":"f"},{"name":"gone"},{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"auto"}}`
	out, _ = rewriteMessages([]byte(in), assembly.Prompt{}, []policy.Tool{{Name: "f"}, {Name: "web_search"}}, true)
	if got := gjson.GetBytes(out, "tools").Raw; got != `[{"name":"f"},{"type":"web_search_20250305","name":"web_search"}]` {
		t.Errorf("tools %s", got)
	}
	out, _ = rewriteMessages([]byte(in), assembly.Prompt{}, nil, true)
	if gjson.GetBytes(out, "tools").Exists() || gjson.GetBytes(out, "tool_choice").Exists() {
		t.Errorf("empty tools kept: %s", out)
	}
}

// TestMessagesMCPConnector: mcp_servers and every mcp_toolset entry are one tool, ToolMCP (an
// mcp_toolset is that whatever name it carries); mcp_servers leaves the body when ToolMCP is not
// kept.
func TestMessagesMCPConnector(t *testing.T) {
	body := `{"messages":[],"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"a"}],` +
		`"tools":[{"name":"f"},{"type":"mcp_toolset","mcp_server_name":"a"},{"type":"mcp_toolset","name":"f2","mcp_server_name":"a"}]}`
	m, err := parseMessages([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := assemblytest.ToolNames(m.Tools); !slices.Equal(got, []string{"f", ToolMCP}) {
		t.Errorf("tools %q", got)
	}
	m, err = parseMessages([]byte(`{"messages":[],"mcp_servers":[{"type":"url","url":"https://x","name":"a"}]}`))
	if err != nil || !slices.Equal(assemblytest.ToolNames(m.Tools), []string{ToolMCP}) {
		t.Errorf("mcp_servers alone: %v %+v", err, m)
	}
	m, err = parseMessages([]byte(`{"messages":[],"mcp_servers":[]}`))
	if err != nil || len(m.Tools) != 0 {
		t.Errorf("empty mcp_servers: %v %+v", err, m)
	}
	_, err = parseMessages([]byte(`{"messages":[],"mcp_servers":{"name":"a"}}`))
	assemblytest.WantPolicyError(t, err, "invalid_request", "mcp_servers")

	out, err := rewriteMessages([]byte(body), assembly.Prompt{}, []policy.Tool{{Name: "f"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(out, "mcp_servers").Exists() || gjson.GetBytes(out, "tools").Raw != `[{"name":"f"}]` {
		t.Errorf("mcp not kept: %s", out)
	}
	// Even a caller that reports no removal cannot let it through.
	if out, _ = rewriteMessages([]byte(body), assembly.Prompt{}, nil, false); gjson.GetBytes(out, "mcp_servers").Exists() {
		t.Errorf("no removal reported: %s", out)
	}
	out, _ = rewriteMessages([]byte(body), assembly.Prompt{}, []policy.Tool{{Name: "f"}, {Name: ToolMCP}}, false)
	if gjson.GetBytes(out, "mcp_servers").Raw != gjson.Get(body, "mcp_servers").Raw || gjson.GetBytes(out, "tools").Raw != gjson.Get(body, "tools").Raw {
		t.Errorf("mcp kept: %s", out)
	}
}

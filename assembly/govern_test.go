package assembly

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// TestChatWebSearchOptions: an object web_search_options is the tool ToolWebSearch (with web_search_preview as
// an alias), or is folded into a declared tool of that name; it leaves the body unless ToolWebSearch is kept.
func TestChatWebSearchOptions(t *testing.T) {
	msgs := `"model":"m","messages":[{"role":"user","content":"x"}]`
	c, err := ParseChat([]byte(`{` + msgs + `,"web_search_options":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools) != 1 || c.Tools[0].Name != ToolWebSearch || !slices.Contains(c.Tools[0].Aliases, "web_search_preview") || !c.Tools[0].UpstreamOnly || c.NativeTools {
		t.Errorf("tools %+v native %v", c.Tools, c.NativeTools)
	}
	c, err = ParseChat([]byte(`{` + msgs + `,"tools":[{"type":"function","function":{"name":"web_search"}},{"type":"function","function":{"name":"f"}}],"web_search_options":{"search_context_size":"high"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(c.Tools); !slices.Equal(got, []string{ToolWebSearch, "f"}) || !slices.Contains(c.Tools[0].Aliases, "web_search_preview") || c.Tools[0].UpstreamOnly {
		t.Errorf("tools %q %+v", got, c.Tools)
	}
	for _, body := range []string{`{` + msgs + `}`, `{` + msgs + `,"web_search_options":null}`} {
		if c, err := ParseChat([]byte(body)); err != nil || len(c.Tools) != 0 {
			t.Errorf("%s: %+v %v", body, c, err)
		}
	}
	for _, bad := range []string{`"on"`, `[]`, `false`, `0`} {
		_, err := ParseChat([]byte(`{` + msgs + `,"web_search_options":` + bad + `}`))
		wantPolicyError(t, err, "invalid_request", "web_search_options")
	}

	body := []byte(`{` + msgs + `,"web_search_options":{"search_context_size":"low"},"tools":[{"type":"function","function":{"name":"f"}}]}`)
	for _, tc := range []struct {
		name       string
		kept       []policy.Tool
		removedAny bool
		want       bool
	}{
		{"not kept", []policy.Tool{{Name: "f"}}, true, false},
		{"not kept, no removal reported", []policy.Tool{{Name: "f"}}, false, false},
		{"nothing kept", nil, true, false},
		{"kept", []policy.Tool{{Name: "f"}, {Name: ToolWebSearch}}, false, true},
		{"kept, f removed", []policy.Tool{{Name: ToolWebSearch}}, true, true},
	} {
		out, err := RewriteChat(body, Prompt{System: "s"}, tc.kept, tc.removedAny)
		if err != nil {
			t.Fatal(err)
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("%s: invalid JSON %s", tc.name, out)
		}
		if got := gjson.GetBytes(out, "web_search_options"); got.Exists() != tc.want || tc.want && got.Raw != `{"search_context_size":"low"}` {
			t.Errorf("%s: %s", tc.name, out)
		}
	}
}

// TestMessagesAnthropicToolNames: an Anthropic-defined tool may carry only the name Anthropic fixes for its type
// (or none, and is then governed by that name); its type and other names are aliases.
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
		m, err := ParseMessages([]byte(`{"messages":[],"tools":[` + tc.tool + `]}`))
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
		_, err := ParseMessages([]byte(`{"messages":[],"tools":[{"name":"f"},` + bad + `]}`))
		wantPolicyError(t, err, "invalid_request", "tools[1].name")
	}
}

// TestResponsesStoredPrompt: prompt names a stored prompt by a string id; null is none; other forms are refused.
func TestResponsesStoredPrompt(t *testing.T) {
	r, err := ParseResponses([]byte(`{"input":"x","prompt":{"id":"pmpt_1","version":"2","variables":{"a":"b"}}}`))
	if err != nil || r.StoredPrompt != "pmpt_1" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, body := range []string{`{"input":"x"}`, `{"input":"x","prompt":null}`} {
		if r, err := ParseResponses([]byte(body)); err != nil || r.StoredPrompt != "" {
			t.Errorf("%s: %+v %v", body, r, err)
		}
	}
	for _, bad := range []struct{ prompt, param string }{
		{`"pmpt_1"`, "prompt"}, {`[]`, "prompt"}, {`1`, "prompt"},
		{`{}`, "prompt.id"}, {`{"id":""}`, "prompt.id"}, {`{"id":1}`, "prompt.id"}, {`{"id":null}`, "prompt.id"},
	} {
		_, err := ParseResponses([]byte(`{"input":"x","prompt":` + bad.prompt + `}`))
		wantPolicyError(t, err, "invalid_request", bad.param)
	}
}

package responses

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
)

// TestResponsesStoredPrompt: prompt names a stored prompt by a string id; null is none; other forms
// are refused.
func TestResponsesStoredPrompt(t *testing.T) {
	r, err := parseResponses([]byte(`{"input":"x","prompt":{"id":"pmpt_1","version":"2","variables":{"a":"b"}}}`))
	if err != nil || r.StoredPrompt != "pmpt_1" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, body := range []string{`{"input":"x"}`, `{"input":"x","prompt":null}`} {
		if r, err := parseResponses([]byte(body)); err != nil || r.StoredPrompt != "" {
			t.Errorf("%s: %+v %v", body, r, err)
		}
	}
	for _, bad := range []struct{ prompt, param string }{
		{`"pmpt_1"`, "prompt"}, {`[]`, "prompt"}, {`1`, "prompt"},
		{`{}`, "prompt.id"}, {`{"id":""}`, "prompt.id"}, {`{"id":1}`, "prompt.id"}, {`{"id":null}`, "prompt.id"},
	} {
		_, err := parseResponses([]byte(`{"input":"x","prompt":` + bad.prompt + `}`))
		assemblytest.WantPolicyError(t, err, "invalid_request", bad.param)
	}
}

func TestParseResponses(t *testing.T) {
	body := `{"model":"gpt-4.1","stream":true,"instructions":"Be kind.","previous_response_id":"resp_1",
	  "input":[{"role":"developer","content":"Dev says."},{"role":"user","content":"first"},
	           {"type":"message","role":"system","content":[{"type":"input_text","text":"Sys says."}]},
	           {"type":"function_call_output","call_id":"c","output":"x"},
	           {"role":"user","content":[{"type":"input_text","text":"latest"}]}],
	  "tools":[{"type":"function","name":"f","description":"F.","parameters":{"type":"object"}},{"type":"custom","name":"c"},
	           {"type":"mcp","server_label":"a"},{"type":"web_search"},{"type":"mcp","server_label":"b"}]}`
	r, err := parseResponses([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "gpt-4.1" || !r.Stream || r.LatestUser != "latest" || !r.NativeTools {
		t.Errorf("%+v", r)
	}
	if !slices.Equal(r.Application, []string{"Be kind.", "Dev says.", "Sys says."}) {
		t.Errorf("application %q", r.Application)
	}
	if got := assemblytest.ToolNames(r.Tools); !slices.Equal(got, []string{"f", "c", "mcp", "web_search"}) {
		t.Errorf("tools %q", got)
	}
	if string(r.Tools[0].Schema) != `{"type":"object"}` || r.Tools[0].Description != "F." {
		t.Errorf("function tool %+v", r.Tools[0])
	}

	r, err = parseResponses([]byte(`{"model":"m","input":"just text"}`))
	if err != nil || r.LatestUser != "just text" || len(r.Application) != 0 || r.NativeTools {
		t.Errorf("%+v %v", r, err)
	}
	for _, bad := range []struct{ body, param string }{
		{`{"instructions":1}`, "instructions"},
		{`{"input":{}}`, "input"},
		{`{"input":["x"]}`, "input[0]"},
		{`{"tools":{}}`, "tools"},
	} {
		_, err := parseResponses([]byte(bad.body))
		assemblytest.WantPolicyError(t, err, "invalid_request", bad.param)
	}
}

func TestResponsesToolChoice(t *testing.T) {
	kept := []policy.Tool{{Name: "f"}, {Name: "web_search_preview"}, {Name: "mcp"}}
	ok := []string{`"auto"`, `"none"`, `"required"`, `{"type":"function","name":"f"}`, `{"type":"web_search_preview"}`,
		`{"type":"mcp","server_label":"deepwiki"}`, `{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"f"},{"type":"mcp","server_label":"x"}]}`}
	for _, tc := range ok {
		if err := responsesToolChoice([]byte(`{"tool_choice":`+tc+`}`), kept); err != nil {
			t.Errorf("%s: %v", tc, err)
		}
	}
	bad := []string{`{"type":"function","name":"g"}`, `{"type":"custom","name":"c"}`, `{"type":"file_search"}`,
		`{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}]}`}
	for _, tc := range bad {
		err := responsesToolChoice([]byte(`{"tool_choice":`+tc+`}`), kept)
		assemblytest.WantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
	}
	for _, tc := range []string{`"required"`, `{"type":"allowed_tools","mode":"required","tools":[]}`} {
		err := responsesToolChoice([]byte(`{"tool_choice":`+tc+`}`), nil)
		assemblytest.WantPolicyError(t, err, "tool_choice_not_allowed", "tool_choice")
	}
}

func TestRewriteResponses(t *testing.T) {
	p := assembly.NewPrompt("=== SYSTEM CORE ===\nrules")
	t.Run("keeps every other byte", func(t *testing.T) {
		in := `{"model":"m", "input" : [ {"role":"developer","content":"d"}, {"role":"user","content":"u", "x":1.50} ],"instructions":"old","previous_response_id":"resp_1","z":{"k":[1, 2]},"promptgate":{"user":"u"}}`
		out, err := rewriteResponses([]byte(in), p, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m", "input" : [{"role":"user","content":"u", "x":1.50}],"instructions":"=== SYSTEM CORE ===\nrules","previous_response_id":"resp_1","z":{"k":[1, 2]}}`
		if string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("string input and no instructions", func(t *testing.T) {
		out, err := rewriteResponses([]byte(`{"model":"m","input":"hi"}`), p, nil, false)
		if err != nil || string(out) != `{"model":"m","input":"hi","instructions":"=== SYSTEM CORE ===\nrules"}` {
			t.Errorf("%s %v", out, err)
		}
	})
	t.Run("input without system items is not rewritten", func(t *testing.T) {
		in := `{"input":[ {"role":"user","content":"u"} ]}`
		out, _ := rewriteResponses([]byte(in), p, nil, false)
		if !strings.Contains(string(out), `"input":[ {"role":"user","content":"u"} ]`) {
			t.Errorf("%s", out)
		}
	})
	t.Run("filters tools; built-in entries of a kept type all stay", func(t *testing.T) {
		in := `{"tools":[{"type":"function","name":"f"},{"type":"function","name":"gone"},{"type":"mcp","server_label":"a"},{"type":"function","name":"f","description":"dup"},{"type":"mcp","server_label":"b"},{"type":"file_search"}],"tool_choice":"auto"}`
		out, err := rewriteResponses([]byte(in), p, []policy.Tool{{Name: "f"}, {Name: "mcp"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := gjson.GetBytes(out, "tools").Raw; got != `[{"type":"function","name":"f"},{"type":"mcp","server_label":"a"},{"type":"mcp","server_label":"b"}]` {
			t.Errorf("tools %s", got)
		}
		if gjson.GetBytes(out, "tool_choice").String() != "auto" {
			t.Errorf("tool_choice lost: %s", out)
		}
		out, _ = rewriteResponses([]byte(in), p, nil, true)
		if gjson.GetBytes(out, "tools").Exists() || gjson.GetBytes(out, "tool_choice").Exists() {
			t.Errorf("empty tools kept: %s", out)
		}
	})
}

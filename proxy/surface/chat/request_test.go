package chat

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/surface"
)

func TestParseChat(t *testing.T) {
	body := `{"model":"gpt-4o","stream":true,"messages":[
		{"role":"system","content":"S1"},
		{"role":"user","content":"first"},
		{"role":"developer","content":[{"type":"text","text":"D1"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"D2"}]},
		{"role":"assistant","content":"ok"},
		{"role":"user","content":[{"type":"text","text":"last"},{"type":"text","text":"part"}]},
		{"role":"tool","content":"r"},
		{"role":"system","content":null}
	],
	"tools":[
		{"type":"function","function":{"name":"search","description":"Find.","parameters":{"type":"object"}}},
		{"type":"custom","custom":{"name":"grammar","description":"G."}},
		{"type":"web_search_preview"},
		{"function":{"name":"untyped","parameters":null}}
	],
	"functions":[{"name":"legacy","description":"L.","parameters":{"type":"object","properties":{}}}]}`
	c, err := parseChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := &surface.Request{
		Model:       "gpt-4o",
		Stream:      true,
		Application: []string{"S1", "D1\nD2", ""},
		Tools: []policy.Tool{
			{Name: "search", Description: "Find.", Schema: []byte(`{"type":"object"}`)},
			{Name: "grammar", Description: "G."},
			{Name: "web_search_preview"},
			{Name: "untyped"},
			{Name: "legacy", Description: "L.", Schema: []byte(`{"type":"object","properties":{}}`)},
		},
		NativeTools: true,
		LatestUser:  "last\npart",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}

	for _, tt := range []struct {
		name   string
		body   string
		native bool
		tools  int
	}{
		{"no tools", `{"messages":[]}`, false, 0},
		{"null tools", `{"messages":[],"tools":null,"functions":null}`, false, 0},
		{"empty tools", `{"messages":[],"tools":[],"functions":[]}`, false, 0},
		{"functions only", `{"messages":[],"functions":[{"name":"f"}]}`, true, 1},
		{"tools only", `{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, true, 1},
	} {
		c, err := parseChat([]byte(tt.body))
		if err != nil || c.NativeTools != tt.native || len(c.Tools) != tt.tools {
			t.Errorf("%s: NativeTools %v, %d tools, %v; want %v, %d", tt.name, c != nil && c.NativeTools, len(c.Tools), err, tt.native, tt.tools)
		}
	}

	for _, tt := range []struct{ name, body, param string }{
		{"messages absent", `{"model":"m"}`, "messages"},
		{"messages object", `{"messages":{"role":"user"}}`, "messages"},
		{"messages string", `{"messages":"hi"}`, "messages"},
		{"element string", `{"messages":[{"role":"user","content":"a"},"hi"]}`, "messages[1]"},
		{"element null", `{"messages":[null]}`, "messages[0]"},
		{"element array", `{"messages":[{"role":"user"},{"role":"user"},[]]}`, "messages[2]"},
		{"tools object", `{"messages":[],"tools":{}}`, "tools"},
		{"functions string", `{"messages":[],"functions":"f"}`, "functions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseChat([]byte(tt.body))
			if c != nil {
				t.Errorf("Chat = %+v, want nil", c)
			}
			assemblytest.WantPolicyError(t, err, "invalid_request", tt.param)
		})
	}
}

func TestChatToolChoice(t *testing.T) {
	kept := []policy.Tool{{Name: "search"}, {Name: "grammar"}, {Name: "legacy"}}
	tests := []struct {
		name  string
		body  string
		kept  []policy.Tool
		param string // "" for no error
	}{
		{"absent", `{}`, nil, ""},
		{"none, nothing kept", `{"tool_choice":"none"}`, nil, ""},
		{"auto, nothing kept", `{"tool_choice":"auto"}`, nil, ""},
		{"required, nothing kept", `{"tool_choice":"required"}`, nil, "tool_choice"},
		{"required, kept", `{"tool_choice":"required"}`, kept, ""},
		{"null", `{"tool_choice":null}`, nil, ""},
		{"function kept", `{"tool_choice":{"type":"function","function":{"name":"search"}}}`, kept, ""},
		{"function not kept", `{"tool_choice":{"type":"function","function":{"name":"shell"}}}`, kept, "tool_choice"},
		{"function, nothing kept", `{"tool_choice":{"type":"function","function":{"name":"search"}}}`, nil, "tool_choice"},
		{"function name case", `{"tool_choice":{"type":"function","function":{"name":"Search"}}}`, kept, "tool_choice"},
		{"custom kept", `{"tool_choice":{"type":"custom","custom":{"name":"grammar"}}}`, kept, ""},
		{"custom not kept", `{"tool_choice":{"type":"custom","custom":{"name":"regex"}}}`, kept, "tool_choice"},
		{"built-in type not kept", `{"tool_choice":{"type":"web_search_preview"}}`, kept, "tool_choice"},
		{"allowed_tools auto, all kept", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[
			{"type":"function","function":{"name":"search"}},{"type":"custom","custom":{"name":"grammar"}}]}}}`, kept, ""},
		{"allowed_tools required, all kept", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[
			{"type":"function","function":{"name":"search"}}]}}}`, kept, ""},
		{"allowed_tools names a removed tool", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[
			{"type":"function","function":{"name":"search"}},{"type":"function","function":{"name":"shell"}}]}}}`, kept, "tool_choice"},
		{"allowed_tools required, nothing kept", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[]}}}`, nil, "tool_choice"},
		{"allowed_tools auto, nothing kept, no names", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`, nil, ""},
		{"function_call kept", `{"function_call":{"name":"legacy"}}`, kept, ""},
		{"function_call not kept", `{"function_call":{"name":"shell"}}`, kept, "function_call"},
		{"function_call none", `{"function_call":"none"}`, nil, ""},
		{"function_call auto", `{"function_call":"auto"}`, nil, ""},
		{"tool_choice checked before function_call", `{"tool_choice":{"type":"function","function":{"name":"x"}},"function_call":{"name":"y"}}`, kept, "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := chatToolChoice([]byte(tt.body), tt.kept)
			if tt.param == "" {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			assemblytest.WantPolicyError(t, err, "tool_choice_not_allowed", tt.param)
		})
	}
	// The message names the tool.
	err := chatToolChoice([]byte(`{"tool_choice":{"type":"function","function":{"name":"shell"}}}`), kept)
	if err == nil || !strings.Contains(err.Error(), `"shell"`) {
		t.Errorf("error %v does not name the tool", err)
	}
}

func TestRewriteChatKeepsOtherBytes(t *testing.T) {
	p := assembly.NewPrompt("SYS <&> \"q\"\n=== X ===")
	p.ContextMessage = assembly.ContextHeader + "\n{\"meta\":{}}"
	out, err := rewriteChat([]byte(oddBody), p, []policy.Tool{{Name: "search"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %s", out)
	}
	wantMessages := `[{"role":"system","content":"SYS <&> \"q\"\n=== X ==="},` +
		`{"role":"system","content":"` + assembly.ContextHeader + `\n{\"meta\":{}}"},` +
		"{\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"}," +
		"{\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]}," +
		"{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}]"
	if got := gjson.GetBytes(out, "messages").Raw; got != wantMessages {
		t.Errorf("messages:\n got %s\nwant %s", got, wantMessages)
	}
	// The whole body: the promptgate field (from the comma before it to the end of its value) and
	// the messages value are the only changes.
	ext := gjson.Get(oddBody, "promptgate")
	start := strings.LastIndexByte(oddBody[:strings.Index(oddBody, "\"promptgate\"")], ',')
	want := oddBody[:start] + oddBody[ext.Index+len(ext.Raw):]
	msgs := gjson.Get(oddBody, "messages").Raw
	want = strings.Replace(want, msgs, wantMessages, 1)
	if string(out) != want {
		t.Errorf("body:\n got %s\nwant %s", out, want)
	}
	for _, k := range []string{"temperature", "seed", "metadata", "tools", "x_unknown", "model"} {
		if got, want := gjson.GetBytes(out, k).Raw, gjson.Get(oddBody, k).Raw; got != want {
			t.Errorf("%s: %s, want %s", k, got, want)
		}
	}
	var keys []string
	gjson.ParseBytes(out).ForEach(func(k, _ gjson.Result) bool { keys = append(keys, k.String()); return true })
	if want := []string{"temperature", "seed", "metadata", "messages", "tools", "x_unknown", "model"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

func TestRewriteChatRemovesExtension(t *testing.T) {
	p := assembly.NewPrompt("S")
	for _, tt := range []struct{ name, in, want string }{
		{"first", `{"promptgate":{"user":"u"},"model":"m","messages":[]}`, `{"model":"m","messages":[{"role":"system","content":"S"}]}`},
		{"last", `{"model":"m","messages":[],"promptgate":{"user":"u"}}`, `{"model":"m","messages":[{"role":"system","content":"S"}]}`},
		{"middle", `{"model":"m", "promptgate" : {} , "messages":[]}`, `{"model":"m" , "messages":[{"role":"system","content":"S"}]}`},
		{"escaped key", `{"promptg\u0061te":{"user":"u"},"messages":[]}`, `{"messages":[{"role":"system","content":"S"}]}`},
		{"absent", `{"messages":[ ]}`, `{"messages":[{"role":"system","content":"S"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := rewriteChat([]byte(tt.in), p, nil, false)
			if err != nil || string(out) != tt.want {
				t.Errorf("got %s, %v\nwant %s", out, err, tt.want)
			}
		})
	}
}

func TestRewriteChatFiltersTools(t *testing.T) {
	const tools = `[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}},` +
		` {"type":"function","function":{"name":"shell"}},` +
		`{"type":"function","function":{"name":"search","description":"dup"}},` +
		`{"type":"custom","custom":{"name":"grammar"}},{"type":"web_search_preview"}]`
	const functions = `[{"name":"legacy"},{"name":"shell"},{"name":"legacy","description":"dup"}]`
	body := `{"model":"m","messages":[{"role":"user","content":"u"}],"tools":` + tools +
		`,"tool_choice":"auto","parallel_tool_calls":false,"functions":` + functions + `,"function_call":"auto","n":1}`
	p := assembly.NewPrompt("S")

	t.Run("some kept", func(t *testing.T) {
		kept := []policy.Tool{{Name: "search"}, {Name: "grammar"}, {Name: "web_search_preview"}, {Name: "legacy"}}
		out, err := rewriteChat([]byte(body), p, kept, true)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],` +
			`"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}},{"type":"custom","custom":{"name":"grammar"}},{"type":"web_search_preview"}]` +
			`,"tool_choice":"auto","parallel_tool_calls":false,"functions":[{"name":"legacy"}],"function_call":"auto","n":1}`
		if string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("none kept", func(t *testing.T) {
		out, err := rewriteChat([]byte(body), p, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],"n":1}`; string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("only functions kept", func(t *testing.T) {
		out, err := rewriteChat([]byte(body), p, []policy.Tool{{Name: "legacy"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],"functions":[{"name":"legacy"}],"function_call":"auto","n":1}`
		if string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("only tools kept", func(t *testing.T) {
		out, err := rewriteChat([]byte(body), p, []policy.Tool{{Name: "shell"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],` +
			`"tools":[{"type":"function","function":{"name":"shell"}}],"tool_choice":"auto","parallel_tool_calls":false,"n":1}`
		if string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("removedAny false leaves the bytes", func(t *testing.T) {
		out, err := rewriteChat([]byte(body), p, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"} {
			if got, want := gjson.GetBytes(out, k).Raw, gjson.Get(body, k).Raw; got != want {
				t.Errorf("%s: %s, want %s", k, got, want)
			}
		}
	})
}

// oddBody has odd spacing, unicode escapes, unusual key order and numbers that a re-encoder would
// change.
const oddBody = "{ \"temperature\" : 1.0e+2 ,\n\t\"promptgate\" : {\"user\":\"u-1\", \"context\":{\"a\":1}},\n" +
	"  \"seed\":-0, \"metadata\" : {\"note\":\"caf\\u00e9 <b>&amp;</b>\", \"z\":1, \"a\":2},\n" +
	"  \"messages\" : [ {\"role\":\"system\",\"content\":\"S\"} ,\n" +
	"    {\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"},\n" +
	"    {\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"D\"}]},\n" +
	"    {\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]},\n" +
	"    {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"} ],\n" +
	"  \"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"search\"}} ],\n" +
	"  \"x_unknown\" : [ 1E400 , \"\\/\" ] , \"model\":\"gpt-4o\" }"

// TestChatWebSearchOptions: an object web_search_options is the tool ToolWebSearch (with
// web_search_preview as an alias), or is folded into a declared tool of that name; it leaves the
// body unless ToolWebSearch is kept.
func TestChatWebSearchOptions(t *testing.T) {
	msgs := `"model":"m","messages":[{"role":"user","content":"x"}]`
	c, err := parseChat([]byte(`{` + msgs + `,"web_search_options":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools) != 1 || c.Tools[0].Name != ToolWebSearch || !slices.Contains(c.Tools[0].Aliases, "web_search_preview") || !c.Tools[0].UpstreamOnly || c.NativeTools {
		t.Errorf("tools %+v native %v", c.Tools, c.NativeTools)
	}
	c, err = parseChat([]byte(`{` + msgs + `,"tools":[{"type":"function","function":{"name":"web_search"}},{"type":"function","function":{"name":"f"}}],"web_search_options":{"search_context_size":"high"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := assemblytest.ToolNames(c.Tools); !slices.Equal(got, []string{ToolWebSearch, "f"}) || !slices.Contains(c.Tools[0].Aliases, "web_search_preview") || c.Tools[0].UpstreamOnly {
		t.Errorf("tools %q %+v", got, c.Tools)
	}
	for _, body := range []string{`{` + msgs + `}`, `{` + msgs + `,"web_search_options":null}`} {
		if c, err := parseChat([]byte(body)); err != nil || len(c.Tools) != 0 {
			t.Errorf("%s: %+v %v", body, c, err)
		}
	}
	for _, bad := range []string{`"on"`, `[]`, `false`, `0`} {
		_, err := parseChat([]byte(`{` + msgs + `,"web_search_options":` + bad + `}`))
		assemblytest.WantPolicyError(t, err, "invalid_request", "web_search_options")
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
		out, err := rewriteChat(body, assembly.NewPrompt("s"), tc.kept, tc.removedAny)
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

func TestBuildDatamarkRule(t *testing.T) {
	tmpl := assembly.ParseTemplate("t", 1, assemblytest.LayeredText)
	off := assembly.Build(tmpl, assembly.Layers{Rules: "- r"}, assembly.DefaultSettings())
	s := assembly.DefaultSettings()
	s.DatamarkToolOutput = true
	on := assembly.Build(tmpl, assembly.Layers{Rules: "- r"}, s)
	if strings.Contains(off.System(), assembly.DatamarkMarker) || off.DatamarkToolOutput {
		t.Errorf("datamarking off, yet the rule is in the prompt: %q", off.System())
	}
	if !on.DatamarkToolOutput || !strings.Contains(on.System(), "- r\n"+assembly.DatamarkRule) {
		t.Errorf("datamarking on, the rule does not follow the protocol rules: %q", on.System())
	}
	// A protocol without rules gets the block for the rule alone; without datamarking it has none.
	noRules := assembly.Build(tmpl, assembly.Layers{}, s)
	if !strings.Contains(noRules.System(), "=== PROTOCOL RULES ==="+"\n"+assembly.DatamarkRule) {
		t.Errorf("no rules + datamarking: %q", noRules.System())
	}
	if empty := assembly.Build(tmpl, assembly.Layers{}, assembly.DefaultSettings()); strings.Contains(empty.System(), "=== PROTOCOL RULES ===") {
		t.Error("an empty rules block was rendered")
	}
	// The rewrite marks tool output only when the prompt says so.
	body := []byte(`{"messages":[{"role":"user","content":"a b"},{"role":"tool","content":"x y"}]}`)
	for _, p := range []assembly.Prompt{off, on} {
		out, err := rewriteChat(body, p, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		want := "x y"
		if p.DatamarkToolOutput {
			want = "xˆy"
		}
		if got := gjson.GetBytes(out, "messages.2.content").String(); got != want {
			t.Errorf("datamark=%v: tool content %q, want %q", p.DatamarkToolOutput, got, want)
		}
	}
}

package assembly

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// wantPolicyError checks that err is a *policy.Error with the code and param.
func wantPolicyError(t *testing.T, err error, code, param string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *policy.Error", err, err)
	}
	if pe.Code != code || pe.Param != param {
		t.Errorf("error = {%s %q} %q, want {%s %q}", pe.Code, pe.Param, pe.Message, code, param)
	}
}

func TestParseExtension(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"model":"m","messages":[]}`))
		if err != nil || !reflect.DeepEqual(x, Extension{}) {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("all fields", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"model":"m","promptgate": {"protocol":"tech", "workflow":"code_review","user":"u-\u0031",
			"conversation":"c-9","context": {"attachments" : [1, 2], "memory":{}}}}`))
		want := Extension{Protocol: "tech", Workflow: "code_review", User: "u-1", Conversation: "c-9",
			Context: []byte(`{"attachments" : [1, 2], "memory":{}}`)}
		if err != nil || !reflect.DeepEqual(x, want) {
			t.Errorf("got %+v, %v\nwant %+v", x, err, want)
		}
	})
	t.Run("context null", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{"user":"u","context":null}}`))
		if err != nil || x.Context != nil || x.User != "u" {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("context of any JSON type is data", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{"context":"just text"}}`))
		if err != nil || string(x.Context) != `"just text"` {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("empty object", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{}}`))
		if err != nil || !reflect.DeepEqual(x, Extension{}) {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	bad := []struct {
		name, body, param string
	}{
		{"protocol number", `{"promptgate":{"protocol":1}}`, "promptgate.protocol"},
		{"workflow bool", `{"promptgate":{"workflow":true}}`, "promptgate.workflow"},
		{"user null", `{"promptgate":{"user":null}}`, "promptgate.user"},
		{"conversation object", `{"promptgate":{"conversation":{}}}`, "promptgate.conversation"},
		{"protocol array", `{"promptgate":{"protocol":["tech"]}}`, "promptgate.protocol"},
		{"unknown key", `{"promptgate":{"protocol":"tech","protocl":"x"}}`, "promptgate.protocl"},
		{"first problem wins", `{"promptgate":{"user":1,"zzz":2}}`, "promptgate.user"},
		{"string", `{"promptgate":"tech"}`, "promptgate"},
		{"array", `{"promptgate":[]}`, "promptgate"},
		{"null", `{"promptgate":null}`, "promptgate"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseExtension([]byte(tt.body))
			wantPolicyError(t, err, "invalid_request", tt.param)
		})
	}
}

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
	c, err := ParseChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := &Chat{
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
		c, err := ParseChat([]byte(tt.body))
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
			c, err := ParseChat([]byte(tt.body))
			if c != nil {
				t.Errorf("Chat = %+v, want nil", c)
			}
			wantPolicyError(t, err, "invalid_request", tt.param)
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
			err := ChatToolChoice([]byte(tt.body), tt.kept)
			if tt.param == "" {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			wantPolicyError(t, err, "tool_choice_not_allowed", tt.param)
		})
	}
	// The message names the tool.
	err := ChatToolChoice([]byte(`{"tool_choice":{"type":"function","function":{"name":"shell"}}}`), kept)
	if err == nil || !strings.Contains(err.Error(), `"shell"`) {
		t.Errorf("error %v does not name the tool", err)
	}
}

// oddBody has odd spacing, unicode escapes, unusual key order and numbers that a re-encoder would change.
const oddBody = "{ \"temperature\" : 1.0e+2 ,\n\t\"promptgate\" : {\"user\":\"u-1\", \"context\":{\"a\":1}},\n" +
	"  \"seed\":-0, \"metadata\" : {\"note\":\"caf\\u00e9 <b>&amp;</b>\", \"z\":1, \"a\":2},\n" +
	"  \"messages\" : [ {\"role\":\"system\",\"content\":\"S\"} ,\n" +
	"    {\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"},\n" +
	"    {\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"D\"}]},\n" +
	"    {\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]},\n" +
	"    {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"} ],\n" +
	"  \"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"search\"}} ],\n" +
	"  \"x_unknown\" : [ 1E400 , \"\\/\" ] , \"model\":\"gpt-4o\" }"

func TestRewriteChatKeepsOtherBytes(t *testing.T) {
	p := Prompt{System: "SYS <&> \"q\"\n=== X ===", ContextMessage: ContextHeader + "\n{\"meta\":{}}"}
	out, err := RewriteChat([]byte(oddBody), p, []policy.Tool{{Name: "search"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %s", out)
	}
	wantMessages := `[{"role":"system","content":"SYS <&> \"q\"\n=== X ==="},` +
		`{"role":"system","content":"` + ContextHeader + `\n{\"meta\":{}}"},` +
		"{\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"}," +
		"{\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]}," +
		"{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}]"
	if got := gjson.GetBytes(out, "messages").Raw; got != wantMessages {
		t.Errorf("messages:\n got %s\nwant %s", got, wantMessages)
	}
	// The whole body: the promptgate field (from the comma before it to the end of its value) and the
	// messages value are the only changes.
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
	p := Prompt{System: "S"}
	for _, tt := range []struct{ name, in, want string }{
		{"first", `{"promptgate":{"user":"u"},"model":"m","messages":[]}`, `{"model":"m","messages":[{"role":"system","content":"S"}]}`},
		{"last", `{"model":"m","messages":[],"promptgate":{"user":"u"}}`, `{"model":"m","messages":[{"role":"system","content":"S"}]}`},
		{"middle", `{"model":"m", "promptgate" : {} , "messages":[]}`, `{"model":"m" , "messages":[{"role":"system","content":"S"}]}`},
		{"escaped key", `{"promptg\u0061te":{"user":"u"},"messages":[]}`, `{"messages":[{"role":"system","content":"S"}]}`},
		{"absent", `{"messages":[ ]}`, `{"messages":[{"role":"system","content":"S"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := RewriteChat([]byte(tt.in), p, nil, false)
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
	p := Prompt{System: "S"}

	t.Run("some kept", func(t *testing.T) {
		kept := []policy.Tool{{Name: "search"}, {Name: "grammar"}, {Name: "web_search_preview"}, {Name: "legacy"}}
		out, err := RewriteChat([]byte(body), p, kept, true)
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
		out, err := RewriteChat([]byte(body), p, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],"n":1}`; string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("only functions kept", func(t *testing.T) {
		out, err := RewriteChat([]byte(body), p, []policy.Tool{{Name: "legacy"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],"functions":[{"name":"legacy"}],"function_call":"auto","n":1}`
		if string(out) != want {
			t.Errorf("got  %s\nwant %s", out, want)
		}
	})
	t.Run("only tools kept", func(t *testing.T) {
		out, err := RewriteChat([]byte(body), p, []policy.Tool{{Name: "shell"}}, true)
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
		out, err := RewriteChat([]byte(body), p, nil, false)
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

func TestJSONString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", `""`},
		{`<a href="x">&amp;</a>`, `"<a href=\"x\">&amp;</a>"`},
		{"line\nbreak\ttab\\ \u2028\u2029", `"line\nbreak\ttab\\ \u2028\u2029"`},
		{"é 漢 😀", `"é 漢 😀"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"bad \xff utf8", `"bad \ufffd utf8"`},
	} {
		if got := string(JSONString(tt.in)); got != tt.want {
			t.Errorf("JSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

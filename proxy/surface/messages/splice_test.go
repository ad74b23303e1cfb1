package messages

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
)

// sameAsEdits is assemblytest.SameAsReference of this surface's rewrite, against the edit-by-edit
// reference.
func sameAsEdits(t *testing.T, body []byte, p assembly.Prompt, kept []policy.Tool, removed bool) []byte {
	t.Helper()
	return assemblytest.SameAsReference(t, rewrite, rewriteEdits, body, p, kept, removed)
}

// rewriteEdits is the rewrite made edit by edit with sjson, each edit copying the body, as it was
// before the one executor: the reference the executor's documents must equal.
func rewriteEdits(body []byte, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	var sys []byte
	if p.ContextMessage == "" {
		sys = p.AppendSystemJSON(make([]byte, 0, p.SystemJSONSize()))
	} else {
		var b bytes.Buffer
		b.WriteString(`[{"type":"text","text":`)
		b.Write(p.AppendSystemJSON(b.AvailableBuffer()))
		b.WriteString(`},{"type":"text","text":`)
		b.Write(assembly.JSONString(p.ContextMessage))
		b.WriteString(`}]`)
		sys = b.Bytes()
	}
	out, err := sjson.SetRawBytes(body, reqSystem, sys)
	if err != nil {
		return nil, fmt.Errorf("assembly: set system: %w", err)
	}
	if removedAny {
		if out, err = assemblytest.FilterTools(out, reqTools, kept, toolName, reqToolChoice); err != nil {
			return nil, err
		}
	}
	// The MCP connector reaches the upstream only where ToolMCP is kept (checked whether or not a
	// removal was reported: it must never pass by default).
	if srv := assembly.Get(out, reqMCPServers); srv.IsArray() && len(srv.Array()) > 0 && !assembly.NameSet(kept)[ToolMCP] {
		if out, err = sjson.DeleteBytes(out, reqMCPServers); err != nil {
			return nil, fmt.Errorf("assembly: remove mcp_servers: %w", err)
		}
	}
	if p.DatamarkToolOutput {
		if out, err = datamark(out); err != nil {
			return nil, err
		}
	}
	return assemblytest.RemoveExtension(out)
}

// spliceSeeds are bodies for the splice: system absent or not, promptgate first, in the middle,
// last, with mcp_servers and tools, whitespace and escapes around keys, the body wrapped in
// whitespace.
var spliceSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"u"}}`,
	`{"promptgate":{"context":{"a":"}\""}},"system":"s","messages":[]}`,
	`{"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"promptgate":{},"messages":[],"tools":[{"name":"f"},{"name":"g"}]}`,
	`{"messages":[],"tools":[{"name":"f"},{"name":"g"},{"name":"f"}],"tool_choice":{"type":"auto"},"promptgate":{}}`,
	`{"messages":[],"mcp_servers":[{"type":"url","url":"https://x","name":"a"}],"tools":[{"name":"f"},{"type":"mcp_toolset","mcp_server_name":"a"}],"promptgate":{"user":"u"}}`,
	`{"mcp_servers":[{"name":"a"}],"promptgate":{},"messages":[],"system":"s"}`,
	`{"messages":[],"mcp_servers":[{"name":"a"}],"promptgate":{}}`,
	`{"messages":[],"mcp_servers":[],"tools":[{"type":"mcp_toolset","mcp_server_name":"a"},{"name":"f"}]}`,
	"{ \"syst\\u0065m\" :\t\"s\" ,\n \"promptg\\u0061te\"\t:\t{\"context\":{\"a\":\"\\\"}\"}} , \"a\\\"b\":1,\"messages\":[ ] }",
	" {\"messages\":[],\"promptgate\":{}} \n",
	`{"messages":[],"tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f"}],"promptgate":{} ,"z":[1,2]}`,
	`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"a b"}]}],"system":"x","promptgate":{}}`,
}

// TestRewriteSplicedFallbacks: the splice answers in the common case and leaves to the edit-by-edit
// rewrite each case it does not make (datamarking, the tools filtered to nothing, edits that
// overlap, a member sjson would append other than before the closing brace), and rewrite's bytes
// are the edits' every time.
func TestRewriteShapes(t *testing.T) {
	t.Parallel()
	f, g := policy.Tool{Name: "f"}, policy.Tool{Name: "g"}
	structured := assembly.NewPrompt("=== SYSTEM CORE ===\n\"x\"")
	structured.ContextMessage = "ctx"
	marked := assembly.NewPrompt("core")
	marked.DatamarkToolOutput = true
	for _, c := range []struct {
		name    string
		body    string
		p       assembly.Prompt
		kept    []policy.Tool
		removed bool
	}{
		{"system set, promptgate first", `{"promptgate":{"user":"u"},"system":"s","messages":[]}`, assembly.Prompt{}, nil, false},
		{"system set, promptgate in the middle", `{"system":"s","promptgate":{},"messages":[]}`, structured, nil, false},
		{"system set, promptgate last", `{"system":"s" , "messages":[] ,"promptgate" : {} }`, structured, nil, false},
		{"system appended", `{"messages":[],"promptgate":{}}`, structured, nil, false},
		{"tools filtered", `{"system":"s","messages":[],"tools":[{"name":"f"},{"name":"g"}],"tool_choice":{"type":"auto"}}`, assembly.Prompt{}, []policy.Tool{g}, true},
		{"mcp_servers cut", `{"messages":[],"mcp_servers":[{"name":"a"}],"system":"s"}`, assembly.Prompt{}, []policy.Tool{f}, false},
		{"mcp_servers kept", `{"messages":[],"mcp_servers":[{"name":"a"}],"system":"s"}`, assembly.Prompt{}, []policy.Tool{{Name: ToolMCP}}, false},

		{"datamarking", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"a b"}]}],"system":"s"}`, marked, nil, false},
		{"tools filtered to nothing", `{"system":"s","messages":[],"tools":[{"name":"f"}],"tool_choice":{"type":"any"},"promptgate":{}}`, assembly.Prompt{}, nil, true},
		{"cuts that overlap", `{"mcp_servers":[{"name":"a"}],"promptgate":{},"messages":[],"system":"s"}`, assembly.Prompt{}, nil, false},
		{"system appended after whitespace", " {\"messages\":[],\"promptgate\":{}}\n", assembly.Prompt{}, nil, false},
		{"system appended to an empty object", `{ }`, assembly.Prompt{}, nil, false},
		{"system appended, promptgate the only member", `{"promptgate":{"user":"u"} }`, assembly.Prompt{}, nil, false},
	} {
		out := sameAsEdits(t, []byte(c.body), c.p, c.kept, c.removed)
		if gjson.GetBytes(out, assembly.PathExtension).Exists() || !gjson.ValidBytes(out) || c.p.DatamarkToolOutput != bytes.Contains(out, []byte("aˆb")) {
			t.Errorf("%s: %s", c.name, out)
		}
	}
}

// TestRewriteSpliceSameBytes checks that rewrite gives the very bytes of the edit-by-edit rewrite,
// whatever the members' order, the whitespace around them, which tools go, and the channel.
func TestRewriteSameAsReference(t *testing.T) {
	t.Parallel()
	members := map[string]string{
		"model":       `"claude"`,
		"system":      `[{"type":"text","text":"be kind","cache_control":{"type":"ephemeral"}}]`,
		"messages":    `[{"role":"user","content":"hi"} , {"role":"assistant","content":"yo"}]`,
		"tools":       `[{"name":"a"},{"type":"mcp_toolset","mcp_server_name":"s"},{"name":"b"},{"name":"a"}]`,
		"mcp_servers": `[{"type":"url","url":"https://x","name":"s"}]`,
		"promptgate":  `{"user":"u","context":{"k":"v"}}`,
		"tool_choice": `{"type":"auto"}`,
	}
	orders := [][]string{
		{"model", "system", "messages", "tools", "mcp_servers", "promptgate", "tool_choice"},
		{"promptgate", "messages", "tools", "system"},
		{"messages", "promptgate"},
		{"promptgate", "messages"},
		{"tools", "promptgate", "mcp_servers", "messages"},
		{"mcp_servers", "promptgate", "messages", "system"},
		{"messages", "mcp_servers", "promptgate"},
		{"system", "messages", "mcp_servers"},
		{"messages", "model"},
	}
	seps := []struct{ open, sep, colon, close string }{
		{"{", ",", ":", "}"},
		{"{ ", " , ", " : ", " }"},
		{"{\n  ", ",\n  ", ": ", "\n}"},
		{"\t{\t", "\t,\r\n", "\t:\t", "\t}\t"},
	}
	keptSets := [][]policy.Tool{nil, {{Name: "a"}}, {{Name: "b"}}, {{Name: "a"}, {Name: ToolMCP}}, {{Name: ToolMCP}}, {{Name: "a"}, {Name: "b"}, {Name: ToolMCP}}}
	structured := assembly.NewPrompt("core")
	structured.ContextMessage = "{\"ctx\":1}"
	prompts := []assembly.Prompt{assembly.NewPrompt("=== SYSTEM CORE ===\n<b>&\"x\"\u2028"), structured}
	n := 0
	for _, order := range orders {
		for _, s := range seps {
			var b strings.Builder
			b.WriteString(s.open)
			for i, k := range order {
				if i > 0 {
					b.WriteString(s.sep)
				}
				b.WriteString(`"` + k + `"` + s.colon + members[k])
			}
			b.WriteString(s.close)
			for _, kept := range keptSets {
				for _, removed := range []bool{false, true} {
					for _, p := range prompts {
						sameAsEdits(t, []byte(b.String()), p, kept, removed)
						n++
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

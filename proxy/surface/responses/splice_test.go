package responses

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
	// The layered prompt is escaped from its pieces straight into the value (no joined copy of it).
	out, err := sjson.SetRawBytes(body, reqInstructions, p.AppendSystemJSON(make([]byte, 0, p.SystemJSONSize())))
	if err != nil {
		return nil, fmt.Errorf("assembly: set instructions: %w", err)
	}
	if in := assembly.Get(out, reqInput); in.IsArray() {
		var items bytes.Buffer
		items.Grow(len(in.Raw))
		items.WriteByte('[')
		n, dropped := 0, false
		in.ForEach(func(_, item gjson.Result) bool {
			switch item.Get("role").String() {
			case "system", "developer":
				dropped = true
				return true
			}
			if n > 0 {
				items.WriteByte(',')
			}
			items.WriteString(item.Raw)
			n++
			return true
		})
		items.WriteByte(']')
		if dropped {
			if out, err = sjson.SetRawBytes(out, reqInput, items.Bytes()); err != nil {
				return nil, fmt.Errorf("assembly: set input: %w", err)
			}
		}
	}
	if removedAny {
		if out, err = assemblytest.FilterTools(out, reqTools, kept, toolName, reqToolChoice); err != nil {
			return nil, err
		}
	}
	if p.DatamarkToolOutput {
		if out, err = datamark(out); err != nil {
			return nil, err
		}
	}
	return assemblytest.RemoveExtension(out)
}

// spliceSeeds are bodies for the splice: instructions absent or not, promptgate first, in the
// middle, last, alone, system and developer input items, a string input, tools, whitespace and
// escapes around keys, the body wrapped in whitespace.
var spliceSeeds = []string{
	`{"model":"m","input":[{"role":"user","content":"hi"}],"promptgate":{"user":"u"}}`,
	`{"promptgate":{"context":{"a":"}\""}},"instructions":"i","input":"hi"}`,
	`{"instructions":"i","promptgate":{},"input":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"developer","content":[{"type":"input_text","text":"d"}]}],"tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}]}`,
	`{"input":[{"role":"developer","content":"d"}],"tools":[{"type":"function","name":"f"},{"type":"mcp","server_label":"a"},{"type":"mcp","server_label":"b"},{"type":"function","name":"f"}],"tool_choice":"auto","promptgate":{}}`,
	`{"promptgate":{"user":"u"}}`,
	`{}`,
	`{"input":"hi","instructions":null,"tools":[{"type":"web_search"}],"tool_choice":"required"}`,
	"{ \"instructi\\u006fns\" :\t\"i\" ,\n \"promptg\\u0061te\"\t:\t{\"context\":{\"a\":\"\\\"}\"}} , \"a\\\"b\":1,\"inp\\u0075t\":[ {\"role\":\"system\",\"content\":\"s\"} ] }",
	" {\"input\":[],\"promptgate\":{}} \n",
	`{"input":[{"type":"function_call_output","call_id":"c","output":"a b"}],"instructions":"x","promptgate":{}}`,
	`{"input":[{"role":"user","content":"u"}],"previous_response_id":"resp_1","store":true,"promptgate":{"conversation":"c"},"z":[1,{"promptgate":1}]}`,
}

// TestRewriteSplicedFallbacks: the splice answers in the common case and leaves to the edit-by-edit
// rewrite each case it does not make (datamarking, the tools filtered to nothing, an input item
// that is not an object, a member sjson would append other than before the closing brace), and
// rewrite's bytes are the edits' every time.
func TestRewriteShapes(t *testing.T) {
	t.Parallel()
	f, g := policy.Tool{Name: "f"}, policy.Tool{Name: "g"}
	plain := assembly.NewPrompt("=== SYSTEM CORE ===\n\"x\"\u2028")
	marked := assembly.NewPrompt("core")
	marked.DatamarkToolOutput = true
	tools := `"tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}],"tool_choice":"auto"`
	for _, c := range []struct {
		name    string
		body    string
		p       assembly.Prompt
		kept    []policy.Tool
		removed bool
	}{
		{"instructions set, promptgate first", `{"promptgate":{"user":"u"},"instructions":"i","input":"hi"}`, plain, nil, false},
		{"instructions set, promptgate in the middle", `{"instructions":"i","promptgate":{},"input":[]}`, plain, nil, false},
		{"instructions set, promptgate last", `{"instructions":"i" , "input":[] ,"promptgate" : {} }`, plain, nil, false},
		{"instructions appended", `{"input":[{"role":"user","content":"u"}],"promptgate":{}}`, plain, nil, false},
		{"system and developer items dropped", `{"input":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"developer","content":"d"}]}`, plain, nil, false},
		{"tools filtered", `{"input":"hi",` + tools + `}`, plain, []policy.Tool{g}, true},
		{"tools kept", `{"input":"hi",` + tools + `}`, plain, []policy.Tool{f, g}, false},

		{"datamarking", `{"input":[{"type":"function_call_output","call_id":"c","output":"a b"}],"instructions":"i"}`, marked, nil, false},
		{"tools filtered to nothing", `{"input":"hi",` + tools + `,"promptgate":{}}`, plain, nil, true},
		{"an input item that is not an object", `{"instructions":"i","input":[1,{"role":"system","content":"s"}]}`, plain, nil, false},
		{"instructions appended after whitespace", " {\"input\":[],\"promptgate\":{}}\n", plain, nil, false},
		{"instructions appended to an empty object", `{ }`, plain, nil, false},
		{"instructions appended, promptgate the only member", `{"promptgate":{"user":"u"} }`, plain, nil, false},
	} {
		out := sameAsEdits(t, []byte(c.body), c.p, c.kept, c.removed)
		if gjson.GetBytes(out, assembly.PathExtension).Exists() || !gjson.ValidBytes(out) || c.p.DatamarkToolOutput != bytes.Contains(out, []byte("a\u02c6b")) {
			t.Errorf("%s: %s", c.name, out)
		}
	}
}

// TestRewriteSpliceSameBytes checks that rewrite gives the very bytes of the edit-by-edit rewrite,
// whatever the members' order, the whitespace around them, the input and which tools go.
func TestRewriteSameAsReference(t *testing.T) {
	t.Parallel()
	members := map[string]string{
		"model":        `"gpt"`,
		"instructions": `"be kind"`,
		"input":        `[{"role":"developer","content":"d"} , {"role":"user","content":"hi"},{"role":"system","content":"s"},{"type":"function_call_output","call_id":"c","output":"o"}]`,
		"tools":        `[{"type":"function","name":"a"},{"type":"mcp","server_label":"x"},{"type":"function","name":"b"},{"type":"mcp","server_label":"y"},{"type":"function","name":"a"}]`,
		"promptgate":   `{"user":"u","context":{"k":"v"}}`,
		"tool_choice":  `"auto"`,
		"store":        `true`,
	}
	orders := [][]string{
		{"model", "instructions", "input", "tools", "promptgate", "tool_choice"},
		{"promptgate", "input", "tools", "instructions"},
		{"input", "promptgate"},
		{"promptgate", "input"},
		{"promptgate"},
		{"tools", "promptgate", "store", "input"},
		{"instructions", "input", "store"},
		{"input", "model"},
	}
	seps := []struct{ open, sep, colon, close string }{
		{"{", ",", ":", "}"},
		{"{ ", " , ", " : ", " }"},
		{"{\n  ", ",\n  ", ": ", "\n}"},
		{"\t{\t", "\t,\r\n", "\t:\t", "\t}\t"},
	}
	keptSets := [][]policy.Tool{nil, {{Name: "a"}}, {{Name: "b"}}, {{Name: "a"}, {Name: "mcp"}}, {{Name: "mcp"}}, {{Name: "a"}, {Name: "b"}, {Name: "mcp"}}}
	inputs := []string{members["input"], `"hi"`, `[{"role":"user","content":"u"}]`}
	n := 0
	for _, order := range orders {
		for _, s := range seps {
			for _, in := range inputs {
				var b strings.Builder
				b.WriteString(s.open)
				for i, k := range order {
					if i > 0 {
						b.WriteString(s.sep)
					}
					v := members[k]
					if k == "input" {
						v = in
					}
					b.WriteString(`"` + k + `"` + s.colon + v)
				}
				b.WriteString(s.close)
				for _, kept := range keptSets {
					for _, removed := range []bool{false, true} {
						sameAsEdits(t, []byte(b.String()), assembly.NewPrompt("=== SYSTEM CORE ===\n<b>&\"x\"\u2028"), kept, removed)
						n++
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

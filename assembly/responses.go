package assembly

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
)

// JSON paths of OpenAI Responses API bodies (/v1/responses).
const (
	pathInstructions       = "instructions"
	pathInput              = "input"
	pathPreviousResponseID = "previous_response_id"
	// pathPrompt is a stored prompt ({"id":"pmpt_...","version":...,"variables":...}): instructions and tools
	// kept upstream, which promptgate never sees.
	pathPrompt = "prompt"
)

// Responses is what assembly and policy need of a /v1/responses request, read with gjson.
type Responses struct {
	Model  string
	Stream bool
	// Application are the client's own instructions, then the texts of its system and developer input items,
	// in order.
	Application []string
	// Tools are the declared tools: a function or custom tool by its name, a built-in tool (web_search,
	// file_search, code_interpreter, mcp, ...) by its type. Several entries of one built-in type (two mcp
	// servers, say) are one tool: only the first is listed, and the others follow its fate.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools.
	NativeTools bool
	// LatestUser is the text of the last user input item, or the input itself when it is a string.
	LatestUser string
	// PreviousResponseID is the conversation's previous response, forwarded untouched; "" when none.
	PreviousResponseID string
	// StoredPrompt is the id of the stored prompt the request names (prompt.id), "" when none. Its tools and
	// instructions are applied upstream, out of promptgate's sight: the caller forwards such a request only
	// where the operator restricts no tool (see policy.Effective.Restriction).
	StoredPrompt string
}

// ParseResponses reads a validated Responses API body. instructions must be a string (or null), input a
// string or an array of objects (or absent), tools an array, prompt an object with a string id (or null).
func ParseResponses(body []byte) (*Responses, error) { return NewBody(body).Responses() }

// Responses is ParseResponses of b.
func (b *Body) Responses() (*Responses, error) {
	r := &Responses{
		Model:              b.get(pathModel).String(),
		Stream:             b.get(pathStream).Type == gjson.True,
		PreviousResponseID: b.get(pathPreviousResponseID).String(),
	}
	switch ins := b.get(pathInstructions); {
	case ins.Type == gjson.String:
		if ins.Str != "" {
			r.Application = append(r.Application, ins.Str)
		}
	case ins.Exists() && ins.Type != gjson.Null:
		return nil, invalid(pathInstructions, "instructions must be a string")
	}
	switch in := b.get(pathInput); {
	case in.Type == gjson.String:
		r.LatestUser = in.Str
	case in.IsArray():
		app, user, err := roleTexts(in, pathInput)
		if err != nil {
			return nil, err
		}
		r.Application, r.LatestUser = append(r.Application, app...), user
	case in.Exists() && in.Type != gjson.Null:
		return nil, invalid(pathInput, "input must be a string or an array")
	}
	switch pr := b.get(pathPrompt); {
	case pr.IsObject():
		id := pr.Get("id")
		if id.Type != gjson.String || id.Str == "" {
			return nil, invalid(pathPrompt+".id", "prompt.id must be the stored prompt's id, a non-empty string")
		}
		r.StoredPrompt = id.Str
	case pr.Exists() && pr.Type != gjson.Null:
		return nil, invalid(pathPrompt, "prompt must be an object naming a stored prompt ({\"id\":\"pmpt_...\"})")
	}
	if t := b.get(pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		seenBuiltin := map[string]bool{}
		t.ForEach(func(_, v gjson.Result) bool {
			tool, builtin := responsesTool(v)
			if builtin {
				if seenBuiltin[tool.Name] {
					return true
				}
				seenBuiltin[tool.Name] = true
			}
			r.Tools = append(r.Tools, tool)
			r.NativeTools = true
			return true
		})
	}
	return r, nil
}

// responsesTool reads one "tools" entry of a Responses body: {"type":"function","name":...,"parameters":...},
// {"type":"custom","name":...}, or a built-in tool, which is governed by its type name (builtin is true).
func responsesTool(v gjson.Result) (t policy.Tool, builtin bool) {
	switch typ := v.Get("type").String(); typ {
	case "function", "":
		return policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String(), Schema: rawOrNil(v.Get("parameters"))}, false
	case "custom":
		return policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String()}, false
	default:
		return policy.Tool{Name: typ, Aliases: builtinAliases(typ)}, true
	}
}

// builtinAliases are the other type names of a built-in tool's versions: without a date suffix
// (web_search_preview_2025_03_11), with and without _preview (web_search, web_search_preview), and the computer
// tool's names (computer_use_preview, computer_use, computer), as respvet knows them for computer_call items.
func builtinAliases(typ string) []string {
	base := typ
	if n := len(base) - len("_2006_01_02"); n > 0 && isDateSuffix(base[n:]) {
		base = base[:n]
	}
	base = strings.TrimSuffix(base, "_preview")
	names := []string{base, base + "_preview"}
	if base == "computer" || base == "computer_use" {
		names = []string{"computer", "computer_use", "computer_use_preview"}
	}
	var out []string
	for _, n := range names {
		if n != typ && n != "" {
			out = append(out, n)
		}
	}
	return out
}

// isDateSuffix reports whether s is "_YYYY_MM_DD".
func isDateSuffix(s string) bool {
	for i, c := range []byte(s) {
		switch i {
		case 0, 5, 8:
			if c != '_' {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return len(s) == len("_2006_01_02")
}

// toolChoiceError is the 400 for a tool_choice that names a tool the request may not use.
func toolChoiceError(param, format string, args ...any) error {
	return &policy.Error{Code: policy.CodeToolChoiceNotAllowed, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ResponsesToolChoice checks tool_choice against the kept tools: "required" with nothing kept, or a choice
// naming a tool that is not kept ({"type":"function","name":X}, {"type":"custom","name":X}, a built-in type
// such as {"type":"web_search_preview"} or {"type":"mcp",...}, or an entry of {"type":"allowed_tools",
// "tools":[...]}), is a 400 tool_choice_not_allowed.
func ResponsesToolChoice(body []byte, kept []policy.Tool) error {
	return NewBody(body).ResponsesToolChoice(kept)
}

// ResponsesToolChoice is ResponsesToolChoice of b.
func (b *Body) ResponsesToolChoice(kept []policy.Tool) error {
	keptSet := nameSet(kept)
	tc := b.get(pathToolChoice)
	switch {
	case tc.Type == gjson.String:
		if tc.Str == "required" && len(kept) == 0 {
			return toolChoiceError(pathToolChoice, "tool_choice is \"required\" but no tool is allowed for this request")
		}
	case tc.IsObject():
		var names []string
		switch tc.Get("type").String() {
		case "allowed_tools":
			tc.Get("tools").ForEach(func(_, t gjson.Result) bool {
				tool, _ := responsesTool(t)
				names = append(names, tool.Name)
				return true
			})
			if tc.Get("mode").String() == "required" && len(kept) == 0 {
				return toolChoiceError(pathToolChoice, "tool_choice requires a tool but no tool is allowed for this request")
			}
		default:
			tool, _ := responsesTool(tc)
			names = append(names, tool.Name)
		}
		for _, n := range names {
			if !keptSet[n] {
				return toolChoiceError(pathToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
			}
		}
	}
	return nil
}

// RewriteResponses returns the upstream body of a /v1/responses request: instructions replaced by the layered
// prompt (which holds the client's instructions and system/developer input items as APPLICATION INSTRUCTIONS),
// those input items removed from an input array (a string input stays as it is), tools filtered to the kept
// ones, the promptgate field removed. Every other byte — previous_response_id, conversation, store, unknown
// fields — stays as the client sent it.
//
// The runtime context always stays in instructions: input items are stored with the conversation
// (previous_response_id), so a per-turn context item there would pile up in later turns. Callers build p
// without the structured channel.
func RewriteResponses(body []byte, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := sjson.SetBytes(body, pathInstructions, p.System)
	if err != nil {
		return nil, fmt.Errorf("assembly: set instructions: %w", err)
	}
	if in := get(out, pathInput); in.IsArray() {
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
			if out, err = sjson.SetRawBytes(out, pathInput, items.Bytes()); err != nil {
				return nil, fmt.Errorf("assembly: set input: %w", err)
			}
		}
	}
	if removedAny {
		name := func(v gjson.Result) (string, bool) {
			t, builtin := responsesTool(v)
			return t.Name, builtin
		}
		if out, err = filterTools(out, pathTools, kept, name, pathToolChoice); err != nil {
			return nil, err
		}
	}
	if p.DatamarkToolOutput {
		if out, err = DatamarkResponses(out); err != nil {
			return nil, err
		}
	}
	return removeExtension(out)
}

// RewriteResponses is RewriteResponses of b, on a copy of the body whose promptgate value is cut down to 0 (see
// withoutContext), so that the edits, each reading the body again, no longer read past the runtime context.
func (b *Body) RewriteResponses(p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	return RewriteResponses(b.withoutContext(), p, kept, removedAny)
}

// nameSet is the set of the tools' names.
func nameSet(tools []policy.Tool) map[string]bool {
	s := make(map[string]bool, len(tools))
	for _, t := range tools {
		s[t.Name] = true
	}
	return s
}

// filterTools keeps, in the array at path, the entries whose name is kept: the first entry of each name, and
// every entry of a name whose first entry is shared (several entries of one built-in tool type). An array left
// empty is removed together with deps (tool_choice), which the APIs only accept alongside tools.
func filterTools(body []byte, path string, kept []policy.Tool, name func(gjson.Result) (n string, shared bool), deps ...string) ([]byte, error) {
	arr := get(body, path)
	if !arr.IsArray() {
		return body, nil
	}
	keptSet := nameSet(kept)
	first := map[string]bool{} // name -> whether its first entry is shared
	var b bytes.Buffer
	b.WriteByte('[')
	n := 0
	arr.ForEach(func(_, v gjson.Result) bool {
		nm, shared := name(v)
		firstShared, seen := first[nm]
		if !seen {
			first[nm] = shared
		}
		if !keptSet[nm] || (seen && !(shared && firstShared)) {
			return true
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v.Raw)
		n++
		return true
	})
	b.WriteByte(']')
	var err error
	if n > 0 {
		if body, err = sjson.SetRawBytes(body, path, b.Bytes()); err != nil {
			return nil, fmt.Errorf("assembly: filter tools: %w", err)
		}
		return body, nil
	}
	for _, p := range append([]string{path}, deps...) {
		if get(body, p).Exists() {
			if body, err = sjson.DeleteBytes(body, p); err != nil {
				return nil, fmt.Errorf("assembly: filter tools: %w", err)
			}
		}
	}
	return body, nil
}

// removeExtension deletes the top-level promptgate field, if any.
func removeExtension(body []byte) ([]byte, error) {
	if !get(body, PathExtension).Exists() {
		return body, nil
	}
	out, err := sjson.DeleteBytes(body, PathExtension)
	if err != nil {
		return nil, fmt.Errorf("assembly: remove promptgate field: %w", err)
	}
	return out, nil
}

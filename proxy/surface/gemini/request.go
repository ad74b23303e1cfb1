package gemini

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// ToolComputerUse is the built-in tool the client runs itself (its actions come back as
// functionCall parts, vetted by their names); every other built-in tool Google runs, and its name
// admits no call.
const ToolComputerUse = "computer_use"

// parse reads a validated generateContent body: contents must be an array of objects, each with an
// array of parts (or none); systemInstruction a content whose parts are text (Application, in
// order); tools an array of tool objects. A tool object's functionDeclarations are the declared
// functions, each with its parameters (Google's Schema, read as JSON Schema) or
// parametersJsonSchema; each other member of it is a built-in tool (googleSearch, codeExecution,
// urlContext, ...) governed by its snake_case name (google_search), with the camelCase one as an
// alias. cachedContent is a stored prompt: its tools and instructions apply upstream, unseen.
func parse(b *assembly.Body, t surface.Target) (surface.Request, error) {
	root := gjson.ParseBytes(b.Raw())
	req := surface.Request{Model: t.Model, Stream: t.Stream}
	contents, ok := get(root, fContents)
	if !ok {
		return req, invalidBoth(fContents)
	}
	if !contents.IsArray() {
		return req, assembly.Invalid(fContents.camel(), "contents must be an array of contents")
	}
	var err error
	i := 0
	contents.ForEach(func(_, c gjson.Result) bool {
		at := fmt.Sprintf("contents[%d]", i)
		i++
		text, e := contentText(c, at)
		if e != nil {
			err = e
			return false
		}
		if role, _ := get(c, fRole); role.String() != "model" {
			req.LatestUser = text
		}
		return true
	})
	if err != nil {
		return req, err
	}
	if req.Application, err = systemTexts(root); err != nil {
		return req, err
	}
	if req.Tools, err = declaredTools(root); err != nil {
		return req, err
	}
	req.NativeTools = len(req.Tools) > 0
	if cc, ok := get(root, fCached); !ok {
		return req, invalidBoth(fCached)
	} else if cc.Type == gjson.String && cc.Str != "" {
		req.StoredPrompt = cc.Str
	}
	return req, nil
}

// invalidBoth refuses a body that gives a field by both its names.
func invalidBoth(n name) error {
	return assembly.Invalid(n.camel(), "%s is given both as %s and as %s; give it once", n.camel(), n.camel(), n.snake())
}

// contentText is the text of a content's text parts (thoughts left out), joined by line breaks; a
// content must be an object whose parts, if any, are an array of objects.
func contentText(c gjson.Result, at string) (string, error) {
	if !c.IsObject() {
		return "", assembly.Invalid(at, "%s must be an object", at)
	}
	parts, ok := get(c, fParts)
	if !ok {
		return "", invalidBoth(fParts)
	}
	if parts.Exists() && parts.Type != gjson.Null && !parts.IsArray() {
		return "", assembly.Invalid(at+".parts", "%s.parts must be an array", at)
	}
	var texts []string
	var err error
	j := 0
	parts.ForEach(func(_, p gjson.Result) bool {
		if !p.IsObject() {
			err = assembly.Invalid(fmt.Sprintf("%s.parts[%d]", at, j), "%s.parts[%d] must be an object", at, j)
			return false
		}
		j++
		for _, n := range []name{fFunctionCall, fFunctionResp} {
			if _, ok := get(p, n); !ok {
				err = invalidBoth(n)
				return false
			}
		}
		if th, _ := get(p, fThought); th.Type == gjson.True {
			return true
		}
		if tx, _ := get(p, fText); tx.Type == gjson.String {
			texts = append(texts, tx.Str)
		}
		return true
	})
	return strings.Join(texts, "\n"), err
}

// systemTexts are the texts of systemInstruction's text parts, in order.
func systemTexts(root gjson.Result) ([]string, error) {
	sys, ok := get(root, fSystem)
	switch {
	case !ok:
		return nil, invalidBoth(fSystem)
	case !sys.Exists() || sys.Type == gjson.Null:
		return nil, nil
	case !sys.IsObject():
		return nil, assembly.Invalid(fSystem.camel(), "systemInstruction must be a content object")
	}
	parts, ok := get(sys, fParts)
	if !ok {
		return nil, invalidBoth(fParts)
	}
	var out []string
	var err error
	i := 0
	parts.ForEach(func(_, p gjson.Result) bool {
		tx, _ := get(p, fText)
		if !p.IsObject() || tx.Type != gjson.String || len(p.Map()) != 1 {
			err = assembly.Invalid(fmt.Sprintf("systemInstruction.parts[%d]", i), "systemInstruction.parts[%d] must be a text part", i)
			return false
		}
		out = append(out, tx.Str)
		i++
		return true
	})
	return out, err
}

// declaredTools reads the tools array (see parse).
func declaredTools(root gjson.Result) ([]policy.Tool, error) {
	tools, _ := get(root, fTools)
	if !tools.Exists() || tools.Type == gjson.Null {
		return nil, nil
	}
	if !tools.IsArray() {
		return nil, assembly.Invalid(fTools.camel(), "tools must be an array")
	}
	var out []policy.Tool
	var err error
	i := 0
	tools.ForEach(func(_, tool gjson.Result) bool {
		at := fmt.Sprintf("tools[%d]", i)
		i++
		if !tool.IsObject() {
			err = assembly.Invalid(at, "%s must be an object", at)
			return false
		}
		if _, ok := get(tool, fDeclarations); !ok {
			err = invalidBoth(fDeclarations)
			return false
		}
		tool.ForEach(func(k, v gjson.Result) bool {
			if isDeclarations(k.Str) {
				var fns []policy.Tool
				if fns, err = functions(v, at+"."+k.Str); err == nil {
					out = append(out, fns...)
				}
				return err == nil
			}
			out = append(out, builtin(k.Str))
			return true
		})
		return err == nil
	})
	return out, err
}

// functions reads a functionDeclarations array.
func functions(decls gjson.Result, at string) ([]policy.Tool, error) {
	if !decls.IsArray() {
		return nil, assembly.Invalid(at, "%s must be an array", at)
	}
	var out []policy.Tool
	var err error
	i := 0
	decls.ForEach(func(_, d gjson.Result) bool {
		where := fmt.Sprintf("%s[%d]", at, i)
		i++
		nm, _ := get(d, fName)
		if !d.IsObject() || nm.Type != gjson.String || nm.Str == "" {
			err = assembly.Invalid(where, "%s must be a function declaration with a name", where)
			return false
		}
		desc, _ := get(d, fDescription)
		params, ok1 := get(d, fParameters)
		pjs, ok2 := get(d, fParamsJSON)
		if !ok1 || !ok2 {
			err = invalidBoth(fParamsJSON)
			return false
		}
		t := policy.Tool{Name: nm.Str, Description: desc.String()}
		switch {
		case params.Exists() && params.Type != gjson.Null && pjs.Exists() && pjs.Type != gjson.Null:
			err = assembly.Invalid(where, "%s declares both parameters and parametersJsonSchema; give one", where)
			return false
		case pjs.Exists() && pjs.Type != gjson.Null:
			t.Schema = []byte(pjs.Raw)
		case params.Exists() && params.Type != gjson.Null:
			t.Schema = jsonSchema(params, 0)
		}
		out = append(out, t)
		return true
	})
	return out, err
}

// builtin is a built-in tool of a tool object's member key: governed by its snake_case name, with
// its camelCase name as an alias.
func builtin(k string) policy.Tool {
	snake := snakeCase(k)
	t := policy.Tool{Name: snake, UpstreamOnly: snake != ToolComputerUse}
	if c := camelCase(k); c != snake {
		t.Aliases = []string{c}
	}
	return t
}

// snakeCase is a proto field name of a JSON name (googleSearch is google_search); camelCase the
// reverse.
func snakeCase(s string) string {
	var b strings.Builder
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			b.WriteByte('_')
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func camelCase(s string) string {
	var b strings.Builder
	up := false
	for _, c := range s {
		switch {
		case c == '_':
			up = true
			continue
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}

// isDeclarations reports whether a tool object's member k is its functionDeclarations.
func isDeclarations(k string) bool { return k == fDeclarations.camel() || k == fDeclarations.snake() }

// checkToolChoice checks toolConfig.functionCallingConfig against the kept tools:
// allowedFunctionNames naming a function that is not kept, or mode ANY with no function kept, is a
// 400 tool_choice_not_allowed.
func checkToolChoice(b *assembly.Body, kept []policy.Tool) error {
	root := gjson.ParseBytes(b.Raw())
	tc, ok := get(root, fToolConfig)
	if !ok {
		return invalidBoth(fToolConfig)
	}
	fc, ok := get(tc, fCallingConfig)
	if !ok {
		return invalidBoth(fCallingConfig)
	}
	if !fc.IsObject() {
		return nil
	}
	names, ok1 := get(fc, fAllowedNames)
	mode, ok2 := get(fc, fMode)
	if !ok1 || !ok2 {
		return invalidBoth(fAllowedNames)
	}
	keptSet := assembly.NameSet(kept)
	var err error
	names.ForEach(func(_, n gjson.Result) bool {
		if !keptSet[n.String()] {
			err = assembly.ToolChoiceError("toolConfig", "toolConfig.functionCallingConfig.allowedFunctionNames names %q, which is not allowed for this request", n.String())
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if strings.EqualFold(mode.String(), "ANY") || strings.EqualFold(mode.String(), "VALIDATED") {
		for _, t := range kept {
			if !t.UpstreamOnly {
				return nil
			}
		}
		return assembly.ToolChoiceError("toolConfig", "toolConfig.functionCallingConfig.mode is %q but no function is allowed for this request", mode.String())
	}
	return nil
}

// rewrite returns the upstream body: systemInstruction replaced by the layered prompt as one text
// part (and, in the structured channel, the context as a second), whichever name the client gave it
// by; the tools filtered to the kept ones (a tool object left empty goes, and an array left empty
// takes toolConfig along); tool outputs datamarked where asked; the promptgate field removed. Every
// other byte stays as the client sent it.
func rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	edits := make([]assembly.MemberEdit, 0, 6)
	if k := fSystem.snake(); k != fSystem.camel() && b.Get(k).Exists() {
		edits = append(edits, assembly.MemberEdit{Key: k, Delete: true})
	}
	edits = append(edits, assembly.MemberEdit{Key: fSystem.camel(), Raw: systemInstruction(&p)})
	if removedAny {
		edits = append(edits, toolEdits(b.Get(fTools.camel()), kept)...)
	}
	edits = append(edits, assembly.MemberEdit{Key: assembly.PathExtension, Delete: true})
	out, err := b.Apply(edits)
	if err != nil {
		return nil, fmt.Errorf("gemini: rewrite: %w", err)
	}
	if p.DatamarkToolOutput {
		return datamark(out)
	}
	return out, nil
}

// systemInstruction is the upstream systemInstruction: the layered prompt, then the context in the
// structured channel, each a text part.
func systemInstruction(p *assembly.Prompt) []byte {
	b := append(make([]byte, 0, p.SystemJSONSize()+32), `{"parts":[{"text":`...)
	b = p.AppendSystemJSON(b)
	if p.ContextMessage != "" {
		b = append(b, `},{"text":`...)
		b = assembly.AppendJSONString(b, p.ContextMessage)
	}
	return append(b, `}]}`...)
}

// toolEdits keep the kept tools of every tool object: its functionDeclarations filtered, a built-in
// member removed unless kept. An object left empty goes; an array left empty goes with toolConfig.
func toolEdits(tools gjson.Result, kept []policy.Tool) []assembly.MemberEdit {
	if !tools.IsArray() {
		return nil
	}
	keep := assembly.NameSet(kept)
	var objs []string
	tools.ForEach(func(_, tool gjson.Result) bool {
		var members []string
		tool.ForEach(func(k, v gjson.Result) bool {
			switch {
			case isDeclarations(k.Str):
				var fns []string
				v.ForEach(func(_, d gjson.Result) bool {
					if nm, _ := get(d, fName); keep[nm.String()] {
						fns = append(fns, d.Raw)
					}
					return true
				})
				if len(fns) > 0 {
					members = append(members, string(assembly.JSONString(k.Str))+":"+string(relay.JoinArray(fns)))
				}
			case keep[builtin(k.Str).Name]:
				members = append(members, string(assembly.JSONString(k.Str))+":"+v.Raw)
			}
			return true
		})
		if len(members) > 0 {
			objs = append(objs, "{"+strings.Join(members, ",")+"}")
		}
		return true
	})
	if len(objs) > 0 {
		return []assembly.MemberEdit{{Key: fTools.camel(), Raw: relay.JoinArray(objs)}}
	}
	var out []assembly.MemberEdit
	for _, k := range []string{fTools.camel(), fToolConfig.camel(), fToolConfig.snake()} {
		out = append(out, assembly.MemberEdit{Key: k, Delete: true})
	}
	return out
}

// datamark datamarks the string values of every functionResponse's response.
func datamark(body []byte) ([]byte, error) {
	var marks assembly.Marks
	eachPart(gjson.ParseBytes(body), func(_ string, path string, p gjson.Result) {
		fr, _ := get(p, fFunctionResp)
		if !fr.IsObject() {
			return
		}
		r, _ := get(fr, fResponse)
		markStrings(&marks, path+"."+key(p, fFunctionResp)+"."+key(fr, fResponse), r, 0)
	})
	return marks.Apply(body)
}

// markStrings adds every string of v at path, to a bounded depth.
func markStrings(m *assembly.Marks, path string, v gjson.Result, depth int) {
	switch {
	case depth > 32:
	case v.Type == gjson.String:
		m.Content(path, v)
	case v.IsObject() || v.IsArray():
		i := 0
		v.ForEach(func(k, e gjson.Result) bool {
			sub := strconv.Itoa(i)
			if v.IsObject() {
				sub = gjson.Escape(k.Str)
			}
			markStrings(m, path+"."+sub, e, depth+1)
			i++
			return true
		})
	}
}

// eachPart calls f with the role, the sjson path and the value of every part of every content.
func eachPart(root gjson.Result, f func(role, path string, p gjson.Result)) {
	contents, _ := get(root, fContents)
	ck := key(root, fContents)
	i := 0
	contents.ForEach(func(_, c gjson.Result) bool {
		role, _ := get(c, fRole)
		parts, _ := get(c, fParts)
		base := ck + "." + strconv.Itoa(i) + "." + key(c, fParts) + "."
		j := 0
		parts.ForEach(func(_, p gjson.Result) bool {
			f(role.String(), base+strconv.Itoa(j), p)
			j++
			return true
		})
		i++
		return true
	})
}

// userTexts calls each with the text parts of the user's contents (a content without a role is
// the user's), and their paths.
func userTexts(body []byte, each func(path string, text gjson.Result)) {
	eachPart(gjson.ParseBytes(body), func(role, path string, p gjson.Result) {
		if role == "user" || role == "" {
			each(path+"."+key(p, fText), p.Get(key(p, fText)))
		}
	})
}

// jsonSchema translates Google's Schema (an OpenAPI 3.0 subset: upper-case types, nullable, int64
// bounds written as strings) into the JSON Schema the call's arguments are checked against: type
// lower-cased (and "null" added where nullable), bounds as numbers, properties, items and anyOf
// translated in turn; other keywords that JSON Schema has (enum, format, pattern, required, ...)
// kept, the rest left out.
func jsonSchema(s gjson.Result, depth int) []byte {
	if !s.IsObject() || depth > 64 {
		return []byte("{}")
	}
	var b bytes.Buffer
	b.WriteByte('{')
	member := func(k string, raw []byte) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(assembly.JSONString(k))
		b.WriteByte(':')
		b.Write(raw)
	}
	nullable := false
	if n, _ := get(s, "nullable"); n.Type == gjson.True {
		nullable = true
	}
	s.ForEach(func(k, v gjson.Result) bool {
		switch kw := camelCase(k.Str); kw {
		case "type":
			if t := strings.ToLower(v.String()); t != "" && t != "type_unspecified" {
				if nullable {
					member(kw, []byte(`["`+t+`","null"]`))
				} else {
					member(kw, assembly.JSONString(t))
				}
			}
		case "properties":
			var props []string
			v.ForEach(func(pk, pv gjson.Result) bool {
				props = append(props, string(assembly.JSONString(pk.Str))+":"+string(jsonSchema(pv, depth+1)))
				return true
			})
			member(kw, []byte("{"+strings.Join(props, ",")+"}"))
		case "items":
			member(kw, jsonSchema(v, depth+1))
		case "anyOf":
			var alts []string
			v.ForEach(func(_, av gjson.Result) bool {
				alts = append(alts, string(jsonSchema(av, depth+1)))
				return true
			})
			member(kw, relay.JoinArray(alts))
		case "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties", "minimum", "maximum":
			if n, err := strconv.ParseFloat(v.String(), 64); err == nil && (v.Type == gjson.Number || v.Type == gjson.String) {
				member(kw, []byte(strconv.FormatFloat(n, 'f', -1, 64)))
			}
		case "enum", "format", "pattern", "required", "title", "description", "default":
			member(kw, []byte(v.Raw))
		}
		return true
	})
	b.WriteByte('}')
	return b.Bytes()
}

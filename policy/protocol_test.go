package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/policy/vet"
)

// contractProtocol is the protocol definition of CONTRACT.md ("Definitions the operator writes").
const contractProtocol = `{"id": "tech", "extends": "", "description": "engineering assistants",
 "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "- cite sources\n- ..."}},
 "scope": ["prompt_modules:minimal"], "allowClientSelection": true, "clientSystem": "keep",
 "directives": ["Answer in the user's language."],
 "tools": {"allow": ["search_docs", "web_fetch"], "deny": []},
 "toolCalls": {"onViolation": "refuse",
               "rules": [{"tool": "web_fetch", "path": "url", "pattern": "^https://docs\\.example\\.com/"}]}}`

func TestParseProtocolContractExample(t *testing.T) {
	p, err := ParseProtocol([]byte(contractProtocol))
	if err != nil {
		t.Fatalf("ParseProtocol: %v", err)
	}
	want := &Protocol{
		ID: "tech", Description: "engineering assistants",
		PromptTemplate:       PromptTemplate{Base: "base_tool_call_v2", Overrides: Overrides{Rules: "- cite sources\n- ..."}},
		Scope:                []string{"prompt_modules:minimal"},
		AllowClientSelection: true,
		ClientSystem:         ClientSystemKeep,
		Directives:           []string{"Answer in the user's language."},
		Tools:                ToolList{Allow: []string{"search_docs", "web_fetch"}, Deny: []string{}},
		ToolCalls: ToolCalls{
			OnViolation: vet.ModeRefuse,
			Rules:       []vet.Rule{{Tool: "web_fetch", Path: "url", Check: vet.Check{Pattern: `^https://docs\.example\.com/`}}},
		},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("ParseProtocol(contract example)\n got %#v\nwant %#v", p, want)
	}
}

// TestParseProtocolInformationFlow: the information-flow rules sit beside onViolation and rules in
// toolCalls, and "continue" is a mode.
func TestParseProtocolInformationFlow(t *testing.T) {
	p, err := ParseProtocol([]byte(`{"id": "bank", "promptTemplate": {"base": "b"}, "toolCalls": {
	  "onViolation": "continue", "continueRounds": 3,
	  "rules": [{"tool": "send_email", "path": "body", "notPattern": "\\b\\d{16}\\b"},
	            {"tool": "fetch", "path": "url", "not": {"hosts": ["evil.net"]}}],
	  "toolOutputs": {"trusted": ["get_contacts", "list_*"]},
	  "provenance": [{"id": "payee", "tool": "send_money", "path": "iban", "as": "iban", "from": ["user", "tool:get_iban"], "keyArgs": ["iban", "amount"], "verdict": "confirm"}],
	  "scan": [{"id": "links", "tool": "send_*", "path": "body", "find": ["url"], "hosts": ["*.example.com"], "not": {"from": ["tool:read_inbox"]}}],
	  "budgets": [{"tool": "send_email", "maxCalls": 3}],
	  "flows": [{"after": ["untrusted"], "tools": ["delete_*"], "verdict": "block"}],
	  "confirm": {"ttl": "5m"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := p.ToolCalls
	if tc.OnViolation != vet.ModeContinue || tc.ContinueRounds != 3 || len(tc.Rules) != 2 || tc.Rules[1].Not == nil ||
		len(tc.ToolOutputs.Trusted) != 2 || tc.Provenance[0].Verdict != "confirm" || tc.Scan[0].Not == nil ||
		*tc.Budgets[0].MaxCalls != 3 || tc.Flows[0].Tools[0] != "delete_*" || time.Duration(tc.Confirm.TTL) != 5*time.Minute {
		t.Fatalf("decoded %+v", tc)
	}
	pol, err := flow.Compile(tc.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if !pol.ToolTrusted("list_files") || pol.ToolTrusted("read_inbox") || pol.ConfirmTTL() != 5*time.Minute || pol.ContinueRounds() != 3 {
		t.Fatalf("compiled %+v", pol.Explain())
	}
}

func TestParseProtocolMinimal(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  string
		want *Protocol
	}{
		{
			"only id and base", `{"id": "p", "promptTemplate": {"base": "base_legacy_v1"}}`,
			&Protocol{ID: "p", PromptTemplate: PromptTemplate{Base: "base_legacy_v1"}},
		},
		{
			"a workflow needs no base", `{"id": "w", "extends": "tech"}`,
			&Protocol{ID: "w", Extends: "tech"},
		},
		{
			"every scope form", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": ["prompt_modules:full", "prompt_modules:memory_off", "prompt_modules:a.b-c_off", "observer", ""]}`,
			&Protocol{ID: "p", PromptTemplate: PromptTemplate{Base: "b"}, Scope: []string{"prompt_modules:full", "prompt_modules:memory_off", "prompt_modules:a.b-c_off", "observer", ""}},
		},
		{
			"drop and error", `{"id": "p.v2-x_y", "promptTemplate": {"base": "b"}, "clientSystem": "drop", "toolCalls": {"onViolation": "error", "atomicParallelCalls": true}}`,
			&Protocol{ID: "p.v2-x_y", PromptTemplate: PromptTemplate{Base: "b"}, ClientSystem: ClientSystemDrop, ToolCalls: ToolCalls{OnViolation: vet.ModeError, AtomicParallelCalls: true}},
		},
		{
			"surrounding whitespace", " \r\n\t{\"id\": \"p\", \"promptTemplate\": {\"base\": \"b\"}}\n\n",
			&Protocol{ID: "p", PromptTemplate: PromptTemplate{Base: "b"}},
		},
		{
			"64-character id", `{"id": "` + strings.Repeat("a", 64) + `", "promptTemplate": {"base": "b"}}`,
			&Protocol{ID: strings.Repeat("a", 64), PromptTemplate: PromptTemplate{Base: "b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseProtocol([]byte(tc.def))
			if err != nil {
				t.Fatalf("ParseProtocol(%s): %v", tc.def, err)
			}
			if !reflect.DeepEqual(p, tc.want) {
				t.Errorf("got %#v\nwant %#v", p, tc.want)
			}
		})
	}
}

func TestParseProtocolRefusesMalformed(t *testing.T) {
	const ok = `{"id": "p", "promptTemplate": {"base": "b"}}`
	for _, tc := range []struct {
		name, def, want string
	}{
		{"unknown top-level field", `{"id": "p", "promptTemplate": {"base": "b"}, "tool": {}}`, `policy: protocol definition: unknown field "tool"`},
		{"unknown field in promptTemplate", `{"id": "p", "promptTemplate": {"base": "b", "override": {}}}`, `policy: protocol definition: unknown field "override" in promptTemplate`},
		{"unknown field in overrides", `{"id": "p", "promptTemplate": {"base": "b", "overrides": {"rule": "x"}}}`, `policy: protocol definition: unknown field "rule" in promptTemplate.overrides`},
		{"unknown field in tools", `{"id": "p", "promptTemplate": {"base": "b"}, "tools": {"allowed": ["*"]}}`, `policy: protocol definition: unknown field "allowed" in tools`},
		{"unknown field in toolCalls", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"mode": "error"}}`, `policy: protocol definition: unknown field "mode" in toolCalls`},
		{"unknown field in a provenance rule", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"provenance": [{"tool": "t", "path": "p", "sources": ["user"]}]}}`, `policy: protocol definition: unknown field "sources" in toolCalls.provenance[0]`},
		{"key of a flow rule in another case", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"flows": [{"After": ["untrusted"], "tools": ["x"]}]}}`, `policy: protocol definition: unknown field "After" in toolCalls.flows[0]`},
		{"unknown field in not", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"rules": [{"tool": "t", "path": "p", "not": {"regex": "a"}}]}}`, `policy: protocol definition: unknown field "regex" in toolCalls.rules[0].not`},
		{"ttl not a duration", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"confirm": {"ttl": 600}}}`, `policy: protocol definition: toolCalls.confirm.ttl: must be a duration string such as "10m"`},
		{"unknown field in a rule", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"rules": [{"tool": "t", "path": "p", "regex": "a"}]}}`, `policy: protocol definition: unknown field "regex" in toolCalls.rules[0]`},
		{"version is not part of the JSON", `{"id": "p", "promptTemplate": {"base": "b"}, "Version": 3}`, `policy: protocol definition: unknown field "Version"`},
		{"key of trusted paths in another case", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"toolOutputs": {"TrustedPaths": {"t": ["a"]}}}}`, `policy: protocol definition: unknown field "TrustedPaths" in toolCalls.toolOutputs`},
		{"key of confirm in another case", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"confirm": {"TTL": "5m"}}}`, `policy: protocol definition: unknown field "TTL" in toolCalls.confirm`},
		{"unknown field in mcp", `{"id": "p", "promptTemplate": {"base": "b"}, "mcp": {"requireModelCalls": true}}`, `policy: protocol definition: unknown field "requireModelCalls" in mcp`},
		{"key of mcp in another case", `{"id": "p", "promptTemplate": {"base": "b"}, "mcp": {"RequireModelCall": true}}`, `policy: protocol definition: unknown field "RequireModelCall" in mcp`},
		{"mcp of the wrong type", `{"id": "p", "promptTemplate": {"base": "b"}, "mcp": {"requireModelCall": "yes"}}`, `policy: protocol definition: mcp.requireModelCall: a string where true or false goes`},
		{"vetHostedCalls of the wrong type", `{"id": "p", "promptTemplate": {"base": "b"}, "mcp": {"vetHostedCalls": "yes"}}`, `policy: protocol definition: mcp.vetHostedCalls: a string where true or false goes`},
		{"wrong type", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": "observer"}`, `policy: protocol definition: scope: a string where a list of strings goes`},
		{"empty body", ``, `policy: protocol definition: jsoncheck: syntax error at offset 0: empty input`},
		{"an array", `[]`, `policy: protocol definition: jsoncheck: not a JSON object at offset 0: top-level value is an array`},
		{"a second object", ok + ` {}`, `policy: protocol definition: jsoncheck: syntax error at offset 45: unexpected '{' after top-level value`},
		{"trailing garbage", ok + ` x`, `policy: protocol definition: jsoncheck: syntax error at offset 45: unexpected 'x' after top-level value`},
		{"a stray closing brace", ok + `}`, `policy: protocol definition: jsoncheck: syntax error at offset 44: unexpected '}' after top-level value`},
		{"a stray closing bracket", ok + "\n]", `policy: protocol definition: jsoncheck: syntax error at offset 45: unexpected ']' after top-level value`},
		{"key in another case", `{"ID": "p", "promptTemplate": {"base": "b"}}`, `policy: protocol definition: unknown field "ID"`},
		{"nested key in another case", `{"id": "p", "promptTemplate": {"Base": "b"}}`, `policy: protocol definition: unknown field "Base" in promptTemplate`},
		{"duplicate key", `{"id": "p", "id": "q", "promptTemplate": {"base": "b"}}`, `policy: protocol definition: jsoncheck: duplicate key "id" at offset 12`},
		{"truncated", `{"id": "p", "promptTemplate": {"base": "b"}`, `policy: protocol definition: jsoncheck: syntax error at offset 43: unexpected end of input, expected ',' or '}'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseProtocol([]byte(tc.def))
			if err == nil {
				t.Fatalf("ParseProtocol(%s) = %+v, want an error", tc.def, p)
			}
			if err.Error() != tc.want {
				t.Errorf("ParseProtocol(%s) error\n got %q\nwant %q", tc.def, err, tc.want)
			}
			if p != nil {
				t.Errorf("a protocol came with the error: %+v", p)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  string
		want []string // every problem, exactly, in order
	}{
		{"empty id", `{"id": "", "promptTemplate": {"base": "b"}}`, []string{`policy: protocol "": id: "": use 1-64 letters, digits, _ . -`}},
		{"no id", `{"promptTemplate": {"base": "b"}}`, []string{`policy: protocol "": id: "": use 1-64 letters, digits, _ . -`}},
		{"id with a space", `{"id": "my proto", "promptTemplate": {"base": "b"}}`, []string{`policy: protocol "my proto": id: "my proto": use 1-64 letters, digits, _ . -`}},
		{"id with a slash", `{"id": "../tech", "promptTemplate": {"base": "b"}}`, []string{`policy: protocol "../tech": id: "../tech": use 1-64 letters, digits, _ . -`}},
		{"id too long", `{"id": "` + strings.Repeat("a", 65) + `", "promptTemplate": {"base": "b"}}`, []string{`policy: protocol "` + strings.Repeat("a", 65) + `": id: "` + strings.Repeat("a", 65) + `": use 1-64 letters, digits, _ . -`}},
		{"non-ASCII id", `{"id": "tеch", "promptTemplate": {"base": "b"}}`, []string{`policy: protocol "tеch": id: "tеch": use 1-64 letters, digits, _ . -`}},
		{"extends itself", `{"id": "w", "extends": "w"}`, []string{`policy: protocol "w": extends: a protocol cannot extend itself`}},
		{"extends a bad id", `{"id": "w", "extends": "te ch"}`, []string{`policy: protocol "w": extends: "te ch" is not a protocol id`}},
		{"missing base", `{"id": "p", "promptTemplate": {"overrides": {"rules": "- x"}}}`, []string{`policy: protocol "p": promptTemplate.base: missing: name a template, e.g. base_tool_call_v2`}},
		{"bad base name", `{"id": "p", "promptTemplate": {"base": "base tool"}}`, []string{`policy: protocol "p": promptTemplate.base: "base tool" is not a template name`}},
		{"placeholder in rules", `{"id": "p", "promptTemplate": {"base": "b", "overrides": {"rules": "- x\n{{runtime_context}}"}}}`, []string{`policy: protocol "p": promptTemplate.overrides.rules: placeholders are not allowed in rules`}},
		{"placeholder in a directive", `{"id": "p", "promptTemplate": {"base": "b"}, "directives": ["ok", "say {{tools}}"]}`, []string{`policy: protocol "p": directives[1]: placeholders are not allowed in directives`}},
		{"bad module mode", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": ["observer", "prompt_modules:huge"]}`, []string{`policy: protocol "p": scope[1]: "prompt_modules:huge": use prompt_modules:minimal|standard|full or prompt_modules:<module>_off`}},
		{"empty module entry", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": ["prompt_modules:"]}`, []string{`policy: protocol "p": scope[0]: "prompt_modules:": use prompt_modules:minimal|standard|full or prompt_modules:<module>_off`}},
		{"toggle without a module", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": ["prompt_modules:_off"]}`, []string{`policy: protocol "p": scope[0]: "prompt_modules:_off": use prompt_modules:minimal|standard|full or prompt_modules:<module>_off`}},
		{"mode is case-sensitive", `{"id": "p", "promptTemplate": {"base": "b"}, "scope": ["prompt_modules:Full"]}`, []string{`policy: protocol "p": scope[0]: "prompt_modules:Full": use prompt_modules:minimal|standard|full or prompt_modules:<module>_off`}},
		{"bad clientSystem", `{"id": "p", "promptTemplate": {"base": "b"}, "clientSystem": "strip"}`, []string{`policy: protocol "p": clientSystem: "strip": use keep or drop`}},
		{"bad allow glob", `{"id": "p", "promptTemplate": {"base": "b"}, "tools": {"allow": ["search_*", "web_[fetch"]}}`, []string{`policy: protocol "p": tools.allow[1]: bad glob "web_[fetch": syntax error in pattern`}},
		{"bad deny glob", `{"id": "p", "promptTemplate": {"base": "b"}, "tools": {"allow": ["*"], "deny": ["x\\"]}}`, []string{`policy: protocol "p": tools.deny[0]: bad glob "x\\": syntax error in pattern`}},
		{"empty allow entry", `{"id": "p", "promptTemplate": {"base": "b"}, "tools": {"allow": [""]}}`, []string{`policy: protocol "p": tools.allow[0]: empty name`}},
		{"bad onViolation", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"onViolation": "block"}}`, []string{`policy: protocol "p": toolCalls.onViolation: "block": use refuse, error, audit or continue`}},
		{"onViolation is case-sensitive", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"onViolation": "Refuse"}}`, []string{`policy: protocol "p": toolCalls.onViolation: "Refuse": use refuse, error, audit or continue`}},
		{
			"bad rule regex", `{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {"rules": [{"tool": "web_fetch", "path": "url", "pattern": "^https://("}]}}`,
			[]string{"policy: protocol \"p\": toolCalls: rules[0].pattern: error parsing regexp: missing closing ): `^https://(`"},
		},
		{
			"information-flow rules name their field",
			`{"id": "p", "promptTemplate": {"base": "b"}, "toolCalls": {
			  "toolOutputs": {"trusted": ["list_["]},
			  "provenance": [{"tool": "pay", "path": "iban", "as": "bank", "from": ["assistant"]}],
			  "scan": [{"tool": "mail", "path": "body"}],
			  "budgets": [{"tool": "send_*"}],
			  "flows": [{"after": ["user"], "tools": ["pay"], "verdict": "ask"}],
			  "confirm": {"ttl": "10s"}, "continueRounds": 9}}`,
			[]string{
				`policy: protocol "p": toolCalls.budgets[0].maxCalls: required: the most calls allowed per conversation, such as 3`,
				`policy: protocol "p": toolCalls.confirm.ttl: 10s is out of range: give 1m0s to 24h0m0s`,
				`policy: protocol "p": toolCalls.continueRounds: 9 is out of range: give 1 to 8`,
				`policy: protocol "p": toolCalls.flows[0].after[0]: "user" is trusted text, which a flow rule does not react to: use untrusted, context or tool:NAME`,
				`policy: protocol "p": toolCalls.flows[0].verdict: "ask" is not a verdict: use block or confirm`,
				`policy: protocol "p": toolCalls.provenance[0].as: "bank" is not a value kind: use auto, email, host, url, iban, id or text`,
				`policy: protocol "p": toolCalls.provenance[0].from[0]: "assistant" is not a source: the model can copy an attacker's text into its own words; list user, app, trusted or tool:NAME`,
				`policy: protocol "p": toolCalls.scan[0]: needs a check: hosts, from, not.hosts or not.from`,
				`policy: protocol "p": toolCalls.toolOutputs.trusted[0]: "list_[" is not a valid glob (syntax error in pattern): use *, ? and [class] as in tools.allow`,
			},
		},
		{
			"several problems at once",
			`{"id": "w w", "extends": "w w", "promptTemplate": {"overrides": {"rules": "{{tools}}"}}, "scope": ["prompt_modules:max"],
			  "clientSystem": "Keep", "tools": {"allow": ["["], "deny": [""]}, "toolCalls": {"onViolation": "deny"}}`,
			[]string{
				`policy: protocol "w w": id: "w w": use 1-64 letters, digits, _ . -`,
				`policy: protocol "w w": extends: "w w" is not a protocol id`,
				`policy: protocol "w w": extends: a protocol cannot extend itself`,
				`policy: protocol "w w": promptTemplate.overrides.rules: placeholders are not allowed in rules`,
				`policy: protocol "w w": scope[0]: "prompt_modules:max": use prompt_modules:minimal|standard|full or prompt_modules:<module>_off`,
				`policy: protocol "w w": clientSystem: "Keep": use keep or drop`,
				`policy: protocol "w w": tools.allow[0]: bad glob "[": syntax error in pattern`,
				`policy: protocol "w w": tools.deny[0]: empty name`,
				`policy: protocol "w w": toolCalls.onViolation: "deny": use refuse, error, audit or continue`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseProtocol([]byte(tc.def))
			if err == nil {
				t.Fatalf("ParseProtocol(%s) = %+v, want an error", tc.def, p)
			}
			if got := problems(err); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// problems splits an errors.Join error into its messages.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, problems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

func TestModulesOfScope(t *testing.T) {
	for _, tc := range []struct {
		id    string
		scope []string
		want  Modules
	}{
		// Defaults per built-in id when the scope names no mode.
		{"public", nil, Modules{Mode: modules.Minimal}},
		{"tech", nil, Modules{Mode: modules.Minimal}},
		{"neutral", nil, Modules{Mode: modules.Standard}},
		{"private", []string{"observer"}, Modules{Mode: modules.Full}},
		{"system", nil, Modules{Mode: modules.Full}},
		{"my_app", nil, Modules{Mode: modules.Standard}},
		{"Tech", nil, Modules{Mode: modules.Standard}},
		// The scope names the mode.
		{"public", []string{"prompt_modules:full"}, Modules{Mode: modules.Full}},
		{"system", []string{"prompt_modules:minimal"}, Modules{Mode: modules.Minimal}},
		{"my_app", []string{"observer", "prompt_modules:minimal"}, Modules{Mode: modules.Minimal}},
		{"neutral", []string{"prompt_modules:minimal", "prompt_modules:full"}, Modules{Mode: modules.Full}},
		// Toggles, in the order written, with or without a mode.
		{"tech", []string{"prompt_modules:memory_off"}, Modules{Mode: modules.Minimal, Off: []string{"memory"}}},
		{
			"neutral", []string{"prompt_modules:profile_off", "prompt_modules:standard", "prompt_modules:memory_off", "memory_off"},
			Modules{Mode: modules.Standard, Off: []string{"profile", "memory"}},
		},
		{"private", []string{"prompt_modules:full_off"}, Modules{Mode: modules.Full, Off: []string{"full"}}},
	} {
		got := modulesOf(tc.scope, tc.id)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("modulesOf(%q, %q) = %+v, want %+v", tc.scope, tc.id, got, tc.want)
		}
	}
}

func TestModulesThroughResolve(t *testing.T) {
	// The module mode of each built-in id, through the router, with and without a scope entry.
	cat := testCatalog(t)
	cat["custom"] = mustProtocol(t, 1, `{"id": "custom", "promptTemplate": {"base": "b"}, "allowClientSelection": true,
		"scope": ["prompt_modules:minimal", "prompt_modules:memory_off", "prompt_modules:notes_off"]}`)
	r := NewRouter(mustConfig(t, ""))
	for id, want := range map[string]Modules{
		"public":  {Mode: modules.Minimal},
		"tech":    {Mode: modules.Minimal},
		"neutral": {Mode: modules.Standard},
		"private": {Mode: modules.Full},
		"system":  {Mode: modules.Full},
		"custom":  {Mode: modules.Minimal, Off: []string{"memory", "notes"}},
	} {
		eff, err := r.Resolve(Request{Forced: id}, cat)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !reflect.DeepEqual(eff.Modules, want) {
			t.Errorf("%s: Modules = %+v, want %+v", id, eff.Modules, want)
		}
	}
}

func TestModulesIsOff(t *testing.T) {
	m := Modules{Mode: modules.Full, Off: []string{"memory", "profile"}}
	for mod, want := range map[string]bool{"memory": true, "profile": true, "Memory": false, "": false, "notes": false, "memory_off": false} {
		if got := m.IsOff(mod); got != want {
			t.Errorf("IsOff(%q) = %v, want %v", mod, got, want)
		}
	}
	if (Modules{}).IsOff("memory") {
		t.Error("nothing is off by default")
	}
}

// TestBuiltinDefinitions parses the seed's protocol files, where they are in this tree, and checks
// what the contract says of them: they validate, keep the client's system messages, allow the
// declared tools, have the module modes of their id, and only system refuses client selection.
func TestBuiltinDefinitions(t *testing.T) {
	dir := filepath.Join("..", "store", "builtin", "protocols")
	modes := map[string]modules.Mode{"public": modules.Minimal, "tech": modules.Minimal, "neutral": modules.Standard, "private": modules.Full, "system": modules.Full}
	for id, mode := range modes {
		body, err := os.ReadFile(filepath.Join(dir, id+".json"))
		if os.IsNotExist(err) {
			t.Skipf("no built-in definitions at %s", dir)
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParseProtocol(body)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if p.ID != id || p.Extends != "" {
			t.Errorf("%s: id %q extends %q", id, p.ID, p.Extends)
		}
		if got := modulesOf(p.Scope, p.ID).Mode; got != mode {
			t.Errorf("%s: mode %v, want %v", id, got, mode)
		}
		if p.ClientSystem != ClientSystemKeep {
			t.Errorf("%s: clientSystem %q, want keep", id, p.ClientSystem)
		}
		if !reflect.DeepEqual(p.Tools.Allow, []string{"*"}) || len(p.Tools.Deny) != 0 {
			t.Errorf("%s: tools %+v, want every declared tool", id, p.Tools)
		}
		if p.AllowClientSelection != (id != "system") {
			t.Errorf("%s: allowClientSelection = %v", id, p.AllowClientSelection)
		}
	}
}

func TestCheckExtends(t *testing.T) {
	t.Parallel()
	p := func(id, extends string) []byte {
		return []byte(`{"id":"` + id + `","extends":"` + extends + `","promptTemplate":{"base":"b"}}`)
	}
	active := map[string][]byte{
		"base": p("base", ""), "wf": p("wf", "base"), "other": p("other", ""),
		"a": p("a", "b"), "b": p("b", "a"), // an old cycle: reported only when a or b changes
	}
	for _, tc := range []struct {
		name    string
		changed []string
		want    []string
	}{
		{"unchanged workflows are not looked at", []string{"base", "other"}, nil},
		{"a workflow of a protocol", []string{"wf"}, nil},
		{"cycle", []string{"a"}, []string{`policy: protocol "a": extends: "b" extends "a" in turn, a cycle`}},
	} {
		err := CheckExtends(active, tc.changed)
		if (err == nil) != (len(tc.want) == 0) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", tc.name, err, w)
			}
		}
	}
	// base gains extends while wf extends it; wf2 extends wf, a workflow.
	active["base"] = p("base", "other")
	active["wf2"] = p("wf2", "wf")
	err := CheckExtends(active, []string{"base", "wf2"})
	for _, w := range []string{
		`policy: protocol "base": extends: protocol "wf" extends "base", and a workflow's base cannot be a workflow itself (one level of extends): point "wf"'s extends at another protocol first, or leave extends out of "base"`,
		`policy: protocol "wf2": extends: "wf" is itself a workflow (it extends "base"); one level of extends is supported: extend "base" instead`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("got %v, want %q", err, w)
		}
	}
}

// TestParseProtocolRuleNumbers: a number of an argument rule must be one a float64 holds as
// written (the rules read their numbers as float64); the error names the field.
func TestParseProtocolRuleNumbers(t *testing.T) {
	t.Parallel()
	def := func(rule string) []byte {
		return []byte(`{"id": "bank", "promptTemplate": {"base": "b"}, "toolCalls": {"rules": [` + rule + `]}}`)
	}
	for _, ok := range []string{
		`{"tool": "pay", "path": "n", "max": 100, "min": 0.1}`,
		`{"tool": "pay", "path": "n", "oneOf": [9007199254740992, 1e2, "x", -2.5]}`,
		`{"tool": "pay", "path": "n", "not": {"max": 0.30000000000000004}}`,
	} {
		if _, err := ParseProtocol(def(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for rule, field := range map[string]string{
		`{"tool": "pay", "path": "n", "max": 9007199254740993}`:             "toolCalls.rules[0].max:",
		`{"tool": "pay", "path": "n", "min": 0.10000000000000001}`:          "toolCalls.rules[0].min:",
		`{"tool": "pay", "path": "n", "oneOf": [1, 12345678901234567890]}`:  "toolCalls.rules[0].oneOf[1]:",
		`{"tool": "pay", "path": "n", "not": {"max": 1.00000000000000001}}`: "toolCalls.rules[0].not.max:",
	} {
		if _, err := ParseProtocol(def(rule)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", rule, err, field)
		}
	}
}

package policy

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/policy/vet"
)

// catalog is a fake Catalog: the active definitions by id.
type catalog map[string]*Protocol

func (c catalog) Protocol(id string) (*Protocol, bool) {
	p, ok := c[id]
	return p, ok
}

// mustProtocol parses a definition the way the store does, and stamps its version.
func mustProtocol(t testing.TB, version int, def string) *Protocol {
	t.Helper()
	p, err := ParseProtocol([]byte(def))
	if err != nil {
		t.Fatalf("ParseProtocol(%s): %v", def, err)
	}
	p.Version = version
	return p
}

// The catalog's definitions. Built-ins name no module mode, so the per-id defaults apply.
const (
	defPublic = `{"id": "public", "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "PUBLIC RULES"}},
		"allowClientSelection": true, "clientSystem": "keep", "tools": {"allow": ["*"]}}`
	defTech = `{"id": "tech", "extends": "", "description": "engineering assistants",
		"promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "  - cite sources\n- be exact\n"}},
		"scope": [], "allowClientSelection": true, "clientSystem": "keep",
		"directives": ["Answer in the user's language."],
		"tools": {"allow": ["search_*", "web_fetch", "read_file", "run_shell"], "deny": ["search_internal"]},
		"toolCalls": {"onViolation": "refuse",
			"rules": [{"tool": "web_fetch", "path": "url", "pattern": "^https://docs\\.example\\.com/"}]}}`
	defNeutral = `{"id": "neutral", "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "NEUTRAL RULES"}},
		"allowClientSelection": true, "tools": {"allow": ["*"], "deny": []}}`
	defPrivate = `{"id": "private", "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "PRIVATE RULES"}},
		"scope": ["observer"], "allowClientSelection": true, "tools": {"allow": ["*"]}}`
	defSystem = `{"id": "system", "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "SYSTEM RULES"}},
		"scope": ["observer"], "allowClientSelection": false, "tools": {"allow": ["*"]}}`
	defCodeReview = `{"id": "code_review", "extends": "tech",
		"promptTemplate": {"overrides": {"rules": "- Review diffs line by line."}},
		"scope": ["prompt_modules:full", "prompt_modules:memory_off"], "allowClientSelection": true,
		"directives": ["Quote the line you comment on."],
		"tools": {"allow": ["search_*", "read_file", "write_file"], "deny": ["search_web"]},
		"toolCalls": {"onViolation": "audit", "atomicParallelCalls": true,
			"rules": [{"tool": "read_file", "path": "path", "pattern": "^src/"}]}}`
	defOps = `{"id": "ops", "extends": "system", "promptTemplate": {"overrides": {"rules": "- Page the on-call."}},
		"allowClientSelection": true, "tools": {"allow": ["*"]}}`
	defStrictReview = `{"id": "strict_review", "extends": "tech", "promptTemplate": {"base": "base_legacy_v1"},
		"clientSystem": "drop", "allowClientSelection": true, "toolCalls": {"onViolation": "error"}}`
	defDiary = `{"id": "diary", "extends": "private", "scope": ["prompt_modules:standard", "prompt_modules:profile_off"],
		"allowClientSelection": true, "tools": {"allow": ["*"]}}`
	defBillingOnly = `{"id": "billing_only", "extends": "private", "scope": ["billing", "observer_extra"],
		"allowClientSelection": true}`
	defExact = `{"id": "exact", "promptTemplate": {"base": "base_tool_call_v2"}, "allowClientSelection": true,
		"tools": {"allow": ["search"]}}`
	defNoTools = `{"id": "no_tools", "promptTemplate": {"base": "base_tool_call_v2"}, "allowClientSelection": true}`
	defNested  = `{"id": "nested", "extends": "code_review", "allowClientSelection": true}`
	defAudited = `{"id": "audited", "promptTemplate": {"base": "base_tool_call_v2"}, "allowClientSelection": true,
		"scope": ["prompt_modules:full"], "tools": {"allow": ["*"]}, "toolCalls": {"onViolation": "audit", "atomicParallelCalls": true}}`
	defAuditedWF = `{"id": "audited_wf", "extends": "audited", "allowClientSelection": true,
		"toolCalls": {"onViolation": "refuse"}}`
)

func testCatalog(t testing.TB) catalog {
	t.Helper()
	c := catalog{}
	for _, d := range []struct {
		version int
		def     string
	}{
		{1, defPublic}, {3, defTech}, {1, defNeutral}, {2, defPrivate}, {5, defSystem},
		{7, defCodeReview}, {4, defOps}, {1, defStrictReview}, {1, defDiary}, {1, defBillingOnly},
		{1, defExact}, {1, defNoTools}, {1, defNested}, {1, defAudited}, {1, defAuditedWF},
	} {
		p := mustProtocol(t, d.version, d.def)
		c[p.ID] = p
	}
	return c
}

// mustConfig decodes the policy part of a config file, strictly, and validates it.
func mustConfig(t testing.TB, src string) Config {
	t.Helper()
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("decode config: %v", err)
	}
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("config: %v", errors.Join(errs...))
	}
	return c
}

// keyHash is sha256("test").
const keyHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// routedConfig has one route per kind of match; first match wins.
const routedConfig = `defaultProtocol: public
routes:
  - match: {apiKeySha256: "` + keyHash + `"}
    protocol: private
  - match: {header: {X-Team: "pay*"}}
    protocol: public
    allowClientProtocol: true
  - match: {model: "gpt-4o*"}
    protocol: tech
  - match: {path: /v1/responses}
    protocol: neutral
    allowClientProtocol: false
  - match: {header: {x-ops: "1"}}
    protocol: system
  - match: {header: {X-Review: "yes"}}
    protocol: code_review
  - match: {header: {X-Ghost: "yes"}}
    protocol: ghost
`

type resolveCase struct {
	name     string
	req      Request
	wantID   string
	wantBase string
	wantCode string // "": no error
	wantMsg  string // checked when set
}

func runResolve(t *testing.T, r *Router, cat Catalog, tests []resolveCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eff, err := r.Resolve(tc.req, cat)
			if tc.wantCode != "" {
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("Resolve(%+v) = %+v, %v; want *Error %s", tc.req, eff, err, tc.wantCode)
				}
				if pe.Code != tc.wantCode {
					t.Errorf("Resolve(%+v) error = %s (%s), want %s", tc.req, pe.Code, pe.Message, tc.wantCode)
				}
				if tc.wantMsg != "" && pe.Message != tc.wantMsg {
					t.Errorf("message = %q, want %q", pe.Message, tc.wantMsg)
				}
				if err.Error() != "policy: "+pe.Message {
					t.Errorf("Error() = %q, want the policy prefix", err.Error())
				}
				if eff != nil {
					t.Errorf("an error came with an Effective: %+v", eff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%+v): %v", tc.req, err)
			}
			if eff.ID != tc.wantID || eff.BaseID != tc.wantBase {
				t.Errorf("Resolve(%+v) = %s on %s, want %s on %s", tc.req, eff.ID, eff.BaseID, tc.wantID, tc.wantBase)
			}
			if eff.Workflow != (tc.wantID != tc.wantBase) {
				t.Errorf("Workflow = %v for %s on %s", eff.Workflow, eff.ID, eff.BaseID)
			}
		})
	}
}

func TestResolveWithoutRoutes(t *testing.T) {
	cat := testCatalog(t)
	r := NewRouter(mustConfig(t, ""))
	runResolve(t, r, cat, []resolveCase{
		{name: "default protocol is neutral", req: Request{Path: "/v1/chat/completions", Model: "gpt-4o"}, wantID: "neutral", wantBase: "neutral"},
		{name: "client chooses tech", req: Request{ClientProtocol: "tech"}, wantID: "tech", wantBase: "tech"},
		{name: "client chooses the default", req: Request{ClientProtocol: "neutral"}, wantID: "neutral", wantBase: "neutral"},
		{name: "client chooses private", req: Request{ClientProtocol: "private"}, wantID: "private", wantBase: "private"},
		{
			name: "unknown protocol", req: Request{ClientProtocol: "nope"},
			wantCode: "unknown_protocol", wantMsg: `unknown protocol "nope"`,
		},
		{name: "ids are case-sensitive", req: Request{ClientProtocol: "Tech"}, wantCode: "unknown_protocol"},
		{name: "id with trailing space", req: Request{ClientProtocol: "tech "}, wantCode: "unknown_protocol"},
		{
			name: "system is not client-selectable", req: Request{ClientProtocol: "system"},
			wantCode: "protocol_not_allowed", wantMsg: `protocol "system" does not allow client selection`,
		},
		{name: "workflow via the field only runs on its base", req: Request{ClientWorkflow: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{name: "workflow with its base", req: Request{ClientProtocol: "tech", ClientWorkflow: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{
			name: "workflow on another base", req: Request{ClientProtocol: "public", ClientWorkflow: "code_review"},
			wantCode: "protocol_not_allowed",
			wantMsg:  `workflow "code_review" extends "tech", not the request's protocol "public"`,
		},
		{
			name: "unknown workflow", req: Request{ClientWorkflow: "nope"},
			wantCode: "unknown_protocol", wantMsg: `unknown workflow "nope"`,
		},
		{
			name: "unknown workflow with a protocol", req: Request{ClientProtocol: "tech", ClientWorkflow: "nope"},
			wantCode: "unknown_protocol", wantMsg: `unknown workflow "nope"`,
		},
		{
			name: "a protocol named as workflow", req: Request{ClientWorkflow: "tech"},
			wantCode: "unknown_protocol", wantMsg: `"tech" is not a workflow protocol (it has no extends)`,
		},
		{
			name: "a protocol named as workflow, with it as protocol", req: Request{ClientProtocol: "tech", ClientWorkflow: "tech"},
			wantCode: "unknown_protocol", wantMsg: `"tech" is not a workflow protocol (it has no extends)`,
		},
		{
			// The answer must not depend on whether the named protocol is client-selectable.
			name: "a non-selectable protocol named as workflow", req: Request{ClientWorkflow: "system"},
			wantCode: "unknown_protocol", wantMsg: `"system" is not a workflow protocol (it has no extends)`,
		},
		{
			name: "workflow on system cannot be chosen by the client", req: Request{ClientWorkflow: "ops"},
			wantCode: "protocol_not_allowed", wantMsg: `protocol "system" does not allow client selection`,
		},
		{
			// ops itself allows selection; naming it as the protocol must not reach system either.
			name: "workflow on system named as protocol", req: Request{ClientProtocol: "ops"},
			wantCode: "protocol_not_allowed", wantMsg: `protocol "system" does not allow client selection`,
		},
		{name: "workflow named as protocol", req: Request{ClientProtocol: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{
			name: "workflow named as both", req: Request{ClientProtocol: "code_review", ClientWorkflow: "code_review"},
			wantID: "code_review", wantBase: "tech",
		},
		{
			name: "workflow of a workflow", req: Request{ClientProtocol: "nested"},
			wantCode: "unknown_protocol",
			wantMsg:  `workflow "nested" extends "code_review", itself a workflow; only one level of extends is supported`,
		},
		{name: "forced system", req: Request{Forced: "system"}, wantID: "system", wantBase: "system"},
		{name: "forced beats the client", req: Request{Forced: "system", ClientProtocol: "tech"}, wantID: "system", wantBase: "system"},
		{name: "forced workflow on system", req: Request{Forced: "ops"}, wantID: "ops", wantBase: "system"},
		{name: "forced system with its workflow", req: Request{Forced: "system", ClientWorkflow: "ops"}, wantID: "ops", wantBase: "system"},
		{
			name: "forced unknown", req: Request{Forced: "ghost"},
			wantCode: "unknown_protocol", wantMsg: `unknown protocol "ghost"`,
		},
	})
}

func TestResolveConfiguredDefault(t *testing.T) {
	cat := testCatalog(t)
	runResolve(t, NewRouter(mustConfig(t, "defaultProtocol: system\n")), cat, []resolveCase{
		{name: "operator's default may be system", req: Request{}, wantID: "system", wantBase: "system"},
		{name: "asking for the default is fine", req: Request{ClientProtocol: "system"}, wantID: "system", wantBase: "system"},
		{name: "its workflow is fine", req: Request{ClientWorkflow: "ops"}, wantID: "ops", wantBase: "system"},
		{name: "ops as protocol is fine", req: Request{ClientProtocol: "ops"}, wantID: "ops", wantBase: "system"},
		{name: "client may still choose", req: Request{ClientProtocol: "tech"}, wantID: "tech", wantBase: "tech"},
	})
	runResolve(t, NewRouter(mustConfig(t, "defaultProtocol: ghost\n")), cat, []resolveCase{
		{
			name: "undefined default", req: Request{},
			wantCode: "unknown_protocol", wantMsg: `the default protocol "ghost" is not defined`,
		},
		{name: "client choice avoids it", req: Request{ClientProtocol: "tech"}, wantID: "tech", wantBase: "tech"},
	})
	// A File built in code, without defaults applied, still means neutral.
	runResolve(t, NewRouter(Config{}), cat, []resolveCase{
		{name: "zero config", req: Request{}, wantID: "neutral", wantBase: "neutral"},
	})
}

func TestResolveRoutes(t *testing.T) {
	cat := testCatalog(t)
	r := NewRouter(mustConfig(t, routedConfig))
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	chat := "/v1/chat/completions"
	runResolve(t, r, cat, []resolveCase{
		{name: "no route: the configured default", req: Request{Path: chat, Model: "gpt-4", Header: h()}, wantID: "public", wantBase: "public"},
		{name: "nil header", req: Request{Path: chat, Model: "gpt-4"}, wantID: "public", wantBase: "public"},

		// By API key hash; the route pins its protocol.
		{name: "api key route", req: Request{APIKeySHA256: keyHash, Path: chat}, wantID: "private", wantBase: "private"},
		{name: "other api key", req: Request{APIKeySHA256: keyHash[:63] + "9", Path: chat}, wantID: "public", wantBase: "public"},
		{
			name: "pinned route refuses another protocol", req: Request{APIKeySHA256: keyHash, ClientProtocol: "tech"},
			wantCode: "protocol_not_allowed",
			wantMsg:  `protocol "tech" may not be chosen by the client on this route`,
		},
		{name: "pinned route accepts its own protocol", req: Request{APIKeySHA256: keyHash, ClientProtocol: "private"}, wantID: "private", wantBase: "private"},
		{
			name: "pinned route: unknown protocol is still 400", req: Request{APIKeySHA256: keyHash, ClientProtocol: "nope"},
			wantCode: "unknown_protocol",
		},
		{name: "pinned route: workflow on its protocol", req: Request{APIKeySHA256: keyHash, ClientWorkflow: "diary"}, wantID: "diary", wantBase: "private"},
		{
			name: "pinned route: workflow on another base", req: Request{APIKeySHA256: keyHash, ClientWorkflow: "code_review"},
			wantCode: "protocol_not_allowed",
			wantMsg:  `workflow "code_review" extends "tech", not the request's protocol "private"`,
		},

		// By header glob; this route lets the client choose.
		{name: "header route", req: Request{Header: h("X-Team", "payments")}, wantID: "public", wantBase: "public"},
		{name: "header glob", req: Request{Header: h("X-Team", "payroll")}, wantID: "public", wantBase: "public"},
		{name: "header value is case-sensitive", req: Request{Header: h("X-Team", "Payments"), Model: "gpt-4o"}, wantID: "tech", wantBase: "tech"},
		{name: "any of several values", req: Request{Header: h("X-Team", "ops", "X-Team", "payments"), Model: "gpt-4o"}, wantID: "public", wantBase: "public"},
		{name: "header name is canonicalised", req: Request{Header: http.Header{"X-Ops": {"1"}}}, wantID: "system", wantBase: "system"},
		{name: "open route honours the client", req: Request{Header: h("X-Team", "payments"), ClientProtocol: "tech"}, wantID: "tech", wantBase: "tech"},
		{
			name: "open route still refuses system", req: Request{Header: h("X-Team", "payments"), ClientProtocol: "system"},
			wantCode: "protocol_not_allowed", wantMsg: `protocol "system" does not allow client selection`,
		},
		{
			name: "open route: workflow via the field only", req: Request{Header: h("X-Team", "payments"), ClientWorkflow: "code_review"},
			wantID: "code_review", wantBase: "tech",
		},
		{
			name: "open route: workflow on system", req: Request{Header: h("X-Team", "payments"), ClientWorkflow: "ops"},
			wantCode: "protocol_not_allowed",
		},
		{
			name: "open route: workflow on system as protocol", req: Request{Header: h("X-Team", "payments"), ClientProtocol: "ops"},
			wantCode: "protocol_not_allowed", wantMsg: `protocol "system" does not allow client selection`,
		},

		// By model glob.
		{name: "model route", req: Request{Model: "gpt-4o"}, wantID: "tech", wantBase: "tech"},
		{name: "model glob", req: Request{Model: "gpt-4o-mini-2024-07-18"}, wantID: "tech", wantBase: "tech"},
		{name: "model glob needs its prefix", req: Request{Model: "my-gpt-4o"}, wantID: "public", wantBase: "public"},
		{name: "pinned model route: its workflow", req: Request{Model: "gpt-4o", ClientWorkflow: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{
			name: "pinned model route: workflow of another base", req: Request{Model: "gpt-4o", ClientWorkflow: "ops"},
			wantCode: "protocol_not_allowed",
			wantMsg:  `workflow "ops" extends "system", not the request's protocol "tech"`,
		},
		{
			name: "pinned model route: its workflow named as protocol", req: Request{Model: "gpt-4o", ClientProtocol: "code_review"},
			wantCode: "protocol_not_allowed",
		},

		// By path.
		{name: "path route", req: Request{Path: "/v1/responses"}, wantID: "neutral", wantBase: "neutral"},
		{name: "path is exact", req: Request{Path: "/v1/responses/abc"}, wantID: "public", wantBase: "public"},
		{
			name: "allowClientProtocol false pins", req: Request{Path: "/v1/responses", ClientProtocol: "public"},
			wantCode: "protocol_not_allowed",
		},

		// First match wins.
		{
			name:   "api key beats header and model",
			req:    Request{APIKeySHA256: keyHash, Header: h("X-Team", "payments"), Model: "gpt-4o", Path: "/v1/responses"},
			wantID: "private", wantBase: "private",
		},
		{name: "header beats model", req: Request{Header: h("X-Team", "payments"), Model: "gpt-4o"}, wantID: "public", wantBase: "public"},
		{name: "model beats path", req: Request{Model: "gpt-4o", Path: "/v1/responses"}, wantID: "tech", wantBase: "tech"},

		// A pinned system route.
		{name: "system route", req: Request{Header: h("X-Ops", "1")}, wantID: "system", wantBase: "system"},
		{name: "system route: its workflow", req: Request{Header: h("X-Ops", "1"), ClientWorkflow: "ops"}, wantID: "ops", wantBase: "system"},
		{name: "system route: system by name", req: Request{Header: h("X-Ops", "1"), ClientProtocol: "system"}, wantID: "system", wantBase: "system"},

		// A route may select a workflow.
		{name: "workflow route", req: Request{Header: h("X-Review", "yes")}, wantID: "code_review", wantBase: "tech"},
		{name: "workflow route: same workflow by name", req: Request{Header: h("X-Review", "yes"), ClientWorkflow: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{
			name: "route to an undefined protocol", req: Request{Header: h("X-Ghost", "yes")},
			wantCode: "unknown_protocol", wantMsg: `the protocol of the matching route "ghost" is not defined`,
		},

		// The operator's choice skips routes and checks.
		{name: "forced beats a pinned route", req: Request{APIKeySHA256: keyHash, Forced: "tech"}, wantID: "tech", wantBase: "tech"},
		{name: "forced system", req: Request{Model: "gpt-4o", Forced: "system"}, wantID: "system", wantBase: "system"},
	})
}

func TestResolveRouteMatchFields(t *testing.T) {
	// A route whose match sets all four fields needs all four.
	cfg := mustConfig(t, `routes:
  - match: {apiKeySha256: "`+keyHash+`", header: {X-Team: payments}, model: "gpt-4o*", path: /v1/chat/completions}
    protocol: private
`)
	r := NewRouter(cfg)
	cat := testCatalog(t)
	full := Request{
		APIKeySHA256: keyHash, Header: http.Header{"X-Team": {"payments"}}, Model: "gpt-4o", Path: "/v1/chat/completions",
	}
	runResolve(t, r, cat, []resolveCase{{name: "all fields", req: full, wantID: "private", wantBase: "private"}})
	for _, drop := range []string{"key", "header", "model", "path"} {
		req := full
		req.Header = full.Header.Clone()
		switch drop {
		case "key":
			req.APIKeySHA256 = ""
		case "header":
			req.Header.Del("X-Team")
		case "model":
			req.Model = "o3"
		case "path":
			req.Path = "/v1/responses"
		}
		runResolve(t, r, cat, []resolveCase{{name: "without " + drop, req: req, wantID: "neutral", wantBase: "neutral"}})
	}
}

func TestEffectiveOfProtocol(t *testing.T) {
	cat := testCatalog(t)
	eff, err := NewRouter(mustConfig(t, "")).Resolve(Request{ClientProtocol: "tech"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	want := &Effective{
		ID: "tech", BaseID: "tech", Version: 3, BaseVersion: 3, Workflow: false,
		Template:     "base_tool_call_v2",
		Rules:        "- cite sources\n- be exact",
		ClientSystem: ClientSystemKeep,
		Directives:   []string{"Answer in the user's language."},
		Modules:      Modules{Mode: modules.Minimal},
		OnViolation:  vet.ModeRefuse,
		ArgRules:     []vet.Rule{{Tool: "web_fetch", Path: "url", Check: vet.Check{Pattern: `^https://docs\.example\.com/`}}},
		Flow:         []flow.Spec{{}},
		allow:        [][]string{{"search_*", "web_fetch", "read_file", "run_shell"}},
		deny:         []string{"search_internal"},
	}
	if !reflect.DeepEqual(eff, want) {
		t.Errorf("Effective(tech)\n got %#v\nwant %#v", eff, want)
	}
}

func TestEffectiveOfWorkflow(t *testing.T) {
	cat := testCatalog(t)
	tech := *cat["tech"]
	eff, err := NewRouter(mustConfig(t, "")).Resolve(Request{ClientWorkflow: "code_review"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	want := &Effective{
		ID: "code_review", BaseID: "tech", Version: 7, BaseVersion: 3, Workflow: true,
		Template:     "base_tool_call_v2",
		Rules:        "- cite sources\n- be exact\n- Review diffs line by line.",
		ClientSystem: ClientSystemKeep,
		Directives:   []string{"Answer in the user's language.", "Quote the line you comment on."},
		// prompt_modules:full does not widen tech's minimal; the toggle adds up.
		Modules: Modules{Mode: modules.Minimal, Off: []string{"memory"}},
		// audit does not weaken tech's refuse.
		OnViolation: vet.ModeRefuse,
		Atomic:      true,
		ArgRules: []vet.Rule{
			{Tool: "web_fetch", Path: "url", Check: vet.Check{Pattern: `^https://docs\.example\.com/`}},
			{Tool: "read_file", Path: "path", Check: vet.Check{Pattern: `^src/`}},
		},
		Flow:  []flow.Spec{{}, {}},
		allow: [][]string{{"search_*", "web_fetch", "read_file", "run_shell"}, {"search_*", "read_file", "write_file"}},
		deny:  []string{"search_internal", "search_web"},
	}
	if !reflect.DeepEqual(eff, want) {
		t.Errorf("Effective(code_review)\n got %#v\nwant %#v", eff, want)
	}
	if !reflect.DeepEqual(*cat["tech"], tech) {
		t.Errorf("merging changed the catalog's base definition")
	}
	// Appending to the result must not reach the catalog's slices.
	eff.Directives[0] = "changed"
	eff.ArgRules[0].Pattern = "changed"
	if cat["tech"].Directives[0] != "Answer in the user's language." || cat["tech"].ToolCalls.Rules[0].Pattern == "changed" {
		t.Errorf("Effective shares slices with the catalog")
	}
}

func TestEffectiveMerge(t *testing.T) {
	cat := testCatalog(t)
	r := NewRouter(mustConfig(t, ""))
	resolve := func(req Request) *Effective {
		t.Helper()
		eff, err := r.Resolve(req, cat)
		if err != nil {
			t.Fatalf("Resolve(%+v): %v", req, err)
		}
		return eff
	}

	t.Run("stricter onViolation wins, template and clientSystem", func(t *testing.T) {
		eff := resolve(Request{ClientWorkflow: "strict_review"})
		if eff.OnViolation != vet.ModeError {
			t.Errorf("OnViolation = %q, want error (stricter than tech's refuse)", eff.OnViolation)
		}
		if eff.Template != "base_legacy_v1" {
			t.Errorf("Template = %q, want the workflow's base_legacy_v1", eff.Template)
		}
		if eff.ClientSystem != ClientSystemDrop {
			t.Errorf("ClientSystem = %q, want drop", eff.ClientSystem)
		}
		if eff.Rules != "- cite sources\n- be exact" {
			t.Errorf("Rules = %q, want the base's alone (the workflow has none)", eff.Rules)
		}
		if eff.Atomic {
			t.Error("Atomic = true, neither sets it")
		}
		if !reflect.DeepEqual(eff.allow, [][]string{cat["tech"].Tools.Allow}) {
			t.Errorf("a workflow without an allowlist must not add a level: %q", eff.allow)
		}
	})
	t.Run("refuse over audit", func(t *testing.T) {
		eff := resolve(Request{ClientWorkflow: "audited_wf"})
		if eff.OnViolation != vet.ModeRefuse {
			t.Errorf("OnViolation = %q, want refuse (stricter than the base's audit)", eff.OnViolation)
		}
		if !eff.Atomic {
			t.Error("Atomic = false; the base's atomicParallelCalls must stay on")
		}
		// audited is not a built-in id (default standard) but names full; a workflow naming no mode
		// keeps full.
		if eff.Modules.Mode != modules.Full {
			t.Errorf("Modules.Mode = %v, want the base's full", eff.Modules.Mode)
		}
		if got := resolve(Request{ClientProtocol: "audited"}).OnViolation; got != vet.ModeAudit {
			t.Errorf("audited alone: %q", got)
		}
		if got := resolve(Request{ClientProtocol: "public"}).OnViolation; got != vet.ModeRefuse {
			t.Errorf("unset onViolation = %q, want refuse", got)
		}
	})
	t.Run("workflow narrows modules, keeps base mode when it names none", func(t *testing.T) {
		eff := resolve(Request{ClientWorkflow: "diary"})
		if want := (Modules{Mode: modules.Standard, Off: []string{"profile"}}); !reflect.DeepEqual(eff.Modules, want) {
			t.Errorf("diary Modules = %+v, want %+v", eff.Modules, want)
		}
		eff = resolve(Request{ClientWorkflow: "billing_only"})
		if want := (Modules{Mode: modules.Full}); !reflect.DeepEqual(eff.Modules, want) {
			t.Errorf("billing_only Modules = %+v, want %+v (the workflow names no mode)", eff.Modules, want)
		}
		if eff.Rules != "PRIVATE RULES" || eff.Template != "base_tool_call_v2" {
			t.Errorf("billing_only Rules/Template = %q/%q", eff.Rules, eff.Template)
		}
	})
	t.Run("workflow cannot gain an access scope", func(t *testing.T) {
		if got := resolve(Request{ClientWorkflow: "billing_only"}).Scope; got != nil {
			t.Errorf("billing_only Scope = %q, want none (its base has only observer, which it does not list)", got)
		}
		if got := resolve(Request{ClientWorkflow: "diary"}).Scope; !reflect.DeepEqual(got, []string{"observer"}) {
			t.Errorf("diary Scope = %q, want the base's [observer]", got)
		}
	})
	t.Run("workflow on system", func(t *testing.T) {
		eff := resolve(Request{Forced: "ops"})
		want := &Effective{
			ID: "ops", BaseID: "system", Version: 4, BaseVersion: 5, Workflow: true,
			Template: "base_tool_call_v2", Rules: "SYSTEM RULES\n- Page the on-call.", ClientSystem: ClientSystemKeep,
			Modules: Modules{Mode: modules.Full}, Scope: []string{"observer"}, OnViolation: vet.ModeRefuse,
			Flow:  []flow.Spec{{}, {}},
			allow: [][]string{{"*"}, {"*"}},
		}
		if !reflect.DeepEqual(eff, want) {
			t.Errorf("Effective(ops)\n got %#v\nwant %#v", eff, want)
		}
	})
}

func TestStricter(t *testing.T) {
	for _, tc := range []struct {
		a, b vet.Mode
		want bool
	}{
		{vet.ModeError, vet.ModeRefuse, true},
		{vet.ModeError, vet.ModeAudit, true},
		{vet.ModeRefuse, vet.ModeAudit, true},
		{vet.ModeRefuse, vet.ModeError, false},
		{vet.ModeAudit, vet.ModeRefuse, false},
		{vet.ModeAudit, vet.ModeAudit, false},
		{"", vet.ModeAudit, false},
		{vet.ModeAudit, "", true},
	} {
		if got := stricter(tc.a, tc.b); got != tc.want {
			t.Errorf("stricter(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestResolveConcurrent runs Resolve from many goroutines on one Router (run with -race).
func TestResolveConcurrent(t *testing.T) {
	cat := testCatalog(t)
	r := NewRouter(mustConfig(t, routedConfig))
	done := make(chan error)
	for i := range 16 {
		go func() {
			var err error
			for range 200 {
				req := Request{Model: "gpt-4o", ClientWorkflow: "code_review"}
				if i%2 == 1 {
					req = Request{Header: http.Header{"X-Team": {"payments"}}, ClientProtocol: "private"}
				}
				var eff *Effective
				if eff, err = r.Resolve(req, cat); err != nil {
					break
				}
				eff.Directives = append(eff.Directives, "x")
				eff.Modules.Off = append(eff.Modules.Off, "y")
			}
			done <- err
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestResolveTwoWorkflowsRefused(t *testing.T) {
	cat := testCatalog(t)
	cat["style_review"] = mustProtocol(t, 1, `{"id": "style_review", "extends": "tech", "allowClientSelection": true}`)
	runResolve(t, NewRouter(mustConfig(t, "")), cat, []resolveCase{
		{name: "same workflow twice is fine", req: Request{ClientProtocol: "code_review", ClientWorkflow: "code_review"}, wantID: "code_review", wantBase: "tech"},
		{name: "two different workflows", req: Request{ClientProtocol: "code_review", ClientWorkflow: "style_review"}, wantCode: "unknown_protocol"},
	})
}

func TestMergeRenamesClashingRuleIDs(t *testing.T) {
	base := mustProtocol(t, 1, `{"id": "b", "promptTemplate": {"base": "t"}, "tools": {"allow": ["*"]},
		"toolCalls": {"rules": [{"id": "url", "tool": "fetch", "path": "url", "pattern": "^https://a/"}]}}`)
	wf := mustProtocol(t, 1, `{"id": "w", "extends": "b",
		"toolCalls": {"rules": [{"id": "url", "tool": "fetch", "path": "url", "pattern": "^https://a/x/"}, {"tool": "fetch", "path": "n", "pattern": "x"}]}}`)
	e := merge(base, wf)
	var ids []string
	for _, r := range e.ArgRules {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "url,w/url," {
		t.Fatalf("rule ids %q", ids)
	}
	if _, err := vet.CompileRules(e.ArgRules); err != nil {
		t.Fatalf("merged rules do not compile: %v", err)
	}
}

// TestStricterModes: a workflow can make onViolation stricter, never weaker; continue blocks the
// call as refuse does, so audit is weaker than it and refuse and error are stricter.
func TestStricterModes(t *testing.T) {
	order := []vet.Mode{vet.ModeAudit, vet.ModeContinue, vet.ModeRefuse, vet.ModeError}
	for i, a := range order {
		for j, b := range order {
			if got := stricter(a, b); got != (i > j) {
				t.Errorf("stricter(%s, %s) = %v", a, b, got)
			}
		}
	}
}

// TestEffectiveFlowOfWorkflow: a workflow's information-flow rules follow its base's, and together
// they compile to the rules of both, the workflow narrowing which tool outputs are trusted.
func TestEffectiveFlowOfWorkflow(t *testing.T) {
	t.Parallel()
	base := mustProtocol(t, 1, `{"id":"bank","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},"allowClientSelection":true,
	  "toolCalls":{"toolOutputs":{"trusted":["get_payees","get_balance"]},"provenance":[{"id":"payee","tool":"send_money","path":"to","as":"iban"}]}}`)
	wf := mustProtocol(t, 1, `{"id":"bank_small","extends":"bank",
	  "toolCalls":{"toolOutputs":{"trusted":["get_payees"]},"budgets":[{"id":"one","tool":"send_money","maxCalls":1}]}}`)
	eff, err := NewRouter(mustConfig(t, "defaultProtocol: bank\n")).Resolve(Request{ClientWorkflow: "bank_small"}, catalog{"bank": base, "bank_small": wf})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Flow) != 2 || len(eff.Flow[0].Provenance) != 1 || len(eff.Flow[1].Budgets) != 1 {
		t.Fatalf("Flow = %+v", eff.Flow)
	}
	p, err := flow.Compile(eff.Flow...)
	if err != nil {
		t.Fatal(err)
	}
	ex := p.Explain()
	if len(ex.Rules) != 2 || !p.ToolTrusted("get_payees") || p.ToolTrusted("get_balance") {
		t.Errorf("compiled: %+v; get_payees trusted %v, get_balance trusted %v", ex, p.ToolTrusted("get_payees"), p.ToolTrusted("get_balance"))
	}
}

// TestMergeSharesNoSpareCapacity checks that an Effective made once and kept for many requests
// cannot be written through: appending to any of its slices copies, so two requests adding their
// own directives (or rules) never see each other's.
func TestMergeSharesNoSpareCapacity(t *testing.T) {
	// Two base entries and one of the workflow: the plain append leaves room for a fourth in every
	// list.
	cat := catalog{
		"b": mustProtocol(t, 1, `{"id": "b", "promptTemplate": {"base": "t"}, "directives": ["one", "two"],
			"tools": {"allow": ["*"], "deny": ["x", "y"]},
			"toolCalls": {"rules": [{"tool": "a", "path": "p", "pattern": "^a"}, {"tool": "b", "path": "p", "pattern": "^b"}]}}`),
		"w": mustProtocol(t, 1, `{"id": "w", "extends": "b", "allowClientSelection": true, "directives": ["three"],
			"tools": {"deny": ["z"]}, "toolCalls": {"rules": [{"tool": "c", "path": "p", "pattern": "^c"}]}}`),
	}
	base, wf, err := NewRouter(mustConfig(t, "defaultProtocol: b\n")).Select(Request{ClientWorkflow: "w"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	if base.ID != "b" || wf == nil || wf.ID != "w" {
		t.Fatalf("Select = %v, %v", base, wf)
	}
	if m := merge(base, wf); cap(m.Directives) == len(m.Directives) {
		t.Fatal("the fixture no longer leaves spare capacity: the test below would prove nothing")
	}
	e := Merge(base, wf)
	if !reflect.DeepEqual(e, merge(base, wf)) {
		t.Error("Merge differs from the merge it clips")
	}
	a, b := append(e.Directives, "request A"), append(e.Directives, "request B")
	if a[len(a)-1] != "request A" || b[len(b)-1] != "request B" {
		t.Error("two appends to one Directives share a backing array")
	}
	for name, n := range map[string][2]int{
		"Directives": {len(e.Directives), cap(e.Directives)}, "Scope": {len(e.Scope), cap(e.Scope)},
		"ArgRules": {len(e.ArgRules), cap(e.ArgRules)}, "Flow": {len(e.Flow), cap(e.Flow)},
		"Modules.Off": {len(e.Modules.Off), cap(e.Modules.Off)}, "allow": {len(e.allow), cap(e.allow)}, "deny": {len(e.deny), cap(e.deny)},
	} {
		if n[0] != n[1] {
			t.Errorf("%s: len %d, cap %d: an append would write into the shared Effective", name, n[0], n[1])
		}
	}
}

// TestMergeMCPOnlyStricter: a protocol's mcp.requireModelCall is the base's; a workflow can require
// the join where the base does not say or waives it, never waive it; it can turn mcp.vetHostedCalls
// on, not off.
func TestMergeMCPOnlyStricter(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, c := range []struct {
		name     string
		base, wf *bool
		noWF     bool
		want     *bool
	}{
		{"base silent, no workflow", nil, nil, true, nil},
		{"base requires", &yes, nil, true, &yes},
		{"base waives", &no, nil, true, &no},
		{"workflow requires over a silent base", nil, &yes, false, &yes},
		{"workflow requires over a waiving base", &no, &yes, false, &yes},
		{"workflow cannot waive", &yes, &no, false, &yes},
		{"workflow waiving a silent base leaves it to the config", nil, &no, false, nil},
	} {
		base := &Protocol{ID: "b", MCP: MCP{RequireModelCall: c.base}}
		var wf *Protocol
		if !c.noWF {
			wf = &Protocol{ID: "w", Extends: "b", MCP: MCP{RequireModelCall: c.wf}}
		}
		got := Merge(base, wf).MCP.RequireModelCall
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: requireModelCall = %v, want %v", c.name, deref(got), deref(c.want))
		}
	}
	for _, c := range []struct{ base, wf, want bool }{{false, false, false}, {true, false, true}, {false, true, true}} {
		got := Merge(&Protocol{ID: "b", MCP: MCP{VetHostedCalls: c.base}}, &Protocol{ID: "w", Extends: "b", MCP: MCP{VetHostedCalls: c.wf}}).MCP.VetHostedCalls
		if got != c.want {
			t.Errorf("vetHostedCalls base %v, workflow %v: %v, want %v", c.base, c.wf, got, c.want)
		}
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

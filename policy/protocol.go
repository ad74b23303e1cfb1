// Package policy decides, for one request, which protocol applies (routes, client choice, default,
// workflow merge), which prompt modules are on, and which tools are allowed, with a reason for
// every removal. It owns the protocol definition format and its validation. It does not build
// prompts (assembly/) or vet tool calls in responses (policy/vet, driven by proxy/).
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/policy/vet"
)

// keySpec lists the exact field names of an object of a definition and the specs of nested objects.
type keySpec struct {
	fields map[string]*keySpec // nil spec: a leaf (or a value whose keys are not checked)
	array  bool                // the spec applies to each element of an array
}

func leaf() *keySpec { return nil }

// protocolKeys are the keys of a protocol definition, as the struct tags of Protocol spell them.
var protocolKeys = keysOf(reflect.TypeFor[Protocol]())

// keysOf is the key spec of the JSON that decodes into t: the json names of a struct's fields
// (those of an embedded struct promoted), each with the spec of its type; a slice of structs is an
// array of them. Other types, and types that decode themselves, are leaves (a map's keys are data,
// not field names).
func keysOf(t reflect.Type) *keySpec {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	array := false
	if t.Kind() == reflect.Slice {
		array, t = true, t.Elem()
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return leaf()
	}
	spec := &keySpec{fields: map[string]*keySpec{}, array: array}
	addKeys(spec, t)
	return spec
}

// addKeys adds the json names of t's fields to spec.
func addKeys(spec *keySpec, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			addKeys(spec, f.Type)
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			spec.fields[name] = keysOf(f.Type)
		}
	}
}

// exactKeys reports the first key that is not spelled exactly as a field of spec.
func exactKeys(v gjson.Result, spec *keySpec, at string) error {
	if spec == nil {
		return nil
	}
	if spec.array {
		if !v.IsArray() {
			return nil // the decoder reports the type
		}
		var err error
		i := 0
		v.ForEach(func(_, el gjson.Result) bool {
			err = exactKeys(el, &keySpec{fields: spec.fields}, fmt.Sprintf("%s[%d]", at, i))
			i++
			return err == nil
		})
		return err
	}
	if !v.IsObject() {
		return nil
	}
	var err error
	v.ForEach(func(k, val gjson.Result) bool {
		sub, ok := spec.fields[k.String()]
		if !ok {
			err = fmt.Errorf("unknown field %q%s", k.String(), where(at))
			return false
		}
		err = exactKeys(val, sub, strings.TrimPrefix(at+"."+k.String(), "."))
		return err == nil
	})
	return err
}

func where(at string) string {
	if at == "" {
		return ""
	}
	return " in " + at
}

// Client-system handling of a protocol.
const (
	ClientSystemKeep = "keep"
	ClientSystemDrop = "drop"
)

// Protocol is one stored protocol definition, as the operator writes it.
type Protocol struct {
	ID                   string         `json:"id"`
	Extends              string         `json:"extends,omitempty"`
	Description          string         `json:"description,omitempty"`
	PromptTemplate       PromptTemplate `json:"promptTemplate"`
	Scope                []string       `json:"scope,omitempty"`
	AllowClientSelection bool           `json:"allowClientSelection"`
	ClientSystem         string         `json:"clientSystem,omitempty"`
	Directives           []string       `json:"directives,omitempty"`
	Tools                ToolList       `json:"tools"`
	ToolCalls            ToolCalls      `json:"toolCalls"`
	MCP                  MCP            `json:"mcp,omitzero"`

	// Version is the stored version this definition was read from (not part of the JSON).
	Version int `json:"-"`
}

// PromptTemplate names the base template and the protocol's overrides.
type PromptTemplate struct {
	Base      string    `json:"base"`
	Overrides Overrides `json:"overrides"`
}

// Overrides are the protocol's contributions to the template.
type Overrides struct {
	// Rules fill {{protocol_rules}}, or are appended to a legacy template.
	Rules string `json:"rules"`
}

// ToolList is a protocol's allowlist: names or globs; "*" is every tool the client declares.
type ToolList struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// ToolCalls is the response-side policy: the argument rules of each call, and the
// information-flow rules (flow.Spec, whose fields sit beside these in the JSON).
type ToolCalls struct {
	OnViolation         vet.Mode   `json:"onViolation,omitempty"`
	AtomicParallelCalls bool       `json:"atomicParallelCalls,omitempty"`
	Rules               []vet.Rule `json:"rules,omitempty"`
	flow.Spec
}

// MCP is a protocol's own policy for MCP traffic; what it leaves out, the config's mcp section
// decides. A workflow can only make it stricter.
type MCP struct {
	// RequireModelCall refuses an MCP tools/call on the MCP door that no model call released (the
	// same tool, arguments and conversation, within mcp.joinWindow); nil leaves it to
	// mcp.requireModelCall.
	RequireModelCall *bool `json:"requireModelCall,omitempty"`
	// VetHostedCalls makes the MCP servers the upstream runs for a Responses request (tools of type
	// mcp) ask for approval of every call (require_approval: "always"), and promptgate answer each
	// approval request itself: approved where the call passes the protocol's rules as a call of
	// tool "mcp", denied otherwise.
	VetHostedCalls bool `json:"vetHostedCalls,omitempty"`
}

var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	scopeModules = regexp.MustCompile(`^prompt_modules:(minimal|standard|full|[A-Za-z0-9_.-]+_off)$`)
)

// ParseProtocol decodes a definition strictly (unknown fields are errors) and validates it.
func ParseProtocol(body []byte) (*Protocol, error) {
	if err := jsoncheck.Object(body, jsoncheck.Limits{}); err != nil {
		var je *jsoncheck.Error
		if errors.As(err, &je) { // the operator's own definition: name the key
			return nil, errors.New("policy: protocol definition: " + je.QuotedError())
		}
		return nil, fmt.Errorf("policy: protocol definition: %w", err)
	}
	// encoding/json matches field names case-insensitively; a definition must spell them exactly.
	if err := exactKeys(gjson.ParseBytes(body), protocolKeys, ""); err != nil {
		return nil, fmt.Errorf("policy: protocol definition: %w", err)
	}
	if err := ruleNumbers(gjson.GetBytes(body, "toolCalls.rules")); err != nil {
		return nil, fmt.Errorf("policy: protocol definition: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var p Protocol
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: protocol definition: %w", typeError(body, err))
	}
	if len(bytes.Trim(body[dec.InputOffset():], " \t\r\n")) > 0 { // dec.More misses a stray } or ]
		return nil, errors.New("policy: protocol definition: trailing data after the object")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate returns every problem joined, each naming the field.
func (p *Protocol) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("policy: protocol %q: %s: %s", p.ID, field, fmt.Sprintf(format, args...)))
	}
	if !idPattern.MatchString(p.ID) {
		bad("id", "%q: use 1-64 letters, digits, _ . -", p.ID)
	}
	if p.Extends != "" {
		if !idPattern.MatchString(p.Extends) {
			bad("extends", "%q is not a protocol id", p.Extends)
		}
		if p.Extends == p.ID {
			bad("extends", "a protocol cannot extend itself")
		}
	}
	if p.PromptTemplate.Base == "" && p.Extends == "" {
		bad("promptTemplate.base", "missing: name a template, e.g. base_tool_call_v2")
	}
	if p.PromptTemplate.Base != "" && !idPattern.MatchString(p.PromptTemplate.Base) {
		bad("promptTemplate.base", "%q is not a template name", p.PromptTemplate.Base)
	}
	if strings.Contains(p.PromptTemplate.Overrides.Rules, "{{") {
		bad("promptTemplate.overrides.rules", "placeholders are not allowed in rules")
	}
	for i, s := range p.Scope {
		if strings.HasPrefix(s, "prompt_modules:") && !scopeModules.MatchString(s) {
			bad(fmt.Sprintf("scope[%d]", i), "%q: use prompt_modules:minimal|standard|full or prompt_modules:<module>_off", s)
		}
	}
	switch p.ClientSystem {
	case "", ClientSystemKeep, ClientSystemDrop:
	default:
		bad("clientSystem", "%q: use keep or drop", p.ClientSystem)
	}
	for i, d := range p.Directives {
		if strings.Contains(d, "{{") {
			bad(fmt.Sprintf("directives[%d]", i), "placeholders are not allowed in directives")
		}
	}
	for _, l := range []struct {
		name  string
		globs []string
	}{{"tools.allow", p.Tools.Allow}, {"tools.deny", p.Tools.Deny}} {
		for i, g := range l.globs {
			if g == "" {
				bad(fmt.Sprintf("%s[%d]", l.name, i), "empty name")
			} else if _, err := path.Match(g, ""); err != nil {
				bad(fmt.Sprintf("%s[%d]", l.name, i), "bad glob %q: %v", g, err)
			}
		}
	}
	switch p.ToolCalls.OnViolation {
	case "", vet.ModeRefuse, vet.ModeError, vet.ModeAudit, vet.ModeContinue:
	default:
		bad("toolCalls.onViolation", "%q: use refuse, error, audit or continue", p.ToolCalls.OnViolation)
	}
	if _, err := vet.CompileRules(p.ToolCalls.Rules); err != nil {
		bad("toolCalls", "%v", err)
	}
	if err := p.ToolCalls.Spec.Validate(); err != nil {
		var each interface{ Unwrap() []error }
		if errors.As(err, &each) {
			for _, e := range each.Unwrap() {
				bad("toolCalls."+strings.SplitN(e.Error(), ": ", 2)[0], "%s", strings.SplitN(e.Error(), ": ", 2)[1])
			}
		} else {
			bad("toolCalls", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// CheckExtends checks the workflow links that a change of the protocols in changed leaves among the
// active protocol definitions (id → body, the state after the change): a changed workflow may not
// extend a protocol that is itself a workflow (one level of extends; this also rules out cycles),
// and a changed protocol that is a workflow may not be the base of another active protocol, whose
// requests would then fail. Problems that involve no changed protocol are not reported. Errors name
// the protocol, the field and the fix, one per problem, sorted and joined.
func CheckExtends(active map[string][]byte, changed []string) error {
	extends := make(map[string]string, len(active))
	for id, body := range active {
		if e := gjson.GetBytes(body, "extends").String(); e != "" {
			extends[id] = e
		}
	}
	var msgs []string
	for _, id := range changed {
		base, ok := extends[id]
		if !ok {
			continue
		}
		switch next, isWorkflow := extends[base]; {
		case next == id:
			msgs = append(msgs, fmt.Sprintf("policy: protocol %q: extends: %q extends %q in turn, a cycle; one level of extends is supported: leave extends out of one of them", id, base, id))
		case isWorkflow:
			msgs = append(msgs, fmt.Sprintf("policy: protocol %q: extends: %q is itself a workflow (it extends %q); one level of extends is supported: extend %q instead", id, base, next, next))
		}
		for _, other := range slices.Sorted(maps.Keys(extends)) {
			if other != id && extends[other] == id && extends[id] != other {
				msgs = append(msgs, fmt.Sprintf("policy: protocol %q: extends: protocol %q extends %q, and a workflow's base cannot be a workflow itself (one level of extends): point %q's extends at another protocol first, or leave extends out of %q", id, other, id, other, id))
			}
		}
	}
	slices.Sort(msgs)
	errs := make([]error, 0, len(msgs))
	for _, m := range slices.Compact(msgs) {
		errs = append(errs, errors.New(m))
	}
	return errors.Join(errs...)
}

// defaultMode is the seed's default per built-in protocol id.
func defaultMode(id string) modules.Mode {
	switch id {
	case "public", "tech":
		return modules.Minimal
	case "private", "system":
		return modules.Full
	}
	return modules.Standard
}

// Modules is the module mode and the switched-off modules of a protocol.
type Modules struct {
	Mode modules.Mode
	Off  []string // module names switched off by prompt_modules:<module>_off, sorted as written
}

// IsOff reports whether a module is switched off.
func (m Modules) IsOff(module string) bool {
	for _, o := range m.Off {
		if o == module {
			return true
		}
	}
	return false
}

// modulesOf reads a scope list; fallbackID chooses the default mode when the scope names none.
func modulesOf(scope []string, fallbackID string) Modules {
	var m Modules
	for _, s := range scope {
		v, ok := strings.CutPrefix(s, "prompt_modules:")
		if !ok {
			continue
		}
		if mode, ok := modules.Parse(v); ok {
			m.Mode = mode
		} else if mod, ok := strings.CutSuffix(v, "_off"); ok {
			m.Off = append(m.Off, mod)
		}
	}
	if m.Mode == "" {
		m.Mode = defaultMode(fallbackID)
	}
	return m
}

// hasScope reports whether the scope list holds s exactly.
func hasScope(scope []string, s string) bool {
	for _, x := range scope {
		if x == s {
			return true
		}
	}
	return false
}

// Package vet decides whether one tool call that a model returned may reach the client: its name is
// in the request's allowed set (exact match), its arguments are one valid JSON object without
// duplicate keys or keys that differ only in letter case, they satisfy the JSON Schema the client
// declared for the tool, and they pass the protocol's argument rules. It also holds the
// surface-neutral shape of a call being assembled from a response (Call) and of a decision
// (Decision), so the Chat Completions, Responses and Anthropic Messages surfaces vet the same way.
//
// It owns the checks, the stable reason strings and the notice text. It does not read or rewrite
// responses or streams (the surfaces under proxy/surface do), does not choose the allowed set or
// the mode (policy/ does), and does not store decisions (policy/audit does).
package vet

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Mode is what happens to a call that breaks the policy (a protocol's toolCalls.onViolation).
type Mode string

// The modes.
const (
	// ModeRefuse removes the bad call and tells the client in the message text. The default.
	ModeRefuse Mode = "refuse"
	// ModeError answers the request with 403 tool_call_blocked (in a stream: an error event).
	ModeError Mode = "error"
	// ModeAudit lets the call through and records the violation.
	ModeAudit Mode = "audit"
	// ModeContinue blocks the call as refuse does; the proxy then answers it itself with a refusal
	// tool result and asks the upstream again (policy/flow builds both), where it supports that.
	ModeContinue Mode = "continue"
)

// ParseMode reads a mode; "" is ModeRefuse.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeRefuse, nil
	case ModeRefuse, ModeError, ModeAudit, ModeContinue:
		return m, nil
	}
	return "", fmt.Errorf("vet: unknown mode %q: use refuse, error, audit or continue", s)
}

// Verdict is the outcome of vetting one call.
type Verdict = string

// The verdicts.
const (
	VerdictAllowed Verdict = "allowed"
	VerdictBlocked Verdict = "blocked"
	VerdictAudited Verdict = "audited" // broke the policy, let through in audit mode
	// VerdictHeld: withheld until the user confirms it (a Judge's verdict); the Notice takes its
	// place.
	VerdictHeld Verdict = "held"
	// VerdictConfirmed: released by the user's confirmation (a Judge's verdict).
	VerdictConfirmed Verdict = "confirmed"
)

// KindToolCall is the Kind of every Decision of this package.
const KindToolCall = "tool_call"

// Stable reasons. A reason never holds a key or a value of the arguments: it names the check and a
// position (a byte offset in the arguments, or a location in the tool's declared schema). Reasons
// built at run time are a stable head, a colon and the detail: "arguments are not valid json: ...",
// "arguments have two keys that differ only in letter case: ...", "arguments do not match schema:
// ..." and "rule NAME: ..."; the head alone is what metrics count.
const (
	ReasonNotAllowed      = "tool not allowed"
	ReasonNotObject       = "arguments must be a json object"
	ReasonNotString       = "arguments are not a string"
	ReasonSchemaCompile   = "schema does not compile"
	ReasonMissingID       = "missing call id"
	ReasonDuplicateID     = "duplicate call id"
	ReasonNameChanged     = "name changed mid-stream"
	ReasonBatch           = "another call of the batch was blocked"
	ReasonUnsupportedType = "unsupported tool call type"
	ReasonInvalidIndex    = "invalid tool call index"
	ReasonTooLarge        = "arguments too large"
	ReasonMalformedStream = "upstream event is not valid json"
	ReasonAfterRelease    = "fragment after the call was released"
	ReasonUnreadMember    = "the call has a member the vetting does not read"
)

const (
	reasonInvalidJSON    = "arguments are not valid json: "
	reasonCaseVariant    = "arguments have two keys that differ only in letter case: "
	reasonSchemaMismatch = "arguments do not match schema: "
	maxNameInNotice      = 64
	maxSchemaDetail      = 160
)

// Policy is everything needed to vet one response's calls; the proxy builds it once per request.
type Policy struct {
	// Allowed is the request's allowed set of tool names, compared exactly: no case folding,
	// trimming or Unicode normalisation. A nil map allows nothing.
	Allowed map[string]bool
	// Schemas maps a tool name to the JSON Schema the client declared for it (function.parameters).
	// A missing or empty schema accepts any object.
	Schemas map[string][]byte
	// Rules are the protocol's argument rules; nil means none.
	Rules *RuleSet
	// Mode is the protocol's onViolation; "" is ModeRefuse and an unknown value is ModeError.
	Mode Mode
	// Atomic (atomicParallelCalls) makes one bad call refuse every call of its choice.
	Atomic bool
	// MaxDepth caps the nesting of arguments; zero or negative is jsoncheck.DefaultMaxDepth.
	MaxDepth int
	// SchemaCache, when set, shares compiled schemas between checkers (by their bytes); nil
	// compiles each tool's schema once per checker.
	SchemaCache *SchemaCache
	// Judge, when not nil, judges every call that passed the checks above, in the order the calls
	// are vetted (the information-flow check of policy/flow, through the proxy).
	Judge Judge
}

// Judge is a second check of the calls that pass vetting: it judges a call by what lies outside it
// (the conversation around it). It must be safe for concurrent use.
type Judge interface {
	// Judge decides an allowed call (d holds its tool, id and arguments) and returns its decision:
	// d as it is, or with the Kind, Verdict (allowed, blocked, held or confirmed), Reason, Rule,
	// Notice and More of the rules it broke. The mode is applied after it: in audit mode a blocked
	// or held call is audited.
	Judge(d Decision) Decision
	// Size is about how many bytes the judge holds (a policy kept for later counts it).
	Size() int
}

// Decision is the outcome of vetting one call, for the decision log.
type Decision struct {
	Kind    string // KindToolCall
	Choice  int
	CallID  string
	Tool    string
	Verdict Verdict
	Reason  string // why the call broke the policy; "" when it did not
	Rule    string // the argument rule that failed: its id, or rules[i]; "" for other reasons
	// Args are the exact argument bytes that were vetted (the call's Args; nil when none were, as
	// for a call given up on before it completed). They are the caller's: the decision log keeps
	// only their digest unless the operator opted in, and they must not be changed or kept past the
	// record callback.
	Args []byte
	// Notice, when not "", is the text that replaces a held call (a Judge's, with its confirmation
	// code). It may quote argument values: it goes to the client only, never to a log.
	Notice string
	// More are further decisions on the same call (the other rules it broke, a confirmation's),
	// recorded after it; nil for most calls.
	More []Decision
}

// Blocked reports whether the call must not reach the client: blocked, or held for confirmation.
func (d Decision) Blocked() bool { return d.Verdict == VerdictBlocked || d.Verdict == VerdictHeld }

// Notice is the text that replaces a call that does not reach the client: a held call's own notice,
// else `[promptgate] blocked tool call NAME: REASON`. A name that is not a plain tool name
// (letters, digits, _ and -, at most 64 bytes) is shown quoted with Go escapes, so that look-alikes
// are visible and no control character gets through.
func Notice(d Decision) string {
	if d.Notice != "" {
		return d.Notice
	}
	return "[promptgate] blocked tool call " + DisplayName(d.Tool) + ": " + d.Reason
}

// DisplayName renders a tool name for a notice or an error message; see Notice.
func DisplayName(name string) string {
	plain := name != "" && len(name) <= maxNameInNotice
	for i := 0; plain && i < len(name); i++ {
		c := name[i]
		plain = c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if plain {
		return name
	}
	if utf8.RuneCountInString(name) > maxNameInNotice {
		n := 0
		for i := range name {
			if n == maxNameInNotice {
				name = name[:i]
				break
			}
			n++
		}
		return strconv.QuoteToASCII(name) + "…"
	}
	return strconv.QuoteToASCII(name)
}

// Checker vets the calls of one response. It compiles each tool's schema once, when the first call
// to that tool is vetted, and remembers the call ids it has seen. It is safe for concurrent use.
type Checker struct {
	p Policy

	mu sync.Mutex
	// schemas and ids are made at their first use: most answers carry no call.
	schemas map[string]*compiledSchema
	ids     map[int]map[string]bool // choice -> call ids seen
}

type compiledSchema struct {
	s    *jsonschema.Schema // nil when any object is accepted
	fast *subsetNode        // the subset validator of s; nil when s holds a keyword outside the subset
	err  error
}

// newCompiledSchema compiles a client-declared schema for the general engine and, where its
// keywords allow, for the subset validator.
func newCompiledSchema(raw []byte) *compiledSchema {
	s, err := compileSchema(raw)
	cs := &compiledSchema{s: s, err: err}
	if s != nil {
		cs.fast = compileSubset(s)
	}
	return cs
}

// NewChecker returns a Checker for p. p's maps must not change while the Checker is in use.
func NewChecker(p Policy) *Checker {
	switch p.Mode {
	case "":
		p.Mode = ModeRefuse
	case ModeRefuse, ModeError, ModeAudit, ModeContinue:
	default:
		p.Mode = ModeError // fail closed on a mode this code does not know
	}
	return &Checker{p: p}
}

// Mode is the effective mode.
func (c *Checker) Mode() Mode { return c.p.Mode }

// Allows reports whether name is in the allowed set (exact match).
func (c *Checker) Allows(name string) bool { return c.p.Allowed[name] }

// Atomic reports whether one bad call blocks every call of its choice.
func (c *Checker) Atomic() bool { return c.p.Atomic }

// Check vets a call's name and arguments (the raw argument JSON text): allowed name, one JSON
// object (no object in it, at any depth, holding two keys that are equal or differ only in letter
// case), the tool's schema, the argument rules, in that order. It returns the first violation's
// reason and, for an argument rule, the rule's name; ok is true when there is none.
//
// Keys that differ only in letter case are refused because the readers disagree on them: the
// schema, the rules and policy/flow read the exact key, while a tool that decodes with
// encoding/json into a struct (or .NET's web defaults) takes the last case-insensitive match.
func (c *Checker) Check(name string, args []byte) (reason, rule string, ok bool) {
	if !c.p.Allowed[name] {
		return ReasonNotAllowed, "", false
	}
	if len(bytes.TrimSpace(args)) == 0 {
		return reasonInvalidJSON + "empty", "", false
	}
	if err := jsoncheck.Object(args, jsoncheck.Limits{MaxDepth: c.p.MaxDepth, FoldedKeys: true, Float64Numbers: true}); err != nil {
		return argsReason(err), "", false
	}
	if r := c.checkSchema(name, args); r != "" {
		return r, "", false
	}
	if c.p.Rules != nil {
		if reason, rule := c.p.Rules.check(name, args); reason != "" {
			return reason, rule, false
		}
	}
	return "", "", true
}

// argsReason turns a jsoncheck error into a reason that holds no argument bytes.
func argsReason(err error) string {
	var je *jsoncheck.Error
	if !errors.As(err, &je) {
		return reasonInvalidJSON + "syntax error"
	}
	at := "at offset " + strconv.Itoa(je.Offset)
	switch je.Kind {
	case jsoncheck.NotObject:
		return ReasonNotObject
	case jsoncheck.CaseVariantKey:
		return reasonCaseVariant + at
	}
	// The offset, never the key: a duplicate key is the model's text.
	return reasonInvalidJSON + je.Kind.String() + " " + at
}

// Vet decides one assembled call: a problem found while assembling it, a missing call id or one
// that an earlier call of the same choice had (legacy function calls have none), then Check. The
// verdict follows the mode. Vet remembers every id it sees, so each call must be vetted once.
func (c *Checker) Vet(call *Call) Decision {
	d := Decision{Kind: KindToolCall, Choice: call.Choice, CallID: call.ID, Tool: call.Name, Args: call.Args}
	dup := !call.Legacy && call.ID != "" && c.seen(call.Choice, call.ID)
	switch {
	case call.problem != "":
		d.Reason = call.problem
	case !call.Legacy && call.ID == "":
		d.Reason = ReasonMissingID
	case dup:
		d.Reason = ReasonDuplicateID
	default:
		d.Reason, d.Rule, _ = c.Check(call.Name, call.Args)
	}
	return c.decide(d)
}

// decide gives d, whose Reason (and Rule) the checks set, its verdict: the Judge's on a call that
// passed them, then the mode's.
func (c *Checker) decide(d Decision) Decision {
	switch {
	case d.Reason == "" && c.p.Judge != nil:
		d.Verdict = VerdictAllowed
		j := c.p.Judge.Judge(d)
		j.Choice, j.CallID, j.Tool, j.Args = d.Choice, d.CallID, d.Tool, d.Args
		if c.p.Mode == ModeAudit && j.Blocked() {
			j.Verdict, j.Notice = VerdictAudited, ""
			for i := range j.More {
				if j.More[i].Blocked() {
					j.More[i].Verdict = VerdictAudited
				}
			}
		}
		return j
	case d.Reason == "":
		d.Verdict = VerdictAllowed
	case c.p.Mode == ModeAudit:
		d.Verdict = VerdictAudited
	default:
		d.Verdict = VerdictBlocked
	}
	return d
}

// Shadow judges again, under a second policy (a shadow version's), each call a Checker of the
// active policy decided, for the record only: it changes nothing of the active decision, and what
// it returns goes to no client. It is safe for concurrent use.
type Shadow struct{ c *Checker }

// NewShadow returns the Shadow of p. Its Judge must be one that spends and remembers nothing.
func NewShadow(p Policy) *Shadow { return &Shadow{c: NewChecker(p)} }

// Judge returns the decision the shadow policy takes on the call that active decided (active holds
// its tool, id and Args). The checks that do not depend on the policy (the call's assembly, its id,
// its arguments' shape and the client's schema) are not run again where the active decision shows
// their outcome; atomicParallelCalls is not applied (each call is judged alone).
func (s *Shadow) Judge(active Decision) Decision {
	d := Decision{Kind: KindToolCall, Choice: active.Choice, CallID: active.CallID, Tool: active.Tool, Args: active.Args}
	switch stepOf(active) {
	case stepCall:
		d.Reason = active.Reason
	case stepShape:
		d.Reason = active.Reason
		if !s.c.Allows(active.Tool) {
			d.Reason = ReasonNotAllowed
		}
	case stepPassed:
		switch {
		case !s.c.Allows(active.Tool):
			d.Reason = ReasonNotAllowed
		case s.c.p.Rules != nil:
			d.Reason, d.Rule = s.c.p.Rules.check(active.Tool, active.Args)
		}
	default:
		d.Reason, d.Rule, _ = s.c.Check(active.Tool, active.Args)
	}
	return s.c.decide(d)
}

// step is how far an active decision shows that a call got through the checks.
type step uint8

const (
	stepUnknown step = iota // not allowed, or refused with its batch: every check is run again
	stepCall                // the call itself is bad (assembly, id, no arguments): so under any policy
	stepShape               // allowed, its arguments' shape or the client's schema refused it
	stepPassed              // the shape and the schema passed (the argument rules or the Judge decided)
)

// stepOf reads how far the active decision d got, from its kind and its reason.
func stepOf(d Decision) step {
	r := d.Reason
	switch {
	case d.Args == nil:
		return stepCall
	case d.Kind != "" && d.Kind != KindToolCall, r == "", d.Rule != "":
		return stepPassed
	case r == ReasonNotAllowed, r == ReasonBatch:
		return stepUnknown
	case r == ReasonNotObject, r == ReasonSchemaCompile, strings.HasPrefix(r, reasonInvalidJSON),
		strings.HasPrefix(r, reasonCaseVariant), strings.HasPrefix(r, reasonSchemaMismatch):
		return stepShape
	}
	return stepCall
}

// NewRound forgets the call ids seen: promptgate answered every call of the answer so far itself
// (onViolation "continue"), none reached the client, and the upstream is asked again.
func (c *Checker) NewRound() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = nil
}

// VetBatch vets the calls of one choice together, in order. With Atomic set and a call blocked,
// every other call of the batch is blocked too, with ReasonBatch.
func (c *Checker) VetBatch(calls []*Call) []Decision {
	ds := make([]Decision, len(calls))
	blocked := false
	for i, call := range calls {
		ds[i] = c.Vet(call)
		blocked = blocked || ds[i].Blocked()
	}
	if blocked && c.p.Atomic {
		for i := range ds {
			if !ds[i].Blocked() {
				ds[i].Kind, ds[i].Verdict, ds[i].Reason, ds[i].Rule = KindToolCall, VerdictBlocked, ReasonBatch, ""
				ds[i].Notice, ds[i].More = "", nil
			}
		}
	}
	return ds
}

// seen records id for choice and reports whether it was there already.
func (c *Checker) seen(choice int, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[int]map[string]bool{}
	}
	m := c.ids[choice]
	if m == nil {
		m = map[string]bool{}
		c.ids[choice] = m
	}
	if m[id] {
		return true
	}
	m[id] = true
	return false
}

// checkSchema validates args (already checked by jsoncheck) against the tool's schema.
func (c *Checker) checkSchema(name string, args []byte) string {
	cs := c.schema(name)
	if cs.err != nil {
		return ReasonSchemaCompile
	}
	if cs.s == nil {
		return ""
	}
	verdict := subsetUnsure
	if cs.fast != nil {
		verdict = cs.fast.validate(args)
	}
	if verdict == subsetAccept {
		return ""
	}
	// The general engine decides what the subset validator cannot, and words every rejection.
	err := validateGeneral(cs.s, args)
	if err == nil {
		if verdict == subsetReject {
			return reasonSchemaMismatch + "invalid" // the engines disagree: block
		}
		return ""
	}
	var ve *jsonschema.ValidationError
	switch {
	case errors.Is(err, errValidatorFailed):
		return reasonSchemaMismatch + "the validator failed"
	case !errors.As(err, &ve):
		return reasonSchemaMismatch + "invalid"
	}
	return reasonSchemaMismatch + schemaDetail(ve)
}

// errValidatorFailed: jsonschema panicked on the arguments, as it does on a number that big.Rat
// cannot read (an exponent beyond a million) where a bound or multipleOf applies. The call is
// blocked.
var errValidatorFailed = errors.New("vet: schema: the validator failed")

// validateGeneral validates args with jsonschema; a panic of jsonschema's is errValidatorFailed.
func validateGeneral(s *jsonschema.Schema, args []byte) (err error) {
	defer func() {
		if recover() != nil {
			err = errValidatorFailed
		}
	}()
	return s.Validate(decodeArgs(args))
}

// schema returns the compiled schema of a tool, compiling it on first use.
func (c *Checker) schema(name string) *compiledSchema {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs, ok := c.schemas[name]; ok {
		return cs
	}
	cs := c.p.SchemaCache.compile(c.p.Schemas[name])
	if c.schemas == nil {
		c.schemas = map[string]*compiledSchema{}
	}
	c.schemas[name] = cs
	return cs
}

// refuseLoader keeps a client's schema from reading files or URLs through $ref.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, errors.New("vet: schemas may only refer to themselves")
}

var _ jsonschema.URLLoader = refuseLoader{}

const schemaURL = "urn:promptgate:tool-parameters"

// compileSchema compiles a client-declared schema; nil or blank means none.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("vet: schema: %w", err)
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(refuseLoader{})
	if err := comp.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("vet: schema: %w", err)
	}
	s, err := comp.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("vet: schema: %w", err)
	}
	return s, nil
}

// schemaDetail describes the first leaf error by what the client declared, never by what the model
// wrote: where, as the location of the failing keyword in the tool's schema ("#/properties/city"),
// and which keyword failed, with the schema's own words for the keywords whose message holds only
// what the schema says (types, required and dependent property names, enum and const values). The
// instance location and every message that could echo the instance (additional property names,
// pattern, bounds, formats, property names, ...) are left out.
func schemaDetail(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	where := "#"
	if _, frag, ok := strings.Cut(ve.SchemaURL, "#"); ok {
		where += frag
	}
	what := strings.Join(ve.ErrorKind.KeywordPath(), "/")
	switch ve.ErrorKind.(type) {
	case *kind.Type, *kind.Required, *kind.Enum, *kind.Const, *kind.FalseSchema, *kind.Not, *kind.Dependency, *kind.DependentRequired:
		what = ve.ErrorKind.LocalizedString(message.NewPrinter(language.English))
	case *kind.AdditionalProperties:
		what = "additional properties not allowed"
	}
	if what == "" {
		what = "invalid"
	}
	out := strings.Map(visible, "at "+where+": "+what)
	if len(out) > maxSchemaDetail {
		cut := maxSchemaDetail
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

// visible replaces control and format characters (line breaks, bidi controls) of a schema's words
// with U+FFFD, so that a reason stays one plain line.
func visible(r rune) rune {
	if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
		return utf8.RuneError
	}
	return r
}

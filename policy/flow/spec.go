package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/vet"
)

// Spec is the information-flow part of a protocol's toolCalls section: which tool outputs are
// trusted, and the rules that judge a call by the conversation around it. Its fields sit beside
// onViolation and rules in the definition's "toolCalls" object.
type Spec struct {
	// ToolOutputs says whose output is a trusted source for provenance.
	ToolOutputs ToolOutputs `json:"toolOutputs,omitzero"`
	// Sources are lists the operator writes, by name (list:NAME in a from list): values as the user
	// or the app would write them, such as known payees' IBANs. They are trusted.
	Sources map[string][]string `json:"sources,omitempty"`
	// Provenance rules require an argument's value to occur in the listed sources.
	Provenance []ProvenanceRule `json:"provenance,omitempty"`
	// Scan rules find the URLs, addresses and IBANs inside a string argument and check each.
	Scan []ScanRule `json:"scan,omitempty"`
	// Budgets cap the calls of a tool per conversation.
	Budgets []BudgetRule `json:"budgets,omitempty"`
	// Flows block, or hold for confirmation, tools once certain data is in the conversation.
	Flows []FlowRule `json:"flows,omitempty"`
	// Confirm configures the confirmation codes of held calls.
	Confirm ConfirmSpec `json:"confirm,omitzero"`
	// ContinueRounds bounds how often, with onViolation "continue", promptgate answers a refused
	// call itself and asks the upstream again within one request; 0 is DefaultContinueRounds.
	ContinueRounds int `json:"continueRounds,omitempty"`
}

// ToolOutputs lists the tools whose output is trusted (names or globs, as tools.allow: '*' and '?'
// stop at '/'; mcp:SERVER for an MCP server's), whole or in part. User and app messages are always
// trusted; other tool outputs, the runtime context and assistant text never are.
type ToolOutputs struct {
	// Trusted are the outputs trusted whole.
	Trusted []string `json:"trusted,omitempty"`
	// TrustedPaths trusts parts of outputs: for each tool (name, glob or mcp:SERVER), gjson paths
	// into the document it returned (JSON, else YAML), e.g. {"get_transactions": ["#.recipient",
	// "#.amount"]}. The rest of such an output is untrusted, and all of it when it does not parse
	// or a path finds nothing.
	TrustedPaths map[string][]string `json:"trustedPaths,omitempty"`
}

// ProvenanceRule requires the value at Path of a call's arguments to occur in the sources From (or,
// with Not, not to occur in Not.From). See docs/policy.md, "Provenance".
type ProvenanceRule struct {
	ID string `json:"id,omitempty"`
	// Tool is a tool name or glob ('/' is an ordinary character: a rule covers no less than it
	// says).
	Tool string `json:"tool"`
	// Path is a gjson path into the arguments, walked as policy/vet.Walk does ("to.#" for each).
	Path string `json:"path"`
	// As is how a value is compared: auto (default), email, host, url, iban, id or text.
	As string `json:"as,omitempty"`
	// Match, for a URL, compares its host ("host", the default) or the whole URL ("url").
	Match string `json:"match,omitempty"`
	// Schemes are the schemes a URL value may have (as url, or auto read as a URL); default http
	// and https, as a hosts rule (a URL written without a scheme counts as https).
	Schemes []string `json:"schemes,omitempty"`
	// From lists the allowed sources: user, app, trusted, context, tool:NAME or tool:GLOB, tool:?;
	// empty means ["trusted"].
	From []string `json:"from,omitempty"`
	// Not inverts the rule: the value must not occur in Not.From.
	Not *SourceCheck `json:"not,omitempty"`
	// Optional lets a missing value pass.
	Optional bool `json:"optional,omitempty"`
	// Verdict is what a violation does: "block" (default) or "confirm".
	Verdict string `json:"verdict,omitempty"`
	// KeyArgs are the argument paths a confirmation notice shows.
	KeyArgs []string `json:"keyArgs,omitempty"`
}

// SourceCheck is the negated part of a provenance rule.
type SourceCheck struct {
	From []string `json:"from"`
}

// ScanRule finds items (URLs, email addresses, IBANs) in the string value at Path and checks each:
// its host against Hosts, its occurrence against From, and the negated checks of Not.
type ScanRule struct {
	ID   string `json:"id,omitempty"`
	Tool string `json:"tool"`
	Path string `json:"path"`
	// Find lists the kinds to look for: url, email, iban; empty means all three.
	Find []string `json:"find,omitempty"`
	// Hosts is a hosts list (as a vet hosts rule): every URL's host and every address's domain must
	// match it.
	Hosts []string `json:"hosts,omitempty"`
	// Schemes are the allowed schemes of found URLs when Hosts or Not.Hosts is set; default http
	// and https (a URL written without a scheme counts as https).
	Schemes []string `json:"schemes,omitempty"`
	// From lists the sources every found item must occur in (a URL by its host, unless Match is
	// "url").
	From  []string `json:"from,omitempty"`
	Match string   `json:"match,omitempty"`
	// Not holds the negated checks: no host in Not.Hosts, no item from Not.From.
	Not      *ScanNot `json:"not,omitempty"`
	Optional bool     `json:"optional,omitempty"`
	Verdict  string   `json:"verdict,omitempty"`
	KeyArgs  []string `json:"keyArgs,omitempty"`
}

// ScanNot is the negated part of a scan rule.
type ScanNot struct {
	Hosts []string `json:"hosts,omitempty"`
	From  []string `json:"from,omitempty"`
}

// BudgetRule caps the calls of the tools matching Tool in one conversation: the calls already in
// the conversation plus the ones of this response.
type BudgetRule struct {
	ID       string   `json:"id,omitempty"`
	Tool     string   `json:"tool"`
	MaxCalls *int     `json:"maxCalls"`
	Verdict  string   `json:"verdict,omitempty"`
	KeyArgs  []string `json:"keyArgs,omitempty"`
}

// FlowRule blocks (or holds for confirmation) calls of Tools once the conversation holds output of
// a source in After: "untrusted" (any untrusted source, unseen history included), "context", or
// "tool:NAME" / "tool:GLOB" (that tool's output, trusted or not), "tool:?" (outputs whose call is
// unknown).
type FlowRule struct {
	ID      string   `json:"id,omitempty"`
	After   []string `json:"after"`
	Tools   []string `json:"tools"`
	Verdict string   `json:"verdict,omitempty"`
	KeyArgs []string `json:"keyArgs,omitempty"`
}

// ConfirmSpec configures confirmation codes.
type ConfirmSpec struct {
	// TTL is how long a code stays valid after its notice; 0 is DefaultConfirmTTL. It is rounded up
	// to whole minutes (a code's time step).
	TTL Duration `json:"ttl,omitzero"`
}

// Duration is a time.Duration written as a Go duration string ("10m") in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "10m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`toolCalls.confirm.ttl: must be a duration string such as "10m"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`toolCalls.confirm.ttl: %q is not a duration: write one such as "10m"`, s)
	}
	*d = Duration(v)
	return nil
}

// Defaults and bounds.
const (
	DefaultConfirmTTL     = 10 * time.Minute
	MinConfirmTTL         = time.Minute
	MaxConfirmTTL         = 24 * time.Hour
	DefaultContinueRounds = 2
	MaxContinueRounds     = 8
)

// Verdicts a rule can ask for.
const (
	VerdictBlock   = "block"
	VerdictConfirm = "confirm"
)

// Value kinds of a provenance rule (As).
const (
	AsAuto  = "auto"
	AsEmail = "email"
	AsHost  = "host"
	AsURL   = "url"
	AsIBAN  = "iban"
	AsID    = "id"
	AsText  = "text"
)

// Match values for URLs.
const (
	MatchHost = "host"
	MatchURL  = "url"
)

// Validate returns every problem of the spec, joined and sorted, each naming the field path
// (relative to toolCalls) and the fix.
func (s Spec) Validate() error {
	_, err := compile([]Spec{s})
	return err
}

// problems collects validation errors.
type problems []string

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	slices.Sort(p)
	errs := make([]error, len(p))
	for i, s := range p {
		errs[i] = errors.New(s)
	}
	return errors.Join(errs...)
}

// checkGlob reports a tool glob that is empty or malformed.
func (p *problems) checkGlob(field, g string) {
	if g == "" {
		p.add(field, `required: a tool name or glob such as send_* ("*" for every tool)`)
		return
	}
	if _, err := path.Match(g, ""); err != nil {
		p.add(field, "%q is not a valid glob (%v): use *, ? and [class] as in tools.allow", g, err)
	}
}

// checkVerdict reads a rule's verdict.
func (p *problems) checkVerdict(field, v string) bool {
	switch v {
	case "", VerdictBlock:
		return false
	case VerdictConfirm:
		return true
	}
	p.add(field, "%q is not a verdict: use block or confirm", v)
	return false
}

// checkPath reports an argument path that is empty or holds NUL.
func (p *problems) checkPath(field, gp string) {
	switch {
	case gp == "":
		p.add(field, "required: a gjson path into the arguments, such as to or recipients.#")
	case strings.ContainsRune(gp, 0):
		p.add(field, "must not contain NUL")
	}
}

// checkKeyArgs reports key argument paths that are empty or hold NUL.
func (p *problems) checkKeyArgs(field string, keys []string) {
	for i, k := range keys {
		p.checkPath(fmt.Sprintf("%s[%d]", field, i), k)
	}
}

// compileHosts compiles a hosts list as a vet hosts rule does.
func (p *problems) compileHosts(field string, hosts []string) vet.HostList {
	if len(hosts) == 0 {
		p.add(field, "must list at least one host")
	}
	l, bad := vet.NewHostList(hosts)
	for _, j := range bad {
		p.add(fmt.Sprintf("%s[%d]", field, j), "%q is not a host name: give one such as docs.example.com or *.example.com", hosts[j])
	}
	return l
}

package mcp

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcpjoin"
	"github.com/promptgate/promptgate/proxy/mcppin"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// Decision kinds of the door (the audit log's kind).
const (
	// KindCall: a tools/call (or a request refused as a whole) was decided.
	KindCall = audit.KindMCPCall
	// KindList: a tool was held back from (or removed from) a tools/list answer.
	KindList = audit.KindMCPList
	// KindDefinition: a tool definition was pinned, changed, flagged by the scan, or approved.
	KindDefinition = audit.KindMCPDefinition
)

// Verdicts of the door besides audit's allowed, blocked, removed, held, confirmed, audited.
const (
	// VerdictPinned: a first-seen definition was pinned.
	VerdictPinned = audit.VerdictPinned
	// VerdictChanged: a definition differs from its pin.
	VerdictChanged = audit.VerdictChanged
	// VerdictFlagged: the scan found an injection in a description.
	VerdictFlagged = audit.VerdictFlagged
	// VerdictApproved: an operator pinned a pending definition.
	VerdictApproved = audit.VerdictApproved
)

// Reasons of calls the join refuses.
const (
	reasonNoModelCall = "no model call released this call (requireModelCall)"
	reasonDiffers     = "its arguments differ from those of the model's call (requireModelCall)"
	reasonSpent       = "the model's call was executed already: a released call runs once (requireModelCall)"
	// reasonUnreadable: arguments that servers' readers read differently (not one object, or a
	// number that a float64 reads as an infinity, or as zero for non-zero digits), refused in every
	// mode, as a parser differential is.
	reasonUnreadable = "its arguments are not one JSON object that MCP servers read alike (a number out of float64's range)"
)

// governance is what the request's protocol decides on the door.
type governance struct {
	eff *policy.Effective
	g   *proxy.Governance
}

// govern chooses the protocol of a request: the server's configured one, else as for the model's
// requests.
func (d *Door) govern(r *http.Request, srv *Server) (governance, error) {
	g, err := d.o.Engine.Govern(proxy.GovernInput{Path: r.URL.Path, Header: r.Header, Protocol: srv.Protocol})
	if err != nil {
		return governance{}, err
	}
	return governance{eff: g.Protocol, g: g}, nil
}

// call judges a tools/call: the server's definitions are read when they changed or were never read;
// the tool must be listed and its definition pinned (held changes refuse it); the model's name for
// it must be allowed and its arguments must pass the pinned schema and the argument rules; the call
// is matched to the model's call, which mcp.requireModelCall requires; one that no model call
// released is judged by the information-flow rules with no conversation in sight. A refusal is a
// tool result with isError that names the rule and never the arguments.
func (x *exchange) call(m message) ([]byte, bool) {
	ctx, span := tracing.Stage(x.ctx(), "promptgate.mcp.call")
	defer span.End()
	name := m.params.Get("name").String()
	args := m.params.Get("arguments")
	argBytes := []byte(args.Raw)
	if !args.Exists() {
		argBytes = []byte("{}")
	}
	model := x.srv.ToolPrefix + name
	span.String("promptgate.tool", vet.DisplayName(model))
	def, why := x.d.definition(ctx, x, name)
	if why == "" && (stateless(x.version) || namesRequest(x.r.Header)) {
		if err := checkCallParams(x.r.Header, m, def.InputSchema); err != nil {
			x.refusedDifferential(m, err)
			return x.errorFor(m, err), false
		}
	}
	if why != "" {
		return x.refuse(m, model, argBytes, why, "", audit.VerdictBlocked), false
	}
	checker, err := x.gov.g.Checker(model, def.InputSchema, nil)
	if err != nil {
		x.log.Error("argument rules do not compile; the call is refused", "err", err)
	}
	if reason, rule, ok := checker.Check(model, argBytes); !ok {
		if checker.Mode() != vet.ModeAudit {
			return x.refuse(m, model, argBytes, reason, rule, audit.VerdictBlocked), false
		}
		x.decided(model, argBytes, audit.VerdictAudited, reason, rule, "")
	}
	digest, ok := mcpjoin.Digest(argBytes)
	if !ok {
		return x.refuse(m, model, argBytes, reasonUnreadable, "", audit.VerdictBlocked), false
	}
	conversation := strings.TrimSpace(x.r.Header.Get(proxy.HeaderConversation))
	match, rel := x.d.o.Calls.Claim(mcpjoin.Call{Tool: model, Digest: digest, Conversation: conversation})
	span.String("promptgate.mcp.join", [...]string{"unmatched", "matched", "differs", "spent"}[match])
	require := x.requireModelCall()
	switch {
	case match == mcpjoin.Matched:
		x.decided(model, argBytes, audit.VerdictAllowed, "matched the model's call released under protocol "+rel.Protocol, "", "")
	case require && match == mcpjoin.Differs:
		return x.refuse(m, model, argBytes, reasonDiffers, "", audit.VerdictBlocked), false
	case require && match == mcpjoin.Spent:
		return x.refuse(m, model, argBytes, reasonSpent, "", audit.VerdictBlocked), false
	case require:
		return x.refuse(m, model, argBytes, reasonNoModelCall, "", audit.VerdictBlocked), false
	default:
		if answer, ok := x.judgeUnmatched(m, model, argBytes, digest, conversation); !ok {
			return answer, false
		}
	}
	x.d.o.Calls.Executed(model, argBytes, x.srv.Name)
	return nil, true
}

// requireModelCall is whether a call must match a model's call: the protocol's
// mcp.requireModelCall, else the config's.
func (x *exchange) requireModelCall() bool {
	if r := x.gov.eff.MCP.RequireModelCall; r != nil {
		return *r
	}
	return x.d.o.Config.RequireModelCall
}

// judgeUnmatched judges a call that no model call released by the protocol's information-flow
// rules, on a conversation of which nothing is in sight: provenance finds no source, budgets cannot
// be counted, and rules after untrusted apply. A rule that asks for confirmation holds it, bound to
// the conversation id the request names (else, where the client can be asked, its session), the
// server and the protocol version; the user's answer to the door's question (elicit.go), or
// X-Promptgate-Confirm with the code, releases it once.
func (x *exchange) judgeUnmatched(m message, model string, args []byte, digest [32]byte, conversation string) ([]byte, bool) {
	pol, err := x.gov.g.Flow()
	if err != nil {
		return x.refuse(m, model, args, "the protocol's information-flow rules do not compile", "", audit.VerdictBlocked), false
	}
	if pol.Empty() {
		x.decided(model, args, audit.VerdictAllowed, "no model call matched; no information-flow rule applies", "", "")
		return nil, true
	}
	t := flow.NewTranscript()
	t.SetUnseen("an MCP call that no model call released")
	// The binding holds the join's digest of the arguments too: a code releases the call the user
	// was shown as every server reads it, never one a reader tells apart (1.0 for 1), which the
	// flow rules' digest (numbers as float64s) takes for the same.
	binding, exact := "", "\x00args:"+hex.EncodeToString(digest[:])
	switch ask := x.canAsk(m); {
	case conversation != "":
		binding = conversation + "\x00mcp:" + x.srv.Name + "@" + x.version + exact
	case ask:
		binding = "\x00session:" + x.session().session + "\x00mcp:" + x.srv.Name + "@" + x.version + exact
	}
	conv, err := pol.Analyze(t, flow.Options{Conversation: binding, Confirmer: x.d.o.Confirmer, Violations: x.d.o.Violations,
		User: x.r.Header.Get(proxy.HeaderUser), Codes: x.r.Header.Values(proxy.HeaderConfirm)})
	if err != nil {
		return x.refuse(m, model, args, err.Error(), "", audit.VerdictBlocked), false
	}
	res := conv.Check(flow.Call{Tool: model, Args: args})
	for _, fd := range res.Decisions {
		x.record(audit.Event{Kind: fd.Kind, Tool: vet.DisplayName(model), Verdict: fd.Verdict, Reason: fd.Reason, Rule: fd.Rule}.WithArguments(args, false))
	}
	switch res.Verdict {
	case flow.VerdictAllowed, flow.VerdictConfirmed:
		x.decided(model, args, res.Verdict, "no model call matched; the information-flow rules pass", "", "")
		return nil, true
	case flow.VerdictHeld:
		if x.canAsk(m) {
			x.decided(model, args, audit.VerdictHeld, "held for the user's confirmation, asked over MCP (elicitation)", "", "")
			x.hold = &heldCall{m: m, model: model, args: args, digest: digest, res: res, ttl: pol.ConfirmTTL()}
			return nil, false
		}
		return x.held(m, model, args, res), false
	}
	rule := ""
	for _, fd := range res.Decisions {
		if fd.Reason == res.Reason {
			rule = fd.Rule
		}
	}
	if x.gov.eff.OnViolation == vet.ModeAudit {
		x.decided(model, args, audit.VerdictAudited, res.Reason, rule, "")
		return nil, true
	}
	return x.refuse(m, model, args, res.Reason, rule, audit.VerdictBlocked), false
}

// decided records the decision on a call that goes on to the server.
func (x *exchange) decided(model string, args []byte, verdict, reason, rule, _ string) {
	x.record(audit.Event{Kind: KindCall, Tool: vet.DisplayName(model), Verdict: verdict, Reason: reason, Rule: rule}.WithArguments(args, false))
	x.d.recent.add(recentCall{Time: time.Now().UTC(), Server: x.srv.Name, Tool: vet.DisplayName(model), Verdict: verdict, Reason: reason, RequestID: x.id})
}

// refuse records a refused call and answers it with a tool result that says so (isError): the
// agent's model reads why, never the arguments.
func (x *exchange) refuse(m message, model string, args []byte, reason, rule, verdict string) []byte {
	x.decided(model, args, verdict, reason, rule, "")
	if m.id == "" {
		return nil
	}
	text := "[promptgate] blocked tool call " + vet.DisplayName(model) + ": " + reason
	meta := `{"promptgate/decision":{"verdict":` + jsonString(verdict) + `,"reason":` + jsonString(reason) + `,"rule":` + jsonString(rule) + `}}`
	return resultMessage(m.id, []byte(`{"content":[{"type":"text","text":`+jsonString(text)+`}],"isError":true,"_meta":`+meta+`}`))
}

// held answers a call held for the user's confirmation: the model reads that it waits
// (flow.HoldText, never the code); the notice with its code is in _meta for the app to show the
// user, who confirms it with the code (X-Promptgate-Confirm on the call made again, or a user
// message on the model's path).
func (x *exchange) held(m message, model string, args []byte, res flow.Result) []byte {
	x.decided(model, args, audit.VerdictHeld, "held for the user's confirmation", "", "")
	if m.id == "" {
		return nil
	}
	meta := `{"promptgate/hold":{"notice":` + jsonString(res.Notice) + `}}`
	return resultMessage(m.id, []byte(`{"content":[{"type":"text","text":`+jsonString(flow.HoldText(model))+`}],"isError":true,"_meta":`+meta+`}`))
}

// definition is the pinned definition of a server's tool, its list read first where it changed or
// was never read; why says why there is none to call.
func (d *Door) definition(ctx context.Context, x *exchange, tool string) (mcppin.Definition, string) {
	if !d.o.Pins.Fresh(x.srv.Name) {
		if err := x.refreshList(ctx); err != nil {
			x.log.Warn("the server's tool definitions cannot be read; its calls are refused", "err", err)
			return mcppin.Definition{}, "the server's tool definitions cannot be read"
		}
	}
	pin, ok := d.o.Pins.Tool(x.srv.Name, tool)
	switch {
	case !ok:
		return mcppin.Definition{}, "the server does not list this tool"
	case pin.Pending != nil && d.o.Config.OnDefinitionChange == ChangeBlock && pin.Pinned != nil:
		return mcppin.Definition{}, "its definition changed and waits for an operator's approval (mcp.onDefinitionChange: block)"
	case pin.Pinned == nil && d.o.Config.OnDefinitionChange == ChangeBlock:
		return mcppin.Definition{}, "its description was flagged and waits for an operator's approval"
	case pin.Pending != nil:
		return *pin.Pending, "" // report mode: the server's current definition
	case pin.Pinned == nil:
		return mcppin.Definition{}, "the server does not list this tool"
	}
	return *pin.Pinned, ""
}

// recentCall is one call the door decided, for the console.
type recentCall struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"requestId"`
	Server    string    `json:"server"`
	Tool      string    `json:"tool"`
	Verdict   string    `json:"verdict"`
	Reason    string    `json:"reason"`
}

// maxRecent bounds the recent calls kept.
const maxRecent = 200

// recentCalls is a bounded ring of the latest calls. Safe for concurrent use.
type recentCalls struct {
	mu   sync.Mutex
	ring []recentCall
	next int
	full bool
}

func newRecentCalls(n int) *recentCalls { return &recentCalls{ring: make([]recentCall, n)} }

func (r *recentCalls) add(c recentCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = c
	r.next = (r.next + 1) % len(r.ring)
	r.full = r.full || r.next == 0
}

// list returns the calls, newest first.
func (r *recentCalls) list() []recentCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]recentCall, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}

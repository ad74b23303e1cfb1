package proxy

import (
	"time"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
)

// events makes the decision events of one request: every audit event of the request path is built
// here.
type events struct {
	requestID       string
	protocol        string
	protocolVersion int
}

// eventsOf are the events of a request under protocol p.
func eventsOf(requestID string, p *policy.Effective) events {
	return events{requestID: requestID, protocol: p.ID, protocolVersion: p.Version}
}

func (e events) event(kind, tool, verdict, reason string) audit.Event {
	return audit.Event{
		Time: time.Now().UTC(), RequestID: e.requestID, Kind: kind,
		Protocol: e.protocol, ProtocolVersion: e.protocolVersion, Tool: tool, Verdict: verdict, Reason: reason,
	}
}

// removed is the event of a tool removed from the request.
func (e events) removed(rm policy.Removal) audit.Event {
	return e.event(audit.KindToolRemoved, vet.DisplayName(rm.Name), audit.VerdictRemoved, rm.Reason)
}

// toolCall is the event of a vetted call, of the kind of the rule that decided it (tool_call for
// vetting, provenance, flow, budget or confirm for the information-flow rules); withArgs puts its
// arguments in (else only their hash). round is the continuation round of the answer (0 for the
// first).
func (e events) toolCall(d vet.Decision, withArgs bool, round int) audit.Event {
	kind := d.Kind
	if kind == "" {
		kind = audit.KindToolCall
	}
	ev := e.event(kind, vet.DisplayName(d.Tool), string(d.Verdict), d.Reason)
	ev.Rule, ev.Round = d.Rule, round
	return ev.WithArguments(d.Args, withArgs)
}

// refused is the event of a request refused as a whole by policy.
func (e events) refused(re *refusedError) audit.Event {
	return e.event(re.kind, re.tool, audit.VerdictBlocked, re.reason)
}

// storedPromptForwarded is the event of a stored prompt forwarded where every tool is allowed.
func (e events) storedPromptForwarded(reason string) audit.Event {
	return e.event(audit.KindStoredPrompt, "prompt", audit.VerdictAllowed, reason)
}

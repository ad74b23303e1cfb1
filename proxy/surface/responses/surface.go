package responses

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// Path is the Responses API's rewritten route.
const Path = "/v1/responses"

// Options configure the surface.
type Options struct {
	// Remember bounds the responses remembered (those with a blocked call, background ones, and the
	// instructions of every response); 0 means 10,000. See stored.go.
	Remember int
}

// Surface is the OpenAI Responses API (POST /v1/responses), with the memory of this instance: the
// calls it blocked per response, the output it showed, the policy of background responses and each
// response's instructions. Safe for concurrent use.
type Surface struct {
	blocked *blockedMemory
	echoes  *instructionMemory
	history *historyMemory
}

var (
	_ surface.Surface     = (*Surface)(nil)
	_ surface.Passthrough = (*Surface)(nil)
)

// New returns the surface with an empty memory.
func New(o Options) *Surface {
	return &Surface{blocked: newBlockedMemory(o.Remember), echoes: newInstructionMemory(o.Remember), history: newHistoryMemory(o.Remember)}
}

func (*Surface) Name() string                       { return "responses" }
func (*Surface) Routes() []surface.Route            { return []surface.Route{{Pattern: "POST " + Path}} }
func (*Surface) Upstream() string                   { return "openai" }
func (*Surface) ContextInPrompt() bool              { return true }
func (*Surface) BlockedError(d vet.Decision) []byte { return surface.BlockedErrorJSON(d) }

func (*Surface) Parse(b *assembly.Body, _ surface.Target) (surface.Request, error) { return parse(b) }

func (*Surface) CheckToolChoice(b *assembly.Body, kept []policy.Tool) error {
	return checkToolChoice(b, kept)
}

// Rewrite writes the upstream body (rewrite), with the codes of held calls masked wherever it
// shows them (surface.MaskCodes).
func (*Surface) Rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := rewrite(b, p, kept, removedAny)
	if err != nil {
		return nil, err
	}
	return surface.MaskCodes(out, userTexts)
}

// Continue answers, at the front of the input, every call that this instance blocked in the
// response the request continues (previous_response_id) and that the request does not answer
// itself: the upstream refuses a turn that leaves a call unanswered, and the client never saw it.
func (s *Surface) Continue(b *assembly.Body, upstream []byte) ([]byte, string, error) {
	prev := b.Get(reqPreviousResponseID)
	if prev.Type != gjson.String {
		return upstream, "", nil
	}
	calls := s.blocked.lookup(prev.Str)
	if len(calls) == 0 {
		return upstream, "", nil
	}
	out, n, err := answerBlocked(upstream, calls)
	if err != nil || n == 0 {
		return upstream, "", err
	}
	return out, "answered the blocked calls of the previous response " + prev.Str, nil
}

// Transcript reads the conversation: for a request that continues with previous_response_id, the
// conversation this instance relayed up to that response first (see history.go), unseen when it
// does not know all of it.
func (s *Surface) Transcript(b *assembly.Body) (*flow.Transcript, error) { return s.transcript(b) }

func (*Surface) AppendTurn(body []byte, t relay.Turn) ([]byte, error) { return appendTurn(body, t) }

// Begin starts tracking the response: its id, its blocked calls and the output shown, the client's
// own instructions and, for a background request, the policy its retrievals are vetted with.
func (s *Surface) Begin(st surface.Start) surface.Exchange {
	t := &respTrack{mem: s.blocked, echoes: s.echoes, instructions: clientInstructions(st.Client), hosted: st.VetHostedMCP}
	var up [2]gjson.Result
	assembly.GetEach(st.Upstream, []string{"store", "background"}, up[:]) // one walk for both members
	store := up[0]
	if st.Record && store.Type != gjson.False {
		t.history = s.history
		t.prev = gjson.GetBytes(st.Client, reqPreviousResponseID).String()
		t.input = gjson.GetBytes(st.Client, "input")
	}
	if background(up[1]) {
		t.bg = newBgPolicy(st.Policy, st.Protocol, st.ProtocolVersion)
		t.bg.hosted = st.VetHostedMCP
	}
	if store.Type != gjson.False {
		t.created = st.Created
	}
	return exchange{t}
}

// exchange is the response side of one Responses request.
type exchange struct{ t *respTrack }

func (x exchange) Decided(d vet.Decision) { x.t.decision(d) }

// Body vets a created response: its id is remembered (a background response must have one, or its
// retrievals could not be tied to the policy that must vet them), the output shown where a call was
// blocked, and the client's own instructions replace the layered prompt.
func (x exchange) Body(body []byte, v surface.Vetting) ([]byte, relay.Result, error) {
	id := gjson.GetBytes(body, pathID)
	if x.t.bg != nil && (id.Type != gjson.String || id.Str == "") {
		return nil, relay.Result{}, errors.New("the background response has no id")
	}
	if x.t.bg != nil {
		v.Next = nil // a background response is retrieved later, from the upstream's one response
	}
	// approvals: a round had approval requests of hosted MCP calls; last: the last round vetted
	// did, which were not answered then (an answered round is followed by another).
	approvals, last := false, false
	out, res, err := surface.Rounds(body, v, func(b []byte) ([]byte, relay.Result, error) {
		// Each answer of a continued response is a response of its own upstream: the decisions on
		// its calls belong to it, and the client continues from the last one.
		if id := gjson.GetBytes(b, pathID); id.Type == gjson.String {
			x.t.setID(id.Str)
		}
		if x.t.hosted {
			last = hasApproval(b)
			approvals = approvals || last
			return hostedBody(b, v.Checker, v.Record)
		}
		return Body(b, v.Checker, v.Record)
	}, join)
	if err != nil || res.ErrorCall != nil {
		return out, res, err
	}
	output := []byte(gjson.GetBytes(out, pathOutput).Raw)
	if res.Blocked > 0 || approvals {
		x.t.show(Shown{Output: output, Usage: []byte(gjson.GetBytes(out, pathUsage).Raw), Blocked: res.Blocked, Rounds: res.Rounds,
			Unanswered: last})
	}
	x.t.final(output)
	out, err = echoInstructions(out, "", x.t.instructions)
	return out, res, err
}

// join writes a continued response: the last one (whose id the client continues from), with the
// output items of every answer in order and the usage of all of them.
func join(j surface.Joined) ([]byte, error) {
	out := j.Last
	var items []string
	for _, k := range append(j.Kept, []byte(gjson.GetBytes(out, pathOutput).Raw)) {
		gjson.ParseBytes(k).ForEach(func(_, it gjson.Result) bool {
			items = append(items, it.Raw)
			return true
		})
	}
	var err error
	if out, err = sjson.SetRawBytes(out, pathOutput, relay.JoinArray(items)); err != nil {
		return nil, err
	}
	if j.Usage != nil {
		if out, err = sjson.SetRawBytes(out, pathUsage, j.Usage); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Stream vets a created response's stream, with the same memory as Body.
func (x exchange) Stream(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
	s := NewStream(up, v.Checker, v.Record)
	s.Hosted = x.t.hosted
	if x.t.bg == nil {
		s.SetNext(v.Next) // a background response is retrieved later, from the upstream's one response
	}
	s.OnResponseID = x.t.setID
	s.Instructions = x.t.instructions
	s.OnShown = x.t.show
	s.OnFinal = x.t.final
	return s
}

// Intercepts reports the retrievals (GET /v1/responses/{id}), cancels (POST
// /v1/responses/{id}/cancel) and input item listings (GET /v1/responses/{id}/input_items): their
// answers are objects to edit.
func (*Surface) Intercepts(r *http.Request) bool {
	return storedResponseID(r) != "" || cancelledResponseID(r) != "" || inputItemsResponseID(r) != ""
}

// Passed edits a retrieval (vetted with the creating request's policy for a background response,
// else shown as its create showed it; refused where the memory let go of what it kept of the
// response), a cancel, or an input item listing (the items of blocked calls removed).
func (s *Surface) Passed(in *http.Request, resp *http.Response, h surface.Host) error {
	if id := storedResponseID(in); id != "" {
		if bg := s.blocked.background(id); bg != nil {
			return s.vetStored(resp, h, id, bg)
		}
		if s.blocked.forgottenResponse(id) {
			resp.Body.Close()
			return fmt.Errorf("%w: this instance let go of what it kept of response %s (its memory was full): "+
				"its calls cannot be vetted or shown as promptgate decided them, so it is not shown", surface.ErrUpstreamMalformed, id)
		}
		return s.stripStored(resp, id)
	}
	if id := cancelledResponseID(in); id != "" {
		return s.echoCancelled(resp, id)
	}
	if inputItemsResponseID(in) != "" {
		return s.stripInputItems(resp)
	}
	return nil
}

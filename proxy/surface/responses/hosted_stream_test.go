package responses

import (
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// approval streams an approval request item (its output_item.added and .done) at output_index oi.
func (r *rs) approval(oi int, item string) *rs {
	r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":`+item+`}`)
	r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+item+`}`)
	r.output = append(r.output, item)
	return r
}

// mcpCall streams the hosted MCP call the upstream ran after an approval, as the API streams it.
func (r *rs) mcpCall(oi int, id string) *rs {
	at := `"item_id":"` + id + `","output_index":` + itoa(oi)
	const args = `{"to":"ann@acme.com"}`
	added := `{"id":"` + id + `","type":"mcp_call","server_label":"crm","name":"send_email","arguments":"","status":"in_progress"}`
	r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":`+added+`}`)
	r.ev("response.mcp_call.in_progress", `{`+at+`}`)
	r.ev("response.mcp_call_arguments.delta", `{`+at+`,"delta":`+jstr(args)+`}`)
	r.ev("response.mcp_call_arguments.done", `{`+at+`,"arguments":`+jstr(args)+`}`)
	r.ev("response.mcp_call.completed", `{`+at+`}`)
	done := `{"id":"` + id + `","type":"mcp_call","server_label":"crm","name":"send_email","arguments":` + jstr(args) + `,"output":"sent","status":"completed"}`
	r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+done+`}`)
	r.output = append(r.output, done)
	return r
}

// createdAs and completedAs start and end a response of id.
func (r *rs) createdAs(id string) *rs {
	return r.ev("response.created", `{"response":{"id":"`+id+`","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[],"tools":[]}}`)
}

func (r *rs) completedAs(id string) *rs {
	return r.ev("response.completed", `{"response":{"id":"`+id+`","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[`+
		strings.Join(r.output, ",")+`],"tools":[],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}`)
}

// hostedRound2 is the upstream's answer once the approvals are answered: the call it ran and a
// message.
func hostedRound2() string {
	r := &rs{}
	return r.createdAs("resp_2").mcpCall(0, "mcp_1").message(1, "msg_2", "Done.", 2).completedAs("resp_2").String()
}

// hostedRun is what a Hosted stream did: its output, decisions, the turns it asked to continue and
// what it showed (OnShown).
type hostedRun struct {
	out   []byte
	ds    []vet.Decision
	turns []relay.Turn
	shown *Shown
}

// runHosted relays first through a Hosted stream whose next rounds are next, in order ("" makes
// that round fail, as an upstream error or no round left does), each split into reads of 1..7
// bytes. With noNext the stream cannot be continued (a background retrieval).
func runHosted(t *testing.T, c *vet.Checker, seed uint64, noNext bool, first string, next ...string) hostedRun {
	t.Helper()
	var h hostedRun
	rnd := rand.New(rand.NewPCG(seed, 2))
	s := NewStream(io.NopCloser(&relaytest.ChunkReader{Data: []byte(first), Rnd: rnd, Max: 7}), c, func(d vet.Decision) { h.ds = append(h.ds, d) })
	s.Hosted = true
	s.OnShown = func(sh Shown) { h.shown = &sh }
	if !noNext {
		s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
			h.turns = append(h.turns, tu)
			if len(h.turns) > len(next) || next[len(h.turns)-1] == "" {
				return nil, errors.New("no round left")
			}
			return io.NopCloser(&relaytest.ChunkReader{Data: []byte(next[len(h.turns)-1]), Rnd: rnd, Max: 7}), nil
		})
	}
	var err error
	h.out, err = io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// answers names the answers of a turn: ID:approve, ID:deny or ID:output.
func answers(tu relay.Turn) string {
	var out []string
	for _, a := range tu.Calls {
		kind := "output"
		if a.Approval {
			kind = map[bool]string{true: "approve", false: "deny"}[a.Approve]
		}
		out = append(out, a.ID+":"+kind)
	}
	return strings.Join(out, ",")
}

// TestHostedStreamAnswered: in a stream, promptgate answers the approval requests of hosted MCP
// calls itself — approve for ann, deny with the rule for eve, whose reason never quotes the
// arguments — and the next round's events follow in the same stream: the client never gets an
// approval request; it gets the first round's text, eve's notice, the call the upstream ran and its
// text, numbered as one response (output_index 0, 1, 2, ... and sequence numbers that increase,
// checked by assemble), one response.completed whose output is what was streamed and whose usage is
// both rounds'. A later retrieval is shown the same (OnShown).
func TestHostedStreamAnswered(t *testing.T) {
	t.Parallel()
	r := &rs{}
	first := r.created().message(0, "msg_1", "Mailing them. ", 3).approval(1, approveAnn).approval(2, approveEve).completed().String()
	for seed := range uint64(8) {
		h := runHosted(t, hostedChecker(t, vet.ModeRefuse), seed, false, first, hostedRound2())
		if len(h.turns) != 1 || answers(h.turns[0]) != "mcpr_ann:approve,mcpr_eve:deny" || h.turns[0].ResponseID != "resp_1" {
			t.Fatalf("turns %+v", h.turns)
		}
		deny := h.turns[0].Calls[1]
		if !strings.Contains(deny.Result, "acme-only") || strings.Contains(deny.Result, "eve@") {
			t.Errorf("denial reason %q", deny.Result)
		}
		if !strings.Contains(string(h.turns[0].Raw), `"mcpr_eve"`) {
			t.Errorf("the turn is not the upstream's output: %s", h.turns[0].Raw)
		}
		if strings.Contains(string(h.out), typeApproval) || strings.Contains(string(h.out), "eve@evil") {
			t.Fatalf("an approval request reached the client: %s", h.out)
		}
		v := assemble(t, h.out)
		if strings.Join(v.Types, ",") != "message,message,mcp_call,message" || strings.Join(v.finalTypes(), ",") != "message,message,mcp_call,message" {
			t.Fatalf("types %v, final %v:\n%s", v.Types, v.finalTypes(), h.out)
		}
		if !strings.HasPrefix(v.Text, "Mailing them. [promptgate] blocked tool call mcp: rule acme-only") ||
			!strings.HasSuffix(v.Text, "(hosted MCP call crm/send_email)Done.") || strings.Contains(v.Text, "not run") {
			t.Errorf("text %q", v.Text)
		}
		if n := strings.Count(string(h.out), "event: response.completed\n"); n != 1 || strings.Count(string(h.out), "event: response.created\n") != 1 {
			t.Errorf("%d response.completed:\n%s", n, h.out)
		}
		final := finalEvent(t, h.out)
		if final.Get("response.id").Str != "resp_2" || final.Get("response.usage.total_tokens").Int() != 6 {
			t.Errorf("final %s", final.Raw)
		}
		if len(h.ds) != 2 || h.ds[0].Tool != hostedMCP || h.ds[0].Blocked() || !h.ds[1].Blocked() || h.ds[1].Rule != "acme-only" {
			t.Errorf("decisions %+v", h.ds)
		}
		if h.shown == nil || h.shown.Rounds != 1 || h.shown.Blocked != 1 || h.shown.Unanswered ||
			string(h.shown.Output) != final.Get("response.output").Raw {
			t.Errorf("shown %+v", h.shown)
		}
	}
}

// finalEvent is the data of the stream's response.completed.
func finalEvent(t *testing.T, out []byte) gjson.Result {
	t.Helper()
	var final gjson.Result
	for ev := range relaytest.Events(t, out) {
		if ev.Event == evCompleted {
			final = gjson.ParseBytes(ev.Data)
		}
	}
	return final
}

// TestHostedStreamNotContinued: where the turn cannot be continued — a function call of the turn
// reaches the client (before or after the approval request), a function call refused in refuse
// mode, no round left — no approval request is answered: each is replaced by a notice (not run, or
// the denial's), the stream is the first round's alone, and a later retrieval is refused a stream
// of it (Unanswered).
func TestHostedStreamNotContinued(t *testing.T) {
	t.Parallel()
	weather := func(r *rs, oi int) *rs { return r.call(oi, "fc_1", "call_1", "get_weather", `{"city":"Paris"}`, 4) }
	badWeather := func(r *rs, oi int) *rs { return r.call(oi, "fc_2", "call_2", "get_weather", `{"town":"Paris"}`, 4) }
	for _, c := range []struct {
		name  string
		first func(r *rs) *rs
		next  []string // the next rounds ("" fails)
		types string   // what the client is shown, in order
		asked int      // the rounds asked for
	}{
		{"an allowed call after the approval", func(r *rs) *rs { return weather(r.approval(0, approveAnn), 1) }, nil, "message,function_call", 0},
		{"an allowed call before the approval", func(r *rs) *rs { return weather(r, 0).approval(1, approveAnn) }, nil, "function_call,message", 0},
		{"a call refused in refuse mode", func(r *rs) *rs { return badWeather(r.approval(0, approveAnn), 1) }, nil, "message,message", 0},
		{"no round left", func(r *rs) *rs { return r.approval(0, approveAnn).approval(1, approveEve) }, []string{""}, "message,message", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			first := c.first(new(rs).created()).completed().String()
			h := runHosted(t, hostedChecker(t, vet.ModeRefuse), 1, false, first, c.next...)
			if len(h.turns) != c.asked || strings.Contains(string(h.out), typeApproval) {
				t.Fatalf("%d rounds asked: %s", len(h.turns), h.out)
			}
			v := assemble(t, h.out)
			if strings.Join(v.Types, ",") != c.types || strings.Join(v.finalTypes(), ",") != c.types {
				t.Fatalf("types %v, final %v:\n%s", v.Types, v.finalTypes(), h.out)
			}
			if !strings.Contains(v.Text, "[promptgate] hosted MCP call crm/send_email not run: "+reasonUnanswered+".") {
				t.Errorf("no notice of the approval request left unanswered: %q", v.Text)
			}
			if h.shown == nil || !h.shown.Unanswered || h.shown.Rounds != 0 {
				t.Errorf("shown %+v", h.shown)
			}
		})
	}
}

// TestHostedStreamContinueMode: in continue mode a function call refused in the same turn is
// answered with the approvals and the turn continued, its notice not shown; a denied request's
// notice is shown once, also where it came after the refused call (whose notice and what followed
// it the continued round drops).
func TestHostedStreamContinueMode(t *testing.T) {
	t.Parallel()
	refused := func(r *rs) *rs { return r.call(0, "fc_2", "call_2", "get_weather", `{"town":"Paris"}`, 4) }
	first := refused(new(rs).created()).approval(1, approveAnn).completed().String()
	h := runHosted(t, hostedChecker(t, vet.ModeContinue), 3, false, first, hostedRound2())
	if len(h.turns) != 1 || answers(h.turns[0]) != "call_2:output,mcpr_ann:approve" {
		t.Fatalf("turns %+v", h.turns)
	}
	v := assemble(t, h.out)
	if strings.Join(v.Types, ",") != "mcp_call,message" || strings.Contains(v.Text, "[promptgate]") || strings.Contains(string(h.out), "call_2") {
		t.Errorf("types %v, text %q", v.Types, v.Text)
	}

	for name, first := range map[string]string{
		"denied after the refusal":  refused(new(rs).created()).approval(1, approveEve).completed().String(),
		"denied before the refusal": new(rs).created().approval(0, approveEve).call(1, "fc_2", "call_2", "get_weather", `{"town":"Paris"}`, 4).completed().String(),
	} {
		h := runHosted(t, hostedChecker(t, vet.ModeContinue), 4, false, first, hostedRound2())
		if len(h.turns) != 1 || len(h.turns[0].Calls) != 2 {
			t.Fatalf("%s: turns %+v", name, h.turns)
		}
		v := assemble(t, h.out)
		if strings.Join(v.Types, ",") != "message,mcp_call,message" || strings.Join(v.finalTypes(), ",") != "message,mcp_call,message" ||
			strings.Count(v.Text, "[promptgate]") != 1 || !strings.HasPrefix(v.Text, "[promptgate] blocked tool call mcp: rule acme-only") {
			t.Errorf("%s: types %v, final %v, text %q", name, v.Types, v.finalTypes(), v.Text)
		}
	}
}

// TestHostedStreamTextNotHeldBack: text after an approval request goes out as it comes, before the
// upstream ends the round.
func TestHostedStreamTextNotHeldBack(t *testing.T) {
	t.Parallel()
	r := new(rs).created().approval(0, approveAnn)
	r.ev("response.output_item.added", `{"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`)
	r.ev("response.output_text.delta", `{"item_id":"msg_1","output_index":1,"content_index":0,"delta":"STILL-TALKING","logprobs":[]}`)
	head := r.String()
	r.evs = nil
	r.ev("response.output_item.done", `{"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","content":[],"role":"assistant"}}`)
	r.output = append(r.output, `{"id":"msg_1","type":"message","status":"completed","content":[],"role":"assistant"}`)
	tail := r.completed().String()
	var turns []relay.Turn
	open := func(up io.ReadCloser, rec func(vet.Decision)) relaytest.Stream {
		s := NewStream(up, hostedChecker(t, vet.ModeRefuse), rec)
		s.Hosted = true
		s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
			turns = append(turns, tu)
			return io.NopCloser(strings.NewReader(hostedRound2())), nil
		})
		return s
	}
	rest := relaytest.TextFirst(t, open, head, "STILL-TALKING", "STILL-TALKING", tail)
	if len(turns) != 1 || answers(turns[0]) != "mcpr_ann:approve" || !strings.Contains(string(rest), "Done.") || strings.Contains(string(rest), "not run") {
		t.Errorf("turns %+v, rest %s", turns, rest)
	}
}

// TestHostedStreamApprovalChanged: an approval request is answered only as the upstream keeps it.
// One whose arguments differ between its added and done items is denied (ReasonChanged); one whose
// final response holds other arguments than were answered, or that the final response lacks, is not
// answered at all; one only the final response holds is not answered either.
func TestHostedStreamApprovalChanged(t *testing.T) {
	t.Parallel()
	eveAsAnn := strings.Replace(approveEve, "mcpr_eve", "mcpr_ann", 1)
	changed := new(rs).created()
	changed.ev("response.output_item.added", `{"output_index":0,"item":`+approveAnn+`}`)
	changed.ev("response.output_item.done", `{"output_index":0,"item":`+eveAsAnn+`}`)
	changed.output = append(changed.output, eveAsAnn)
	h := runHosted(t, hostedChecker(t, vet.ModeRefuse), 5, false, changed.completed().String(), hostedRound2())
	if len(h.turns) != 1 || answers(h.turns[0]) != "mcpr_ann:deny" || len(h.ds) != 1 || h.ds[0].Reason != ReasonChanged {
		t.Fatalf("turns %+v, decisions %+v", h.turns, h.ds)
	}

	for name, final := range map[string][]string{"other arguments": {eveAsAnn}, "missing": nil} {
		r := new(rs).created().approval(0, approveAnn)
		r.output = final
		h := runHosted(t, hostedChecker(t, vet.ModeRefuse), 6, false, r.completed().String(), hostedRound2())
		if len(h.turns) != 0 || strings.Contains(string(h.out), typeApproval) || !strings.Contains(string(h.out), "not run") {
			t.Errorf("%s: %d rounds asked: %s", name, len(h.turns), h.out)
		}
	}

	r := new(rs).created()
	r.output = []string{approveAnn}
	h = runHosted(t, hostedChecker(t, vet.ModeRefuse), 7, false, r.completed().String(), hostedRound2())
	final := finalEvent(t, h.out)
	if len(h.turns) != 0 || strings.Contains(string(h.out), typeApproval) || !strings.Contains(final.Get("response.output.0.content.0.text").Str, "not run") {
		t.Errorf("final only: %d rounds asked: %s", len(h.turns), h.out)
	}
}

// TestHostedStreamWithoutNext: a stream that cannot be continued (a background response's
// retrieval) shows each approval request as a notice in its place at once, allowed or denied.
func TestHostedStreamWithoutNext(t *testing.T) {
	t.Parallel()
	first := new(rs).created().approval(0, approveAnn).approval(1, approveEve).message(2, "msg_1", "ok", 1).completed().String()
	h := runHosted(t, hostedChecker(t, vet.ModeRefuse), 9, true, first)
	v := assemble(t, h.out)
	if strings.Join(v.Types, ",") != "message,message,message" || strings.Contains(string(h.out), typeApproval) ||
		!strings.HasPrefix(v.Text, "[promptgate] hosted MCP call crm/send_email not run") || !strings.Contains(v.Text, "rule acme-only") {
		t.Errorf("types %v, text %q", v.Types, v.Text)
	}
	if !slices.EqualFunc(h.ds, []bool{false, true}, func(d vet.Decision, blocked bool) bool { return d.Blocked() == blocked }) {
		t.Errorf("decisions %+v", h.ds)
	}
}

// TestHostedStreamErrorMode: in error mode a denied approval request ends the stream with the error
// event (as a body answers 403); approved ones are answered and the turn continued.
func TestHostedStreamErrorMode(t *testing.T) {
	t.Parallel()
	first := new(rs).created().approval(0, approveAnn).approval(1, approveEve).completed().String()
	h := runHosted(t, hostedChecker(t, vet.ModeError), 11, false, first, hostedRound2())
	if v := assemble(t, h.out); v.Error != relay.CodeToolCallBlocked || len(h.turns) != 0 || strings.Contains(string(h.out), typeApproval) {
		t.Errorf("error %q, %d rounds: %s", v.Error, len(h.turns), h.out)
	}
	first = new(rs).created().approval(0, approveAnn).completed().String()
	h = runHosted(t, hostedChecker(t, vet.ModeError), 11, false, first, hostedRound2())
	if v := assemble(t, h.out); v.Error != "" || len(h.turns) != 1 || strings.Join(v.Types, ",") != "mcp_call,message" {
		t.Errorf("types %v, %d rounds: %s", v.Types, len(h.turns), h.out)
	}
}

// TestHostedStreamBadRequests: an approval request the stream cannot read as one call — arguments
// that are not a string, a server or tool that changes between its items, one that never finishes,
// one without an id — is denied (its notice in its place), never approved.
func TestHostedStreamBadRequests(t *testing.T) {
	t.Parallel()
	relabelled := strings.Replace(approveAnn, `"server_label":"crm"`, `"server_label":"bank"`, 1)
	for _, c := range []struct {
		name, added, done, reason string
	}{
		{"arguments not a string", strings.Replace(approveAnn, `"arguments":"{\"to\":\"ann@acme.com\"}"`, `"arguments":{"to":"ann@acme.com"}`, 1), "", vet.ReasonNotString},
		{"server changed", approveAnn, relabelled, ReasonChanged},
		{"never finished", approveAnn, "-", ReasonIncomplete},
		{"no id", strings.Replace(approveAnn, `"id":"mcpr_ann",`, "", 1), "", ReasonChanged},
	} {
		r := new(rs).created()
		r.ev("response.output_item.added", `{"output_index":0,"item":`+c.added+`}`)
		done := c.done
		switch done {
		case "":
			done = c.added
		case "-":
			done = ""
		}
		if done != "" {
			r.ev("response.output_item.done", `{"output_index":0,"item":`+done+`}`)
		}
		r.output = []string{c.added}
		h := runHosted(t, hostedChecker(t, vet.ModeRefuse), 13, false, r.completed().String(), hostedRound2())
		if len(h.ds) != 1 || h.ds[0].Reason != c.reason || strings.Contains(string(h.out), typeApproval) ||
			!strings.Contains(string(h.out), "[promptgate] blocked tool call mcp: "+c.reason) {
			t.Errorf("%s: decisions %+v: %s", c.name, h.ds, h.out)
		}
		for _, tu := range h.turns {
			for _, a := range tu.Calls {
				if a.Approve {
					t.Errorf("%s: approved: %+v", c.name, a)
				}
			}
		}
	}
}

// approvalsIn reports whether an event carries an approval request where a client reads one: its
// item, or the output of the response it carries.
func approvalsIn(ev gjson.Result) bool {
	if ev.Get("item.type").Str == typeApproval {
		return true
	}
	found := false
	ev.Get("response.output").ForEach(func(_, it gjson.Result) bool {
		found = it.Get("type").Str == typeApproval
		return !found
	})
	return found
}

// FuzzHostedStream: whatever the upstream streams, no approval request reaches the client, and
// promptgate approves only requests whose arguments the policy allows (outside audit mode), as the
// upstream's final response (the turn it continues) holds them.
func FuzzHostedStream(f *testing.F) {
	two := new(rs).created().message(0, "msg_1", "Mailing. ", 3).approval(1, approveAnn).approval(2, approveEve).completed().String()
	withCall := new(rs).created().approval(0, approveAnn).call(1, "fc_1", "call_1", "get_weather", `{"city":"Paris"}`, 4).completed().String()
	eveAsAnn := strings.Replace(approveEve, "mcpr_eve", "mcpr_ann", 1)
	swapped := new(rs).created().approval(0, approveAnn)
	swapped.output = []string{eveAsAnn}
	for i, in := range []string{two, withCall, swapped.completed().String(), hostedRound2()} {
		for _, m := range []vet.Mode{vet.ModeRefuse, vet.ModeContinue, vet.ModeError} {
			f.Add([]byte(in), relaytest.ModeByte(m), uint8(i*3), uint64(i))
		}
	}
	f.Fuzz(func(t *testing.T, input []byte, mode byte, split uint8, seed uint64) {
		m := relaytest.FuzzMode(mode)
		c := hostedCheckerFuzz(m)
		var turns []relay.Turn
		var up io.Reader = strings.NewReader(string(input))
		if split%16 > 0 {
			up = &relaytest.ChunkReader{Data: input, Rnd: rand.New(rand.NewPCG(seed, 1)), Max: int(split % 16)}
		}
		s := NewStream(io.NopCloser(up), c, nil)
		s.Hosted = true
		s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
			turns = append(turns, tu)
			return io.NopCloser(strings.NewReader(hostedRound2())), nil
		})
		out, err := io.ReadAll(s)
		if err != nil {
			t.Fatal(err)
		}
		for ev := range relaytest.Events(t, out) {
			if gjson.ValidBytes(ev.Data) && approvalsIn(gjson.ParseBytes(ev.Data)) {
				t.Fatalf("an approval request reached the client: %s", ev.Data)
			}
		}
		check := hostedCheckerFuzz(vet.ModeRefuse)
		for _, tu := range turns {
			for _, a := range tu.Calls {
				if !a.Approval || !a.Approve {
					continue
				}
				n := 0
				gjson.ParseBytes(tu.Raw).ForEach(func(_, it gjson.Result) bool {
					if it.Get("type").Str == typeApproval && it.Get("id").Str == a.ID {
						n++
						// Audit mode approves what breaks the policy (and records it), as a body
						// does.
						if _, _, ok := check.Check(hostedMCP, []byte(it.Get("arguments").Str)); m != vet.ModeAudit && !ok ||
							it.Get("arguments").Type != gjson.String && it.Get("arguments").Exists() {
							t.Fatalf("approved a request the policy refuses: %s", it.Raw)
						}
					}
					return true
				})
				if n == 0 {
					t.Fatalf("approved a request the turn does not hold: %+v in %s", a, tu.Raw)
				}
			}
		}
	})
}

// hostedCheckerFuzz is hostedChecker without a testing.T.
func hostedCheckerFuzz(mode vet.Mode) *vet.Checker {
	rules, err := vet.CompileRules([]vet.Rule{{ID: "acme-only", Tool: hostedMCP, Path: "to", Check: vet.Check{Pattern: `@acme\.com$`}}})
	if err != nil {
		panic(err)
	}
	return vet.NewChecker(vet.Policy{Allowed: map[string]bool{"get_weather": true, hostedMCP: true}, Rules: rules, Mode: mode,
		Schemas: map[string][]byte{"get_weather": []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}})
}

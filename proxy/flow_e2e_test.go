package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// agentflowsDir holds the scenario suites of policy/flow.
var agentflowsDir = filepath.Join("..", "policy", "flow", "testdata", "agentflows")

// flowCase is one variant of a scenario on one surface, stream or not.
type flowCase struct {
	name   string
	sf     flowtest.Surface
	stream bool
	turns  []flowtest.Turn
	calls  []flowtest.Expected
}

// scenarioCases are the cases of a suite: each scenario's benign and attacked variants, on every
// surface, stream and non-stream.
func scenarioCases(t *testing.T, su flowtest.Suite) []flowCase {
	t.Helper()
	var out []flowCase
	for _, sc := range su.Scenarios {
		for _, v := range []struct {
			name  string
			turns []flowtest.Turn
			calls []flowtest.Expected
		}{{"benign", sc.Turns, sc.Benign}, {"attacked", sc.AttackedConversation(t), sc.Attacked}} {
			for _, sf := range flowtest.Surfaces {
				for _, stream := range []bool{false, true} {
					out = append(out, flowCase{name: fmt.Sprintf("%s/%s/%s/%s/stream=%v", su.Suite, sc.Name, v.name, sf, stream),
						sf: sf, stream: stream, turns: v.turns, calls: v.calls})
				}
			}
		}
	}
	return out
}

// tools are the tools a conversation and its calls use.
func (c flowCase) tools() []string {
	var out []string
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, tu := range c.turns {
		for _, call := range tu.Calls {
			add(call.Tool)
		}
	}
	for _, call := range c.calls {
		add(call.Tool)
	}
	return out
}

// modelCalls are the calls the scripted model makes in the case, each with an id of its own.
func (c flowCase) modelCalls(prefix string) []flowtest.Call {
	out := make([]flowtest.Call, len(c.calls))
	for i, e := range c.calls {
		out[i] = flowtest.Call{ID: fmt.Sprintf("%s_%d", prefix, i), Tool: e.Tool, Args: flowtest.Args(e.Args)}
	}
	return out
}

// eventsOfRequest are the decision events recorded for one request.
func (m *memAudit) eventsOfRequest(id string) []audit.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []audit.Event
	for _, e := range m.events {
		if e.RequestID == id {
			out = append(out, e)
		}
	}
	return out
}

// TestAgentFlowsThroughProxy runs every scenario of policy/flow/testdata/agentflows through the
// real proxy, on every surface, stream and non-stream, with each suite's protocol in refuse mode
// and a scripted model that makes the scenario's calls (the attacked variant: the attacker's call)
// in one answer: the benign calls reach the client as the model made them; the attacker's call does
// not — it is blocked (its notice shown) or held (a notice with a code) — and nothing of it reaches
// the client: not its id, not its arguments, not a string value of them that the client sent or was
// shown elsewhere; the decision log records it under the kind the suite expects, and no reason
// quotes an argument value. Each case is a conversation of its own (X-Promptgate-Conversation): the
// memory of caught conversations must not carry one case into the next.
func TestAgentFlowsThroughProxy(t *testing.T) {
	t.Parallel()
	suites := flowtest.LoadSuites(t, agentflowsDir)
	n := 0
	for _, su := range suites {
		protocol, err := sjson.SetBytes(su.Protocol, "toolCalls.onViolation", "refuse")
		if err != nil {
			t.Fatal(err)
		}
		up := newFlowUpstream(t)
		ts, rec := flowServer(t, up.URL, protocol)
		for i, c := range scenarioCases(t, su) {
			n++
			script := strconv.Itoa(i)
			calls := c.modelCalls("call" + script)
			up.script(script, scriptedTurn{calls: calls, in: 10, out: 5})
			req := flowRequest(t, c.sf, c.turns, c.tools(), c.stream, nil)
			status, h, b := post(t, ts, c.sf, req, http.Header{headerScript: {script}, HeaderConversation: {c.name}})
			if status != http.StatusOK {
				t.Fatalf("%s: status %d: %s", c.name, status, b)
			}
			checkFlowAnswer(t, c, calls, req, b, rec.eventsOfRequest(h.Get(HeaderRequestID)))
			if withheld := countWithheld(c.calls); !c.stream && withheld > 0 && h.Get(HeaderBlocked) != strconv.Itoa(withheld) {
				t.Errorf("%s: %s = %q, want %d", c.name, HeaderBlocked, h.Get(HeaderBlocked), withheld)
			}
		}
	}
	if n < 31*2*len(flowtest.Surfaces)*2 || len(flowtest.Surfaces) < 4 {
		t.Errorf("%d cases, want every scenario's two variants on the four surfaces, stream and not", n)
	}
}

func countWithheld(calls []flowtest.Expected) int {
	n := 0
	for _, e := range calls {
		if e.Expect != "allowed" {
			n++
		}
	}
	return n
}

// checkFlowAnswer checks what the client was shown of the model's calls, and the decision log.
func checkFlowAnswer(t *testing.T, c flowCase, calls []flowtest.Call, req, b []byte, events []audit.Event) {
	t.Helper()
	got := read(t, c.sf, c.stream, b)
	var released [][]byte
	for i, e := range c.calls {
		call := calls[i]
		k := slices.IndexFunc(got.calls, func(g flowtest.Call) bool { return g.ID == call.ID })
		if e.Expect == "allowed" {
			if k < 0 || got.calls[k].Tool != call.Tool || !sameJSON(got.calls[k].Args, call.Args) {
				t.Errorf("%s: allowed call %d (%s) not shown as made: %+v", c.name, i, call.Tool, got.calls)
			}
			released = append(released, call.Args)
			continue
		}
		if k >= 0 || bytes.Contains(b, []byte(call.ID)) {
			t.Errorf("%s: the %s call %d (%s) reached the client: %s", c.name, e.Expect, i, call.Tool, b)
		}
		sameAsReleased := slices.ContainsFunc(released, func(r []byte) bool { return sameJSON(r, call.Args) })
		if compact := js(json.RawMessage(call.Args)); !sameAsReleased && (bytes.Contains(b, []byte(compact)) || bytes.Contains(b, []byte(js(compact)))) {
			t.Errorf("%s: the arguments of the %s call %d reached the client", c.name, e.Expect, i)
		}
		switch e.Expect {
		case "blocked":
			// A body's notices take the place of the calls where none is left (a stream's, of each
			// call).
			if (c.stream || countWithheld(c.calls) == len(c.calls)) && !strings.Contains(got.text, "[promptgate] blocked tool call "+call.Tool+": ") {
				t.Errorf("%s: no notice of the blocked call %d in %q", c.name, i, got.text)
			}
			for _, v := range stringValues(call.Args, 4) {
				if shownElsewhere(v, req, released) {
					continue
				}
				if bytes.Contains(b, []byte(v)) || bytes.Contains(b, []byte(strings.Trim(js(v), `"`))) {
					t.Errorf("%s: a value of the blocked call %d reached the client: %q", c.name, i, v)
				}
			}
		case "held":
			if !strings.Contains(got.text, "[promptgate] held tool call "+call.Tool+" for your confirmation") || !strings.Contains(got.text, "reply with the code") {
				t.Errorf("%s: no held notice of call %d in %q", c.name, i, got.text)
			}
		default:
			t.Fatalf("%s: unknown expectation %q", c.name, e.Expect)
		}
		found := false
		for _, ev := range events {
			found = found || ev.Tool == call.Tool && ev.Kind == e.Kind && ev.Verdict == e.Expect
		}
		if !found {
			t.Errorf("%s: no %s event of kind %s for call %d: %+v", c.name, e.Expect, e.Kind, i, events)
		}
	}
	if len(got.calls) != len(released) {
		t.Errorf("%s: the client was shown %d calls, want %d", c.name, len(got.calls), len(released))
	}
	for _, ev := range events {
		for _, call := range calls {
			for _, v := range stringValues(call.Args, 4) {
				if strings.Contains(ev.Reason, v) {
					t.Errorf("%s: a decision's reason quotes an argument value: %q", c.name, ev.Reason)
				}
			}
		}
	}
}

// shownElsewhere reports whether a value is one the client knows anyway: in its own request, or in
// a call it was shown.
func shownElsewhere(v string, req []byte, released [][]byte) bool {
	if bytes.Contains(req, []byte(v)) || bytes.Contains(req, []byte(strings.Trim(js(v), `"`))) {
		return true
	}
	for _, r := range released {
		if slices.Contains(stringValues(r, 4), v) {
			return true
		}
	}
	return false
}

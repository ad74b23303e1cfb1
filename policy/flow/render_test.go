package flow_test

import (
	"encoding/json"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// The conversations of these tests, in the neutral form of flowtest.
type (
	turn        = flowtest.Turn
	neutralCall = flowtest.Call
)

type obj = map[string]any

func args(a json.RawMessage) json.RawMessage { return flowtest.Args(a) }

// mustCompile compiles a spec written as JSON.
func mustCompile(t testing.TB, spec string) *flow.Policy {
	t.Helper()
	var s flow.Spec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec: %v", err)
	}
	p, err := flow.Compile(s)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return p
}

// analyze analyzes a conversation written in the neutral form.
func analyze(t testing.TB, p *flow.Policy, turns []turn, opt flow.Options) *flow.Conversation {
	t.Helper()
	c, err := p.Analyze(flowtest.Transcript(turns), opt)
	if err != nil {
		t.Fatalf("analyze: %v", err)
	}
	return c
}

// unseen is the transcript of a conversation that continues a history out of sight (why:
// previous_response_id, conversation, item_reference).
func unseen(turns []turn, why string) *flow.Transcript {
	tr := flowtest.Transcript(turns)
	tr.SetUnseen(why)
	return tr
}

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

var surfaces = flowtest.Surfaces

type obj = map[string]any

// render writes a request body of surface s holding the conversation (extra top-level fields merged).
func render(t testing.TB, s flow.Surface, turns []turn, extra obj) []byte {
	t.Helper()
	return flowtest.Render(t, s, turns, extra)
}

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

// analyze renders and analyzes a conversation.
func analyze(t testing.TB, p *flow.Policy, s flow.Surface, turns []turn, opt flow.Options) *flow.Conversation {
	t.Helper()
	c, err := p.Analyze(s, render(t, s, turns, nil), opt)
	if err != nil {
		t.Fatalf("%s: analyze: %v", s, err)
	}
	return c
}

package flow_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

type expectedCall = flowtest.Expected

func loadSuites(t *testing.T) []flowtest.Suite {
	t.Helper()
	return flowtest.LoadSuites(t, filepath.Join("testdata", "agentflows"))
}

// TestAgentFlows: on every scenario of every suite, the benign calls pass
// and the attacker's call is blocked or held, with the decision kind expected; no reason quotes an
// argument value.
func TestAgentFlows(t *testing.T) {
	t.Parallel()
	suites := loadSuites(t)
	total := 0
	classes := map[string]int{}
	empty := mustCompile(t, `{}`)
	for _, su := range suites {
		proto, err := policy.ParseProtocol(su.Protocol)
		if err != nil {
			t.Fatalf("%s: protocol: %v", su.Suite, err)
		}
		pol, err := flow.Compile(proto.ToolCalls.Spec)
		if err != nil {
			t.Fatalf("%s: compile: %v", su.Suite, err)
		}
		for _, sc := range su.Scenarios {
			total++
			classes[sc.Class]++
			attacked := sc.AttackedConversation(t)
			if len(sc.Benign) == 0 || len(sc.Attacked) == 0 || last(sc.Attacked).Expect == "allowed" {
				t.Fatalf("%s/%s: a scenario needs benign calls and an attacker's call that is stopped", su.Suite, sc.Name)
			}
			name := su.Suite + "/" + sc.Name
			runVariant(t, pol, name+"/benign", sc.Turns, sc.Benign)
			runVariant(t, pol, name+"/attacked", attacked, sc.Attacked)
			// Without the suite's rules the attacker's call goes through: the rules stop it.
			if r := analyze(t, empty, attacked, flow.Options{}).Check(flow.Call{Tool: last(sc.Attacked).Tool, Args: args(last(sc.Attacked).Args)}); r.Verdict != flow.VerdictAllowed {
				t.Errorf("%s: the attacker's call is stopped without any rule: %+v", name, r)
			}
		}
	}
	if total < 30 {
		t.Errorf("%d scenarios, want at least 30", total)
	}
	t.Logf("%d scenarios in %d suites, by class: %v", total, len(suites), classes)
}

func last(c []expectedCall) expectedCall { return c[len(c)-1] }

func runVariant(t *testing.T, pol *flow.Policy, name string, turns []turn, calls []expectedCall) {
	t.Helper()
	clk := &clock{time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	cf, err := flow.NewConfirmer(key32, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	conv := analyze(t, pol, turns, flow.Options{Confirmer: cf})
	for i, want := range calls {
		res := conv.Check(flow.Call{Tool: want.Tool, Args: args(want.Args)})
		got := map[string]string{flow.VerdictAllowed: "allowed", flow.VerdictBlocked: "blocked", flow.VerdictHeld: "held"}[res.Verdict]
		if got != want.Expect {
			t.Errorf("%s: call %d (%s): %s %+v, want %s", name, i, want.Tool, res.Verdict, res.Decisions, want.Expect)
			continue
		}
		if want.Expect == "allowed" {
			continue
		}
		if res.Decisions[0].Kind != want.Kind {
			t.Errorf("%s: call %d: kind %s (%s), want %s", name, i, res.Decisions[0].Kind, res.Decisions[0].Reason, want.Kind)
		}
		for _, d := range res.Decisions {
			assertNoValues(t, string(want.Args), d.Reason)
		}
		if want.Expect == "held" && !strings.Contains(res.Notice, "reply with the code") {
			t.Errorf("%s: call %d: held without a notice: %+v", name, i, res)
		}
	}
}

package flow_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
)

// A suite of testdata/agentflows: a protocol definition and scenarios modelled on public agent
// prompt-injection attack classes. Each scenario is a benign task and its attacked variant: the
// same conversation with an injection appended to one tool output (or a conversation of its own),
// and the calls the model then makes, each with the verdict expected.
type agentSuite struct {
	Suite     string          `json:"suite"`
	Protocol  json.RawMessage `json:"protocol"`
	Scenarios []struct {
		Name          string         `json:"name"`
		Class         string         `json:"class"`
		Turns         []turn         `json:"turns"`
		Benign        []expectedCall `json:"benign"`
		Inject        *struct{ Into, Text string }
		AttackedTurns []turn         `json:"attacked_turns"`
		Attacked      []expectedCall `json:"attacked"`
	} `json:"scenarios"`
}

type expectedCall struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Expect string          `json:"expect"` // allowed, blocked or held
	Kind   string          `json:"kind"`   // the first decision's kind
}

func loadSuites(t *testing.T) []agentSuite {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "agentflows", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no suites: %v", err)
	}
	var out []agentSuite
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s agentSuite
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, s)
	}
	return out
}

// TestAgentFlows: on every scenario of every suite, on the three surfaces, the benign calls pass
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
			attacked := sc.AttackedTurns
			if attacked == nil {
				if sc.Inject == nil {
					t.Fatalf("%s/%s: no attacked variant", su.Suite, sc.Name)
				}
				attacked = inject(t, sc.Turns, sc.Inject.Into, sc.Inject.Text)
			}
			if len(sc.Benign) == 0 || len(sc.Attacked) == 0 || last(sc.Attacked).Expect == "allowed" {
				t.Fatalf("%s/%s: a scenario needs benign calls and an attacker's call that is stopped", su.Suite, sc.Name)
			}
			for _, s := range surfaces {
				name := su.Suite + "/" + sc.Name + "/" + string(s)
				runVariant(t, pol, s, name+"/benign", sc.Turns, sc.Benign)
				runVariant(t, pol, s, name+"/attacked", attacked, sc.Attacked)
				// Without the suite's rules the attacker's call goes through: the rules stop it.
				if r := analyze(t, empty, s, attacked, flow.Options{}).Check(flow.Call{Tool: last(sc.Attacked).Tool, Args: args(last(sc.Attacked).Args)}); r.Verdict != flow.VerdictAllowed {
					t.Errorf("%s: the attacker's call is stopped without any rule: %+v", name, r)
				}
			}
		}
	}
	if total < 30 {
		t.Errorf("%d scenarios, want at least 30", total)
	}
	t.Logf("%d scenarios in %d suites, by class: %v", total, len(suites), classes)
}

func last(c []expectedCall) expectedCall { return c[len(c)-1] }

// inject appends text to the output of the call with the given id.
func inject(t *testing.T, turns []turn, id, text string) []turn {
	t.Helper()
	out := append([]turn(nil), turns...)
	for i := range out {
		if out[i].Tool == id {
			out[i].Output += "\n" + text
			return out
		}
	}
	t.Fatalf("no output of call %q to inject into", id)
	return nil
}

func runVariant(t *testing.T, pol *flow.Policy, s flow.Surface, name string, turns []turn, calls []expectedCall) {
	t.Helper()
	clk := &clock{time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	cf, err := flow.NewConfirmer(key32, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	conv := analyze(t, pol, s, turns, flow.Options{Confirmer: cf})
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

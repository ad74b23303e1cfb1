package chat

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
	"github.com/promptgate/promptgate/proxy/surface"
)

const completionHead = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"service_tier":"default","x_unknown":{"kept":true}}`

func completion(choices ...string) string {
	out, err := sjson.SetRaw(completionHead, "choices", "["+strings.Join(choices, ",")+"]")
	if err != nil {
		panic(err)
	}
	return out
}

// msgChoice is a non-stream choice.
func msgChoice(index int, content string, calls []string, finish string) string {
	c := `{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":""}`
	c, _ = sjson.Set(c, "index", index)
	if content != "" {
		c, _ = sjson.Set(c, "message.content", content)
	}
	if calls != nil {
		c, _ = sjson.SetRaw(c, "message.tool_calls", "["+strings.Join(calls, ",")+"]")
	}
	c, _ = sjson.Set(c, "finish_reason", finish)
	return c
}

// full is a complete non-stream tool call.
func full(id, name, args string) string {
	return `{"id":"` + id + `","type":"function","function":{"name":` + jstr(name) + `,"arguments":` + jstr(args) + `}}`
}

func TestBody(t *testing.T) {
	good := full("call_a", "web_fetch", fetchGood)
	bad := full("call_b", "web_fetch", fetchBad)
	other := full("call_c", "get_weather", `{"city":"Bern"}`)
	notice := "[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed"
	for _, tc := range []struct {
		name    string
		mode    vet.Mode
		atomic  bool
		in      string
		want    string // "" = unchanged
		blocked int
		errCall string // reason of Result.ErrorCall
	}{
		{name: "text only", in: completion(msgChoice(0, "hello", nil, "stop"))},
		{name: "all allowed", in: completion(msgChoice(0, "", []string{good, other}, "tool_calls"))},
		{name: "one blocked of two", in: completion(msgChoice(0, "", []string{good, bad}, "tool_calls")),
			want: completion(msgChoice(0, "", []string{good}, "tool_calls")), blocked: 1},
		{name: "middle one blocked", in: completion(msgChoice(0, "", []string{good, bad, other}, "tool_calls")),
			want: completion(msgChoice(0, "", []string{good, other}, "tool_calls")), blocked: 1},
		{name: "only call blocked",
			in:   completion(msgChoice(0, "", []string{bad}, "tool_calls")),
			want: strings.Replace(completion(msgChoice(0, notice, nil, "stop")), `"content":`, `"content":`, 1), blocked: 1},
		{name: "two blocked, existing text kept",
			in:   completion(msgChoice(0, "Let me look.", []string{bad, full("call_d", "rm", `{}`)}, "tool_calls")),
			want: completion(msgChoice(0, "Let me look.\n"+notice+"\n[promptgate] blocked tool call rm: tool not allowed", nil, "stop")), blocked: 2},
		{name: "atomic", atomic: true, in: completion(msgChoice(0, "", []string{good, bad}, "tool_calls")),
			want: completion(msgChoice(0, "[promptgate] blocked tool call web_fetch: another call of the batch was blocked\n"+notice, nil, "stop")), blocked: 2},
		{name: "error", mode: vet.ModeError, in: completion(msgChoice(0, "", []string{good, bad}, "tool_calls")),
			blocked: 1, errCall: "rule docs: url has a host that is not allowed"},
		{name: "error, atomic names the culprit", mode: vet.ModeError, atomic: true, in: completion(msgChoice(0, "", []string{good, bad}, "tool_calls")),
			blocked: 2, errCall: "rule docs: url has a host that is not allowed"},
		{name: "audit", mode: vet.ModeAudit, in: completion(msgChoice(0, "", []string{good, bad}, "tool_calls"))},
		{name: "second choice only",
			in:   completion(msgChoice(0, "", []string{good}, "tool_calls"), msgChoice(1, "", []string{bad}, "tool_calls")),
			want: completion(msgChoice(0, "", []string{good}, "tool_calls"), msgChoice(1, notice, nil, "stop")), blocked: 1},
		{name: "duplicate and missing ids",
			in:   completion(msgChoice(0, "", []string{good, full("call_a", "search", `{}`), `{"type":"function","function":{"name":"search","arguments":"{}"}}`}, "tool_calls")),
			want: completion(msgChoice(0, "", []string{good}, "tool_calls")), blocked: 2},
		{name: "legacy function_call blocked",
			in:   completion(`{"index":0,"message":{"role":"assistant","content":null,"function_call":{"name":"rm","arguments":"{}"}},"finish_reason":"function_call"}`),
			want: completion(`{"index":0,"message":{"role":"assistant","content":"[promptgate] blocked tool call rm: tool not allowed"},"finish_reason":"stop"}`), blocked: 1},
		{name: "legacy function_call allowed",
			in: completion(`{"index":0,"message":{"role":"assistant","content":null,"function_call":{"name":"search","arguments":"{\"q\":1}"}},"finish_reason":"function_call"}`)},
		{name: "content as parts",
			in:   completion(`{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"tool_calls":[` + bad + `]},"finish_reason":"tool_calls"}`),
			want: completion(`{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"text","text":"` + notice + `"}]},"finish_reason":"stop"}`), blocked: 1},
		{name: "length finish kept", in: completion(msgChoice(0, "", []string{full("c", "search", `{"q":`)}, "length")),
			want: completion(msgChoice(0, "[promptgate] blocked tool call search: arguments are not valid json: syntax error at offset 5", nil, "length")), blocked: 1},
		{name: "no choices", in: `{"object":"list","data":[]}`},
		{name: "escaped keys",
			in:   `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool\u005fcalls":[{"id":"c1","type":"function","function":{"n\u0061me":"rm","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			want: `{"choices":[{"index":0,"message":{"role":"assistant","content":"[promptgate] blocked tool call rm: tool not allowed"},"finish_reason":"stop"}]}`, blocked: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ds []vet.Decision
			out, res, err := Body([]byte(tc.in), checkerFor(tc.mode, tc.atomic), func(d vet.Decision) { ds = append(ds, d) })
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if !jsonEqual(out, []byte(want)) {
				t.Fatalf("body:\n got %s\nwant %s", out, want)
			}
			if tc.want == "" && !bytes.Equal(out, []byte(tc.in)) {
				t.Fatalf("body changed byte-wise")
			}
			if res.Blocked != tc.blocked {
				t.Errorf("blocked %d, want %d", res.Blocked, tc.blocked)
			}
			switch {
			case tc.errCall == "" && res.ErrorCall != nil:
				t.Errorf("unexpected error call %+v", res.ErrorCall)
			case tc.errCall != "" && (res.ErrorCall == nil || res.ErrorCall.Reason != tc.errCall):
				t.Errorf("error call %+v, want reason %q", res.ErrorCall, tc.errCall)
			}
			if len(ds) == 0 && strings.Contains(tc.in, "function") {
				t.Errorf("no decisions recorded")
			}
			if bytes.Contains(out, []byte("SECRET123")) && tc.mode != vet.ModeAudit && tc.mode != vet.ModeError {
				t.Errorf("blocked arguments in the body")
			}
			if !strings.Contains(string(out), `"x_unknown":{"kept":true}`) && strings.Contains(tc.in, "x_unknown") {
				t.Errorf("unknown field lost")
			}
		})
	}
}

func TestBodyErrorJSON(t *testing.T) {
	_, res, err := Body([]byte(completion(msgChoice(0, "", []string{full("call_b", "web_fetch", fetchBad)}, "tool_calls"))), checkerFor(vet.ModeError, false), nil)
	if err != nil || res.ErrorCall == nil {
		t.Fatalf("%+v %v", res, err)
	}
	b := surface.BlockedErrorJSON(*res.ErrorCall)
	want := `{"error":{"message":"[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed","type":"permission_error","param":null,"code":"tool_call_blocked"}}`
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
}

func TestBodyCustomMemberBesideFunction(t *testing.T) {
	in := completion(msgChoice(0, "", []string{`{"id":"call_EVIL","function":{"name":"get_weather","arguments":"{\"city\":\"x\"}"},"custom":{"name":"delete_all","input":"SECRET"}}`}, "tool_calls"))
	out, res, err := Body([]byte(in), checkerFor(vet.ModeRefuse, false), nil)
	if err != nil || res.Blocked != 1 || bytes.Contains(out, []byte("SECRET")) || bytes.Contains(out, []byte("call_EVIL")) {
		t.Fatalf("%v %+v\n%s", err, res, out)
	}
}

func TestBodyRefusesAmbiguousJSON(t *testing.T) {
	for _, in := range []string{
		`{"choices":[{"index":0,"message":{"tool_calls":null,"tool_calls":[{"id":"x","function":{"name":"rm","arguments":"{}"}}]}}]}`,
		`{"choices":[]`,
		"{\"choices\":[],\"x\":\"\xff\"}",
		`[]`,
		// Go's encoding/json (go-openai) reads these keys as choices, tool_calls, function_call,
		// name.
		`{"Choices":[{"index":0,"message":{"tool_calls":[{"id":"x","function":{"name":"rm","arguments":"{}"}}]}}]}`,
		// The stream shape inside a body.
		`{"choices":[{"index":0,"message":{"content":"hi"},"delta":{"tool_calls":[{"id":"x","function":{"name":"rm","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"message":{"TOOL_CALLS":[{"id":"x","function":{"name":"rm","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"message":{"FUNCTION_CALL":{"name":"rm","arguments":"{}"}}}]}`,
		`{"choices":[{"index":0,"message":{"tool_calls":[{"id":"x","function":{"name":"search","Name":"rm","arguments":"{}"}}]}}]}`,
	} {
		if _, _, err := Body([]byte(in), checkerFor(vet.ModeRefuse, false), nil); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya) && gjson.ValidBytes(a)
}

func FuzzBody(f *testing.F) {
	f.Add([]byte(completion(msgChoice(0, "hi", []string{full("a", "web_fetch", fetchGood), full("b", "web_fetch", fetchBad)}, "tool_calls"))), byte(0), false)
	f.Add([]byte(completion(`{"index":0,"message":{"function_call":{"name":"rm","arguments":"{}"}},"finish_reason":"function_call"}`)), byte(0), false)
	f.Add([]byte(completion(msgChoice(0, "", []string{full("a", "search", `{"q":1}`), full("a", "search", `{}`)}, "tool_calls"), msgChoice(1, "x", nil, "stop"))), byte(2), true)
	f.Fuzz(func(t *testing.T, body []byte, mode byte, atomic bool) {
		m := relaytest.FuzzMode(mode)
		var ds []vet.Decision
		out, res, err := Body(body, checkerFor(m, atomic), func(d vet.Decision) { ds = append(ds, d) })
		if err != nil {
			if !bytes.Equal(out, body) {
				t.Fatal("body changed on error")
			}
			return
		}
		if m != vet.ModeRefuse {
			if !bytes.Equal(out, body) {
				t.Fatalf("mode %s changed the body", m)
			}
			return
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("invalid output %s", out)
		}
		// Every call left passes the policy and was recorded as allowed.
		check := checkerFor(m, atomic)
		allowed := 0
		for _, d := range ds {
			if d.Verdict == vet.VerdictAllowed {
				allowed++
			}
		}
		left := 0
		for _, c := range gjson.GetBytes(out, "choices").Array() {
			for _, tc := range c.Get("message.tool_calls").Array() {
				left++
				if _, _, ok := check.Check(tc.Get("function.name").String(), []byte(tc.Get("function.arguments").String())); !ok {
					t.Fatalf("a bad call is left: %s", tc.Raw)
				}
			}
			if fc := c.Get("message.function_call"); fc.Exists() && fc.Type != gjson.Null {
				left++
				if _, _, ok := check.Check(fc.Get("name").String(), []byte(fc.Get("arguments").String())); !ok {
					t.Fatalf("a bad function_call is left: %s", fc.Raw)
				}
			}
		}
		if left != allowed || res.Blocked != len(ds)-allowed {
			t.Fatalf("%d calls left, %d allowed, %d blocked of %d", left, allowed, res.Blocked, len(ds))
		}
	})
}

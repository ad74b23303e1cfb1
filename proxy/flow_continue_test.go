package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genai"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// continueCase is the banking suite's first scenario in continue mode: the model first makes the
// attacker's payment, and, told by promptgate that it was refused, goes back to the user's task and
// pays the landlord.
type continueCase struct {
	protocol json.RawMessage
	turns    []flowtest.Turn
	tools    []string
	evil     flowtest.Call
	good     flowtest.Call
}

func newContinueCase(t testing.TB) continueCase {
	t.Helper()
	var su flowtest.Suite
	for _, s := range flowtest.LoadSuites(t, agentflowsDir) {
		if s.Suite == "banking" {
			su = s
		}
	}
	if mode := gjson.GetBytes(su.Protocol, "toolCalls.onViolation").String(); mode != "continue" {
		t.Fatalf("the banking suite's protocol is in mode %q", mode)
	}
	sc := su.Scenarios[0]
	if len(sc.Attacked) != 1 || sc.Attacked[0].Expect != "blocked" || len(sc.Benign) != 1 || sc.Benign[0].Expect != "allowed" {
		t.Fatalf("the banking suite's first scenario changed: %+v", sc)
	}
	return continueCase{
		protocol: su.Protocol,
		turns:    sc.AttackedConversation(t),
		tools:    []string{"read_file", "send_money"},
		evil:     flowtest.Call{ID: "call_evil", Tool: sc.Attacked[0].Tool, Args: flowtest.Args(sc.Attacked[0].Args)},
		good:     flowtest.Call{ID: "call_good", Tool: sc.Benign[0].Tool, Args: flowtest.Args(sc.Benign[0].Args)},
	}
}

const (
	continueText1 = "I will pay the bill now. "
	continueText2 = "That account was refused, so I paid the landlord's IBAN you gave me."
)

// TestContinueGetsTheTaskDone: with onViolation "continue", on every surface, stream and
// non-stream, the attacker's payment never reaches the client (neither its id nor its recipient,
// nor a notice: promptgate answered it itself); the upstream is asked again with the model's turn
// and the refusal appended; the continuation's payment to the landlord reaches the client in the
// same answer after the first round's text; the usage is both rounds' summed; the client sees one
// answer (chat: one id and created; Messages: one message_start and message_stop, block indexes 0,
// 1, …; Responses: sequence numbers and output indexes counting on; Gemini: the first responseId on
// every event, one finishReason); the decision log records the refusal in round 0 and the payment
// in round 1.
func TestContinueGetsTheTaskDone(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				t.Parallel()
				up := newFlowUpstream(t,
					scriptedTurn{text: continueText1, calls: []flowtest.Call{cc.evil}, in: 10, out: 5},
					scriptedTurn{text: continueText2, calls: []flowtest.Call{cc.good}, in: 20, out: 7})
				ts, rec := flowServer(t, up.URL, cc.protocol)
				status, h, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				for _, leak := range []string{cc.evil.ID, "GB82", "[promptgate]"} {
					if bytes.Contains(b, []byte(leak)) {
						t.Errorf("%q reached the client: %s", leak, b)
					}
				}
				got := read(t, sf, stream, b)
				if got.text != continueText1+continueText2 {
					t.Errorf("text %q", got.text)
				}
				if len(got.calls) != 1 || got.calls[0].ID != cc.good.ID || !sameJSON(got.calls[0].Args, cc.good.Args) {
					t.Errorf("calls %+v", got.calls)
				}
				checkSummedUsage(t, sf, got.usage)
				checkOneAnswer(t, sf, stream, got, b)

				reqs := up.requests()
				if len(reqs) != 2 {
					t.Fatalf("%d upstream requests, want 2", len(reqs))
				}
				refusal := flow.RefusalText(cc.evil.Tool, "")
				refusal = refusal[:strings.Index(refusal, ":")] // the reason follows
				if !bytes.Contains(reqs[1], []byte(cc.evil.ID)) || !bytes.Contains(reqs[1], []byte(refusal)) {
					t.Errorf("the second upstream request does not answer the refused call: %s", reqs[1])
				}
				if sf != flowtest.Responses {
					checkExtends(t, reqs[0], reqs[1], contentsPath(sf), 2)
				} else if prev, in := gjson.GetBytes(reqs[1], "previous_response_id").Str, gjson.GetBytes(reqs[1], "input"); prev != "resp_1" ||
					len(in.Array()) != 1 || in.Get("0.type").Str != "function_call_output" || in.Get("0.call_id").Str != cc.evil.ID {
					// The upstream stores responses: the next round continues the first and sends
					// only the results.
					t.Errorf("the second Responses request: previous_response_id %q, input %s", prev, in.Raw)
				}
				if !stream && h.Get(HeaderBlocked) != "1" {
					t.Errorf("%s = %q, want 1", HeaderBlocked, h.Get(HeaderBlocked))
				}
				evs := rec.eventsOfRequest(h.Get(HeaderRequestID))
				if !hasEvent(evs, cc.evil.Tool, audit.KindProvenance, audit.VerdictBlocked, 0) || !hasEvent(evs, cc.good.Tool, audit.KindToolCall, audit.VerdictAllowed, 1) {
					t.Errorf("decision log %+v", evs)
				}
			})
		}
	}
}

// checkExtends: next is first with n items appended to the array at path, every other byte the
// same.
func checkExtends(t *testing.T, first, next []byte, path string, n int) {
	t.Helper()
	a, b := gjson.GetBytes(first, path).Array(), gjson.GetBytes(next, path).Array()
	if len(b) != len(a)+n {
		t.Fatalf("%s: %d items, then %d", path, len(a), len(b))
	}
	for i := range a {
		if a[i].Raw != b[i].Raw {
			t.Errorf("%s.%d changed: %s, then %s", path, i, a[i].Raw, b[i].Raw)
		}
	}
	restA, _ := sjson.DeleteBytes(first, path)
	restB, _ := sjson.DeleteBytes(next, path)
	if !bytes.Equal(restA, restB) {
		t.Errorf("the next request differs beyond %s:\n%s\n%s", path, restA, restB)
	}
}

func hasEvent(evs []audit.Event, tool, kind, verdict string, round int) bool {
	return slices.ContainsFunc(evs, func(e audit.Event) bool {
		return e.Tool == tool && e.Kind == kind && e.Verdict == verdict && e.Round == round
	})
}

// checkSummedUsage: the usage the client ends with is both rounds' (10+20 in, 5+7 out).
func checkSummedUsage(t *testing.T, sf flowtest.Surface, u gjson.Result) {
	t.Helper()
	in, out, total := usageKeys(sf)
	want := map[string]int64{in: 30, out: 12}
	if total != "" {
		want[total] = 42
	}
	for k, v := range want {
		if got := u.Get(k); got.Int() != v {
			t.Errorf("usage %s = %s, want %d (usage %s)", k, got.Raw, v, u.Raw)
		}
	}
}

// checkOneAnswer: the client is shown one answer, numbered as one.
func checkOneAnswer(t *testing.T, sf flowtest.Surface, stream bool, got shown, b []byte) {
	t.Helper()
	if !stream {
		want := map[flowtest.Surface]string{flowtest.Chat: "chatcmpl-1", flowtest.Messages: "msg_1", flowtest.Responses: "resp_2", flowtest.Gemini: "resp-1"}[sf]
		if len(got.ids) != 1 || got.ids[0] != want {
			t.Errorf("ids %v, want %s", got.ids, want)
		}
		if sf == flowtest.Chat && gjson.GetBytes(b, "created").Int() != 1001 {
			t.Errorf("created %s, want the first round's", gjson.GetBytes(b, "created").Raw)
		}
		return
	}
	names, datas := sseData(t, b)
	switch sf {
	case flowtest.Chat:
		for _, id := range got.ids {
			if id != "chatcmpl-1@1001" {
				t.Errorf("chunk id@created %s, want the first round's on every chunk", id)
			}
		}
		if n := strings.Count(string(b), "data: [DONE]"); n != 1 {
			t.Errorf("%d [DONE]", n)
		}
	case flowtest.Messages:
		if len(got.ids) != 1 || got.ids[0] != "msg_1" || strings.Count(string(b), "event: message_stop") != 1 {
			t.Errorf("message_start ids %v; message_stop %d", got.ids, strings.Count(string(b), "event: message_stop"))
		}
		next := int64(0)
		for _, d := range datas {
			if root := gjson.Parse(d); root.Get("type").String() == "content_block_start" {
				if i := root.Get("index").Int(); i != next {
					t.Errorf("content block index %d, want %d", i, next)
				}
				next++
			}
		}
	case flowtest.Responses:
		for i, d := range datas {
			if seq := gjson.Get(d, "sequence_number").Int(); seq != int64(i) {
				t.Errorf("event %d (%s) has sequence_number %d", i, names[i], seq)
			}
		}
		next := int64(0)
		for i, d := range datas {
			if names[i] == "response.output_item.added" {
				if oi := gjson.Get(d, "output_index").Int(); oi != next {
					t.Errorf("output_index %d, want %d", oi, next)
				}
				next++
			}
		}
		// The client continues from the last response: the upstream holds the refusals in its
		// history.
		want := []string{"response.created:resp_1", "response.in_progress:resp_1", "response.completed:resp_2"}
		if !slices.Equal(got.ids, want) {
			t.Errorf("response ids %v, want %v", got.ids, want)
		}
	case flowtest.Gemini:
		// Every event is one GenerateContentResponse: each carries the first round's responseId,
		// and only the last one finishes the candidate.
		finished := 0
		for i, d := range datas {
			if id := gjson.Get(d, "responseId").Str; id != "resp-1" {
				t.Errorf("event %d has responseId %q, want the first round's", i, id)
			}
			if gjson.Get(d, "candidates.0.finishReason").Exists() {
				finished++
				if i != len(datas)-1 {
					t.Errorf("event %d of %d finishes the candidate", i, len(datas))
				}
			}
		}
		if finished != 1 {
			t.Errorf("%d events finish the candidate, want 1", finished)
		}
	}
}

// TestContinueRoundsBounded: a model that makes the refused call again and again is asked
// continueRounds times more (the protocol's, else the default), then the client gets the last
// round's notice as refuse writes it; each round's refusal is recorded with its round.
func TestContinueRoundsBounded(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	for _, rounds := range []int{0, 1} {
		protocol := cc.protocol
		want := flow.DefaultContinueRounds
		if rounds > 0 {
			protocol, _ = sjson.SetBytes(protocol, "toolCalls.continueRounds", rounds)
			want = rounds
		}
		for _, sf := range flowtest.Surfaces {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("rounds=%d/%s/stream=%v", rounds, sf, stream), func(t *testing.T) {
					t.Parallel()
					up := newFlowUpstream(t, scriptedTurn{text: "Paying. ", calls: []flowtest.Call{cc.evil}, in: 1, out: 1})
					ts, rec := flowServer(t, up.URL, protocol)
					status, h, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
					if status != http.StatusOK {
						t.Fatalf("status %d: %s", status, b)
					}
					if n := len(up.requests()); n != want+1 {
						t.Errorf("%d upstream requests, want %d", n, want+1)
					}
					got := read(t, sf, stream, b)
					if len(got.calls) != 0 || bytes.Contains(b, []byte(cc.evil.ID)) || bytes.Contains(b, []byte("GB82")) {
						t.Errorf("the refused call reached the client: %s", b)
					}
					if !strings.Contains(got.text, "[promptgate] blocked tool call "+cc.evil.Tool+": ") {
						t.Errorf("no notice in %q", got.text)
					}
					if strings.Count(got.text, "[promptgate]") != 1 {
						t.Errorf("the notices of the rounds continued reached the client: %q", got.text)
					}
					evs := rec.eventsOfRequest(h.Get(HeaderRequestID))
					for r := 0; r <= want; r++ {
						if !hasEvent(evs, cc.evil.Tool, audit.KindProvenance, audit.VerdictBlocked, r) {
							t.Errorf("no refusal recorded in round %d: %+v", r, evs)
						}
					}
				})
			}
		}
	}
}

// TestContinueUpstreamFailsNextRound: when the upstream answers the next round with an error, the
// first round's refusal stands as refuse writes it (the notice), and the client gets no byte of the
// error answer.
func TestContinueUpstreamFailsNextRound(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				t.Parallel()
				up := newFlowUpstream(t, scriptedTurn{text: "Paying. ", calls: []flowtest.Call{cc.evil}, in: 1, out: 1})
				fails := 0
				ts, _ := flowServer(t, up.URL, cc.protocol, func(o *Options) {
					o.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
						if len(up.requests()) == 1 {
							fails++
							return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}},
								Body: http.NoBody, Request: r}, nil
						}
						return http.DefaultTransport.RoundTrip(r)
					})
				})
				status, _, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
				if status != http.StatusOK || fails != 1 {
					t.Fatalf("status %d, %d failed rounds: %s", status, fails, b)
				}
				got := read(t, sf, stream, b)
				if len(got.calls) != 0 || bytes.Contains(b, []byte(cc.evil.ID)) || !strings.Contains(got.text, "[promptgate] blocked tool call "+cc.evil.Tool+": ") {
					t.Errorf("got %+v: %s", got, b)
				}
			})
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestContinueOfficialClients: the official SDKs parse a continued stream without error and
// assemble from it the one answer: the text of both rounds and the continuation's call (openai-go's
// chat accumulator, its Responses event stream, anthropic-sdk-go's message accumulator, Google's
// genai stream: the summed usage and the first responseId on every event).
func TestContinueOfficialClients(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	script := func(t *testing.T) *flowUpstream {
		return newFlowUpstream(t,
			scriptedTurn{text: continueText1, calls: []flowtest.Call{cc.evil}, in: 10, out: 5},
			scriptedTurn{text: continueText2, calls: []flowtest.Call{cc.good}, in: 20, out: 7})
	}
	t.Run("chat", func(t *testing.T) {
		t.Parallel()
		ts, _ := flowServer(t, script(t).URL, cc.protocol)
		body := flowRequest(t, flowtest.Chat, cc.turns, cc.tools, true, nil)
		client := newClient(ts)
		st := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			if !acc.AddChunk(st.Current()) {
				t.Fatalf("the accumulator refused a chunk: %s", st.Current().RawJSON())
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		m := acc.Choices[0].Message
		if m.Content != continueText1+continueText2 || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != cc.good.ID ||
			acc.ID != "chatcmpl-1" || acc.Usage.TotalTokens != 42 {
			t.Errorf("accumulated %s", acc.RawJSON())
		}
	})
	t.Run("responses", func(t *testing.T) {
		t.Parallel()
		ts, _ := flowServer(t, script(t).URL, cc.protocol)
		body := flowRequest(t, flowtest.Responses, cc.turns, cc.tools, true, nil)
		client := newClient(ts)
		st := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{}, option.WithRequestBody("application/json", body))
		var done responses.Response
		var text strings.Builder
		for st.Next() {
			ev := st.Current()
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				done = ev.Response
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		var calls []string
		for _, it := range done.Output {
			if it.Type == "function_call" {
				calls = append(calls, it.CallID)
			}
		}
		if text.String() != continueText1+continueText2 || done.OutputText() != continueText1+continueText2 ||
			!slices.Equal(calls, []string{cc.good.ID}) || done.Usage.TotalTokens != 42 {
			t.Errorf("text %q, completed %s", text.String(), done.RawJSON())
		}
	})
	t.Run("messages", func(t *testing.T) {
		t.Parallel()
		ts, _ := flowServer(t, script(t).URL, cc.protocol)
		body := flowRequest(t, flowtest.Messages, cc.turns, cc.tools, true, nil)
		client := newAnthClient(ts)
		st := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{}, aoption.WithRequestBody("application/json", body))
		var msg anthropic.Message
		for st.Next() {
			if err := msg.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		var calls []string
		for _, b := range msg.Content {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				calls = append(calls, b.ID+":"+string(b.Input))
			}
		}
		if text.String() != continueText1+continueText2 || len(calls) != 1 || !strings.HasPrefix(calls[0], cc.good.ID+":") ||
			msg.ID != "msg_1" || msg.Usage.InputTokens != 30 || msg.Usage.OutputTokens != 12 || msg.StopReason != "tool_use" {
			t.Errorf("accumulated %s", msg.RawJSON())
		}
	})
	t.Run("gemini", func(t *testing.T) {
		t.Parallel()
		ts, _ := flowServer(t, script(t).URL, cc.protocol)
		text, calls, usage, ids := continueGeminiStream(t, ts, cc)
		if text != continueText1+continueText2 || len(calls) != 1 || !strings.HasPrefix(calls[0], cc.good.Tool+"{") ||
			usage == nil || usage.PromptTokenCount != 30 || usage.CandidatesTokenCount != 12 || usage.TotalTokenCount != 42 {
			t.Errorf("text %q, calls %v, usage %+v", text, calls, usage)
		}
		for _, id := range ids {
			if id != "resp-1" {
				t.Errorf("responseIds %v, want the first round's on every event", ids)
				break
			}
		}
	})
}

// continueGeminiStream is what Google's Go client assembles from a continued stream of the banking
// case (the conversation and tools as flowRequest renders them): the text, the calls, the last
// usage and every event's responseId.
func continueGeminiStream(t *testing.T, ts *httptest.Server, cc continueCase) (text string, calls []string, usage *genai.GenerateContentResponseUsageMetadata, ids []string) {
	t.Helper()
	var req struct {
		Contents []*genai.Content `json:"contents"`
		System   *genai.Content   `json:"systemInstruction"`
		Tools    []*genai.Tool    `json:"tools"`
	}
	if err := json.Unmarshal(flowRequest(t, flowtest.Gemini, cc.turns, cc.tools, true, nil), &req); err != nil {
		t.Fatal(err)
	}
	cfg := &genai.GenerateContentConfig{SystemInstruction: req.System, Tools: req.Tools}
	for r, err := range newGenaiClient(t, ts).Models.GenerateContentStream(context.Background(), "m", req.Contents, cfg) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		tx, cs := answerOf(r)
		text, calls, ids = text+tx, append(calls, cs...), append(ids, r.ResponseID)
		if r.UsageMetadata != nil {
			usage = r.UsageMetadata
		}
	}
	return text, calls, usage, ids
}

// TestContinueAgentFlows: every scenario whose attacked calls are all refused, in continue mode, on
// every surface, stream and non-stream, with a model that gives up the attacker's calls once
// refused: the client gets the first round's text and the continuation's, and nothing of the
// refused calls, not even a notice. A scenario whose attacked call is held for confirmation is not
// continued (the confirmation is the user's): the held notice reaches the client, and the upstream
// is asked once.
func TestContinueAgentFlows(t *testing.T) {
	t.Parallel()
	n, held := 0, 0
	for _, su := range flowtest.LoadSuites(t, agentflowsDir) {
		protocol, err := sjson.SetBytes(su.Protocol, "toolCalls.onViolation", "continue")
		if err != nil {
			t.Fatal(err)
		}
		up := newFlowUpstream(t)
		ts, _ := flowServer(t, up.URL, protocol)
		for i, c := range scenarioCases(t, su) {
			if !strings.Contains(c.name, "/attacked/") || countWithheld(c.calls) != len(c.calls) {
				continue
			}
			script := strconv.Itoa(i)
			calls := c.modelCalls("call" + script)
			up.script(script, scriptedTurn{text: "On it. ", calls: calls, in: 3, out: 4}, scriptedTurn{text: "Done as you asked.", in: 5, out: 6})
			req := flowRequest(t, c.sf, c.turns, c.tools(), c.stream, nil)
			status, _, b := post(t, ts, c.sf, req, http.Header{headerScript: {script}, HeaderConversation: {c.name}})
			if status != http.StatusOK {
				t.Fatalf("%s: status %d: %s", c.name, status, b)
			}
			got := read(t, c.sf, c.stream, b)
			if slices.ContainsFunc(c.calls, func(e flowtest.Expected) bool { return e.Expect == "held" }) {
				held++
				up.mu.Lock()
				asked := up.served[script]
				up.mu.Unlock()
				// The agent goes on: the model is told the call waits for the user (never the
				// code), and the client gets the notice with its code beside the continuation.
				code := noticeCode(got.text)
				if asked != 2 || code == "" || !strings.HasPrefix(got.text, "On it. ") || !strings.HasSuffix(got.text, "Done as you asked.") || len(got.calls) != 0 {
					t.Errorf("%s: a held call's answer was not continued with its notice (%d upstream requests): %q", c.name, asked, got.text)
				}
				sent := up.requests()
				if last := string(sent[len(sent)-1]); code != "" && strings.Contains(last, code) || !strings.Contains(last, "is waiting for the user") {
					t.Errorf("%s: the continued request gave the model the code, or no word of the hold", c.name)
				}
				continue
			}
			n++
			if got.text != "On it. Done as you asked." || len(got.calls) != 0 {
				t.Errorf("%s: shown %+v", c.name, got)
			}
			for _, call := range calls {
				if bytes.Contains(b, []byte(call.ID)) {
					t.Errorf("%s: the refused call %s reached the client", c.name, call.ID)
				}
			}
		}
	}
	if n < 6*10 || held < 6 {
		t.Errorf("only %d refused cases and %d held ones", n, held)
	}
}

// TestContinueTraced: each next round goes upstream in an upstream span of its own, in the
// request's trace, with its round, and the upstream gets that span as the parent of its request.
func TestContinueTraced(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			up := newFlowUpstream(t,
				scriptedTurn{text: continueText1, calls: []flowtest.Call{cc.evil}, in: 10, out: 5},
				scriptedTurn{text: continueText2, calls: []flowtest.Call{cc.good}, in: 20, out: 7})
			var parents []string
			ts, _ := flowServer(t, up.URL, cc.protocol, func(o *Options) {
				o.Tracing = tracing.New(tp)
				o.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
					parents = append(parents, r.Header.Get("Traceparent"))
					return http.DefaultTransport.RoundTrip(r)
				})
			})
			if status, _, b := post(t, ts, flowtest.Chat, flowRequest(t, flowtest.Chat, cc.turns, cc.tools, stream, nil), nil); status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			var rounds []int64
			var ids []string
			var trace string
			for _, s := range exp.GetSpans() {
				if s.Name != tracing.SpanUpstream {
					continue
				}
				round := int64(0)
				for _, kv := range s.Attributes {
					if kv.Key == attrRound {
						round = kv.Value.AsInt64()
					}
				}
				if trace == "" {
					trace = s.SpanContext.TraceID().String()
				}
				if s.SpanContext.TraceID().String() != trace {
					t.Errorf("the rounds' spans are in different traces")
				}
				rounds = append(rounds, round)
				ids = append(ids, s.SpanContext.SpanID().String())
			}
			slices.Sort(rounds)
			if !slices.Equal(rounds, []int64{0, 1}) || len(parents) != 2 {
				t.Fatalf("upstream spans of rounds %v; %d upstream requests", rounds, len(parents))
			}
			for _, p := range parents {
				if !slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(p, id) }) {
					t.Errorf("traceparent %q is none of the upstream spans %v", p, ids)
				}
			}
		})
	}
}

package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// hostedAPI imitates the Responses API running a hosted MCP server whose tools ask for approval. A
// request that answers no approval request gets first (output items; "ROUND" in an approval
// request's id becomes the response's number); one that answers approvals gets, for each approved
// request, the mcp_call the API ran and a message — or, with again, first once more (a model that
// keeps asking), or, with fail, that status. Streams are split across writes; every response is
// kept for GET /v1/responses/{id} (?stream=true too).
type hostedAPI struct {
	first []string
	again bool
	fail  int

	mu     sync.Mutex
	n      int
	stored map[string]string
}

func (h *hostedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/responses/"); ok {
		body := h.stored[id]
		if r.URL.Query().Get("stream") == "true" {
			writeHostedStream(w, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	b, _ := io.ReadAll(r.Body)
	answers := gjson.GetBytes(b, `input.#(type=="mcp_approval_response")#`).Array()
	if len(answers) > 0 && h.fail != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(h.fail)
		_, _ = io.WriteString(w, `{"error":{"message":"UPSTREAM-SECRET-FAILURE","type":"server_error"}}`)
		return
	}
	h.n++
	id := fmt.Sprintf("resp_%d", h.n)
	var items []string
	if len(answers) == 0 || h.again {
		for _, it := range h.first {
			items = append(items, strings.ReplaceAll(it, "ROUND", fmt.Sprint(h.n)))
		}
	} else {
		for _, a := range answers {
			if a.Get("approve").Bool() {
				items = append(items, `{"id":"mcp_`+a.Get("approval_request_id").Str+`","type":"mcp_call","server_label":"crm","name":"send_email",`+
					`"arguments":"{\"to\":\"ann@acme.com\"}","output":"sent","status":"completed"}`)
			}
		}
		items = append(items, messageItem("msg_done", "All sent."))
	}
	body := `{"id":"` + id + `","object":"response","created_at":1,"status":"completed","model":"gpt-5","output":[` + strings.Join(items, ",") +
		`],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`
	h.stored[id] = body
	if !gjson.GetBytes(b, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	writeHostedStream(w, body)
}

// writeHostedStream streams a response body as the Responses API does, split into writes of 1..11
// bytes: created, in_progress, each output item's events, completed.
func writeHostedStream(w http.ResponseWriter, body string) {
	snap, _ := sjson.Set(body, "status", "in_progress")
	snap, _ = sjson.SetRaw(snap, "output", "[]")
	snap, _ = sjson.Delete(snap, "usage")
	ev := &respEvents{}
	ev.ev("response.created", `"response":`+snap)
	ev.ev("response.in_progress", `"response":`+snap)
	for i, it := range gjson.Get(body, "output").Array() {
		o, id := strconvI(i), it.Get("id").Str
		at := `"item_id":"` + id + `","output_index":` + o
		switch it.Get("type").Str {
		case "function_call":
			ev.call(i, id, it.Get("call_id").Str, it.Get("name").Str, it.Get("arguments").Str)
			continue
		case "message":
			added, _ := sjson.SetRaw(it.Raw, "content", "[]")
			ev.ev("response.output_item.added", `"output_index":`+o+`,"item":`+added)
			ev.ev("response.content_part.added", at+`,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}`)
			text := it.Get("content.0.text").Str
			for _, word := range strings.SplitAfter(text, " ") {
				ev.ev("response.output_text.delta", at+`,"content_index":0,"delta":`+jsonStr(word))
			}
			ev.ev("response.output_text.done", at+`,"content_index":0,"text":`+jsonStr(text))
			ev.ev("response.content_part.done", at+`,"content_index":0,"part":`+it.Get("content.0").Raw)
		case "mcp_call":
			added, _ := sjson.Set(it.Raw, "arguments", "")
			ev.ev("response.output_item.added", `"output_index":`+o+`,"item":`+added)
			ev.ev("response.mcp_call.in_progress", at)
			ev.ev("response.mcp_call_arguments.delta", at+`,"delta":`+jsonStr(it.Get("arguments").Str))
			ev.ev("response.mcp_call_arguments.done", at+`,"arguments":`+jsonStr(it.Get("arguments").Str))
			ev.ev("response.mcp_call.completed", at)
		case "mcp_list_tools":
			ev.ev("response.output_item.added", `"output_index":`+o+`,"item":`+it.Raw)
			ev.ev("response.mcp_list_tools.in_progress", at)
			ev.ev("response.mcp_list_tools.completed", at)
		default:
			ev.ev("response.output_item.added", `"output_index":`+o+`,"item":`+it.Raw)
		}
		ev.ev("response.output_item.done", `"output_index":`+o+`,"item":`+it.Raw)
	}
	ev.ev("response.completed", `"response":`+body)
	splitUpstream(ev.b.String(), 11)(w, nil)
}

// Output items of the hosted MCP conversation.
var (
	listTools   = `{"id":"mcpl_1","type":"mcp_list_tools","server_label":"crm","tools":[{"name":"send_email","input_schema":{"type":"object"}}]}`
	mailingText = messageItem("msg_1", "Mailing Ann and Eve now.")
)

// hostedStreamRequest is a streamed Responses request with a hosted MCP server and function tools
// of the given names; store false makes it stateless.
func hostedStreamRequest(store bool, functions ...string) []byte {
	req := strings.Replace(hostedRequest, `"model":"m",`, `"model":"m","stream":true,`, 1)
	if !store {
		req = strings.Replace(req, `"model":"m",`, `"model":"m","store":false,`, 1)
	}
	for _, f := range functions {
		req, _ = sjson.SetRaw(req, "tools.-1", `{"type":"function","name":"`+f+`","parameters":{"type":"object"}}`)
	}
	return []byte(req)
}

// clientStream is what a strict client reads of a Responses stream: it fails the test unless
// sequence numbers strictly increase and items are added at output_index 0, 1, 2, ..., each event
// of an item at its index.
type clientStream struct {
	types     []string // item types in the order they were added
	text      string   // every output_text delta
	completed []gjson.Result
	created   int
}

func readClientStream(t *testing.T, b []byte) clientStream {
	t.Helper()
	var c clientStream
	last := int64(-1)
	names, datas := sseData(t, b)
	for i, d := range datas {
		ev := gjson.Parse(d)
		if ev.Get("type").Str != names[i] {
			t.Fatalf("event %q carries type %q", names[i], ev.Get("type").Str)
		}
		if seq := ev.Get("sequence_number").Int(); seq <= last {
			t.Fatalf("sequence_number %d after %d:\n%s", seq, last, b)
		} else {
			last = seq
		}
		if oi := ev.Get("output_index"); oi.Exists() && int(oi.Int()) > len(c.types)-1 && names[i] != "response.output_item.added" {
			t.Fatalf("event %s at output_index %d, before its item was added", names[i], oi.Int())
		}
		switch names[i] {
		case "response.created":
			c.created++
		case "response.output_item.added":
			if oi := int(ev.Get("output_index").Int()); oi != len(c.types) {
				t.Fatalf("item added at output_index %d, want %d:\n%s", oi, len(c.types), b)
			}
			c.types = append(c.types, ev.Get("item.type").Str)
		case "response.output_text.delta":
			c.text += ev.Get("delta").Str
		case "response.completed":
			c.completed = append(c.completed, ev.Get("response"))
		case "error":
			t.Fatalf("the stream ended with an error: %s", d)
		}
	}
	return c
}

// outputTypes are the types of a response's output items.
func outputTypes(resp gjson.Result) string {
	var types []string
	resp.Get("output").ForEach(func(_, it gjson.Result) bool {
		types = append(types, it.Get("type").Str)
		return true
	})
	return strings.Join(types, ",")
}

// TestHostedMCPStreamAnswered: in a stream, with mcp.vetHostedCalls, promptgate answers the
// upstream's approval requests itself — approve for ann, deny for eve with the argument rule, never
// quoting her address — and asks the upstream again, stored (previous_response_id and the answers)
// or stateless (the turn and the answers appended). The client reads one response: no approval
// request, the first round's text, eve's notice, the call the upstream ran and its text, sequence
// numbers that increase and output indexes 0, 1, 2, ..., one response.created and one
// response.completed (the last round's id, the output streamed, both rounds' usage). Each approval
// request is recorded as a call of mcp; a retrieval, JSON or stream, shows what the stream showed.
func TestHostedMCPStreamAnswered(t *testing.T) {
	t.Parallel()
	for _, store := range []bool{true, false} {
		t.Run(map[bool]string{true: "stored", false: "stateless"}[store], func(t *testing.T) {
			t.Parallel()
			api := &hostedAPI{first: []string{listTools, mailingText, approvalItem("mcpr_ann", "ann@acme.com"), approvalItem("mcpr_eve", "eve@evil.example")},
				stored: map[string]string{}}
			up := newUpstream(t, api.ServeHTTP)
			ts, rec := flowServer(t, up.URL, hostedProtocol(true))
			status, h, b := post(t, ts, flowtest.Responses, hostedStreamRequest(store), nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			up.mu.Lock()
			bodies := append([][]byte(nil), up.bodies...)
			up.mu.Unlock()
			if len(bodies) != 2 {
				t.Fatalf("%d upstream requests, want 2", len(bodies))
			}
			if got := gjson.GetBytes(bodies[0], "tools.0.require_approval").String(); got != "always" {
				t.Errorf("require_approval went upstream as %q", got)
			}
			second := gjson.ParseBytes(bodies[1])
			answers := second.Get(`input.#(type=="mcp_approval_response")#`).Array()
			if len(answers) != 2 || answers[0].Get("approval_request_id").Str != "mcpr_ann" || !answers[0].Get("approve").Bool() ||
				answers[1].Get("approval_request_id").Str != "mcpr_eve" || answers[1].Get("approve").Type != gjson.False ||
				!strings.Contains(answers[1].Get("reason").Str, "acme-only") || strings.Contains(answers[1].Raw, "eve@") || !second.Get("stream").Bool() {
				t.Fatalf("the second request: %s", second.Raw)
			}
			if store {
				if second.Get("previous_response_id").Str != "resp_1" || len(second.Get("input").Array()) != 2 {
					t.Errorf("a stored continuation: previous_response_id %q, input %s", second.Get("previous_response_id").Str, second.Get("input").Raw)
				}
			} else if n := len(second.Get(`input.#(type=="mcp_approval_request")#`).Array()); n != 2 || second.Get("previous_response_id").Exists() ||
				!strings.Contains(second.Get("input").Raw, "mcpl_1") {
				t.Errorf("a stateless continuation lacks the turn it answers: %s", second.Get("input").Raw)
			}

			if strings.Contains(string(b), "mcp_approval_request") || strings.Contains(string(b), "eve@evil") || strings.Contains(string(b), "mcpr_") &&
				!strings.Contains(string(b), "mcp_mcpr_ann") {
				t.Fatalf("the client got an approval request or the refused argument: %s", b)
			}
			c := readClientStream(t, b)
			const want = "mcp_list_tools,message,message,mcp_call,message"
			if strings.Join(c.types, ",") != want || c.created != 1 || len(c.completed) != 1 {
				t.Fatalf("items %v, %d created, %d completed:\n%s", c.types, c.created, len(c.completed), b)
			}
			if !strings.HasPrefix(c.text, "Mailing Ann and Eve now.[promptgate] blocked tool call mcp: rule acme-only") ||
				!strings.HasSuffix(c.text, "(hosted MCP call crm/send_email)All sent.") {
				t.Errorf("text %q", c.text)
			}
			final := c.completed[0]
			if outputTypes(final) != want || final.Get("id").Str != "resp_2" || final.Get("usage.total_tokens").Int() != 30 ||
				final.Get("output.3.id").Str != "mcp_mcpr_ann" {
				t.Errorf("response.completed %s", final.Raw)
			}
			evs := rec.eventsOfRequest(h.Get(HeaderRequestID))
			var got []string
			for _, e := range evs {
				got = append(got, fmt.Sprintf("%s/%s/%s/%d", e.Kind, e.Tool, e.Verdict, e.Round))
			}
			if strings.Join(got, " ") != "tool_call/mcp/allowed/0 tool_call/mcp/blocked/0" {
				t.Errorf("decisions %v", got)
			}

			resp, err := ts.Client().Get(ts.URL + "/v1/responses/resp_2")
			if err != nil {
				t.Fatal(err)
			}
			stored, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || gjson.GetBytes(stored, "output").Raw != final.Get("output").Raw ||
				resp.Header.Get(HeaderContinued) != "1" || gjson.GetBytes(stored, "usage.total_tokens").Int() != 30 {
				t.Errorf("retrieval %d %s: %s", resp.StatusCode, resp.Header.Get(HeaderContinued), stored)
			}
			resp, err = ts.Client().Get(ts.URL + "/v1/responses/resp_2?stream=true")
			if err != nil {
				t.Fatal(err)
			}
			stored, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if sc := readClientStream(t, stored); resp.StatusCode != http.StatusOK || len(sc.completed) != 1 || sc.completed[0].Get("output").Raw != final.Get("output").Raw {
				t.Errorf("streamed retrieval %d: %s", resp.StatusCode, stored)
			}
		})
	}
}

// TestHostedMCPStreamNotAnswered: where the turn cannot be continued — a function call of the same
// turn reaches the client, no round is left, the upstream fails the next round, the next request
// would pass limits.maxBodyBytes — promptgate answers no approval request of it: each is replaced
// by a notice (eve's denial, or "not run" for ann), so neither call runs, and the client gets no
// byte of a failed round. A retrieval shows the notices; a streamed one is refused, since the
// stored response still holds approval requests.
func TestHostedMCPStreamNotAnswered(t *testing.T) {
	t.Parallel()
	ann, eve := approvalItem("mcpr_ann_ROUND", "ann@acme.com"), approvalItem("mcpr_eve_ROUND", "eve@evil.example")
	weather := fcItem("fc_1", "call_1", "get_weather", `{"city":"Oslo"}`, "completed")
	long := messageItem("msg_1", strings.Repeat("Mailing them now. ", 4000))
	protocol := func(rounds int) json.RawMessage {
		p, _ := sjson.SetBytes(hostedProtocol(true), "tools.allow", []string{"mcp", "get_weather"})
		if rounds > 0 {
			p, _ = sjson.SetBytes(p, "toolCalls.continueRounds", rounds)
		}
		return p
	}
	for _, c := range []struct {
		name     string
		api      *hostedAPI
		limit    int    // limits.maxBodyBytes, 0 for the default
		requests int    // upstream requests made
		types    string // the items the client gets
		shown    string // the last response, which a retrieval shows
	}{
		{"a function call reaches the client", &hostedAPI{first: []string{ann, weather, eve}}, 0, 1, "message,function_call,message", "resp_1"},
		{"no round left", &hostedAPI{first: []string{ann, eve}, again: true}, 0, 2, "message,message,message", "resp_2"},
		{"the upstream fails the next round", &hostedAPI{first: []string{ann, eve}, fail: http.StatusInternalServerError}, 0, 2, "message,message", "resp_1"},
		{"the upstream fails the next round of ann's", &hostedAPI{first: []string{ann}, fail: http.StatusBadGateway}, 0, 2, "message", "resp_1"},
		{"the next request is too large", &hostedAPI{first: []string{long, ann, eve}}, 60 << 10, 1, "message,message,message", "resp_1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.api.stored = map[string]string{}
			up := newUpstream(t, c.api.ServeHTTP)
			var ts *httptest.Server
			store := true
			if c.limit > 0 {
				ts, _ = limitServer(t, up.URL, protocol(0), c.limit, nil)
				store = false // the next request resends the turn
			} else {
				ts, _ = flowServer(t, up.URL, protocol(1))
			}
			status, _, b := post(t, ts, flowtest.Responses, hostedStreamRequest(store, "get_weather"), nil)
			if status != http.StatusOK || up.count() != c.requests {
				t.Fatalf("status %d, %d upstream requests: %.400s", status, up.count(), b)
			}
			if strings.Contains(string(b), "mcp_approval_request") || strings.Contains(string(b), "UPSTREAM-SECRET") || strings.Contains(string(b), "mcp_call") {
				t.Fatalf("the client got an approval request, a call or the failed round: %s", b)
			}
			cs := readClientStream(t, b)
			if strings.Join(cs.types, ",") != c.types || len(cs.completed) != 1 || outputTypes(cs.completed[0]) != c.types || cs.completed[0].Get("id").Str != c.shown {
				t.Fatalf("items %v, completed %v:\n%.600s", cs.types, cs.completed, b)
			}
			denied := strings.Contains(strings.Join(c.api.first, ""), "eve@")
			if !strings.Contains(cs.text, "[promptgate] hosted MCP call crm/send_email not run: its approval request was not answered") ||
				denied != strings.Contains(cs.text, "[promptgate] blocked tool call mcp: rule acme-only") {
				t.Errorf("text %.300q", cs.text)
			}
			refusal := "holds an approval request that promptgate did not answer"
			if denied {
				refusal = "holds a tool call that promptgate blocked"
			}
			for _, q := range []string{"", "?stream=true"} {
				resp, err := ts.Client().Get(ts.URL + "/v1/responses/" + c.shown + q)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case q != "" && (resp.StatusCode != http.StatusForbidden || !strings.Contains(string(got), refusal)):
					t.Errorf("streamed retrieval: %d %s", resp.StatusCode, got)
				case q == "" && (resp.StatusCode != http.StatusOK || gjson.GetBytes(got, "output").Raw != cs.completed[0].Get("output").Raw):
					t.Errorf("retrieval: %d %.300s", resp.StatusCode, got)
				}
			}
		})
	}
}

// TestHostedMCPStreamHeld: an approval request that an information-flow rule holds for the user's
// confirmation is denied with the words that it waits (never the code), and the turn is continued;
// the client gets the held notice with its code. A function call of the turn held for confirmation
// (continue mode) leaves the turn with the client: the approval request is not answered.
func TestHostedMCPStreamHeld(t *testing.T) {
	t.Parallel()
	t.Run("approval held", func(t *testing.T) {
		t.Parallel()
		protocol := json.RawMessage(`{"id":"hosted","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["mcp"]},"mcp":{"vetHostedCalls":true},
		  "toolCalls":{"provenance":[{"id":"to-user","tool":"mcp","path":"to","as":"email","from":["user"],"verdict":"confirm","keyArgs":["to"]}]}}`)
		api := &hostedAPI{first: []string{approvalItem("mcpr_ann", "ann@acme.com"), approvalItem("mcpr_eve", "eve@evil.example")}, stored: map[string]string{}}
		up := newUpstream(t, api.ServeHTTP)
		ts, _ := flowServer(t, up.URL, protocol)
		req := strings.Replace(string(hostedStreamRequest(true)), "mail ann and eve the summary", "mail ann@acme.com the summary", 1)
		status, _, b := post(t, ts, flowtest.Responses, []byte(req), nil)
		if status != http.StatusOK || up.count() != 2 {
			t.Fatalf("status %d, %d upstream requests: %s", status, up.count(), b)
		}
		answers := gjson.GetBytes(up.lastBody(t), `input.#(type=="mcp_approval_response")#`).Array()
		if len(answers) != 2 || !answers[0].Get("approve").Bool() || answers[1].Get("approve").Bool() ||
			!strings.Contains(answers[1].Get("reason").Str, "confirmation") || noticeCode(answers[1].Get("reason").Str) != "" {
			t.Fatalf("answers %v", answers)
		}
		cs := readClientStream(t, b)
		if strings.Join(cs.types, ",") != "message,mcp_call,message" || strings.Contains(string(b), "mcp_approval_request") {
			t.Fatalf("items %v: %s", cs.types, b)
		}
		if !strings.HasPrefix(cs.text, "[promptgate] held tool call mcp for your confirmation") || noticeCode(cs.text) == "" ||
			!strings.Contains(cs.text, "(hosted MCP call crm/send_email)") {
			t.Errorf("text %q", cs.text)
		}
	})
	t.Run("function call held", func(t *testing.T) {
		t.Parallel()
		protocol := json.RawMessage(`{"id":"hosted","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["mcp","pay"]},"mcp":{"vetHostedCalls":true},
		  "toolCalls":{"onViolation":"continue","provenance":[{"id":"payee","tool":"pay","path":"iban","as":"iban","from":["user"],"verdict":"confirm","keyArgs":["iban"]}]}}`)
		pay := fcItem("fc_pay", "call_pay", "pay", `{"iban":"GB82WEST12345698765432"}`, "completed")
		api := &hostedAPI{first: []string{approvalItem("mcpr_ann", "ann@acme.com"), pay}, stored: map[string]string{}}
		up := newUpstream(t, api.ServeHTTP)
		ts, _ := flowServer(t, up.URL, protocol)
		status, _, b := post(t, ts, flowtest.Responses, hostedStreamRequest(true, "pay"), nil)
		if status != http.StatusOK || up.count() != 1 {
			t.Fatalf("status %d, %d upstream requests: %s", status, up.count(), b)
		}
		cs := readClientStream(t, b)
		if strings.Join(cs.types, ",") != "message,message" || !strings.Contains(cs.text, "held tool call pay") || noticeCode(cs.text) == "" ||
			!strings.Contains(cs.text, "hosted MCP call crm/send_email not run") || strings.Contains(string(b), "call_pay") {
			t.Errorf("items %v, text %q", cs.types, cs.text)
		}
	})
}

// TestHostedMCPStreamOfficialClient: openai-go's Responses stream reads the answered stream through
// the proxy without error: no approval request among its events, the hosted call the upstream ran
// and the text of both rounds, one completed response holding the call.
func TestHostedMCPStreamOfficialClient(t *testing.T) {
	t.Parallel()
	api := &hostedAPI{first: []string{listTools, mailingText, approvalItem("mcpr_ann", "ann@acme.com")}, stored: map[string]string{}}
	up := newUpstream(t, api.ServeHTTP)
	ts, _ := flowServer(t, up.URL, hostedProtocol(true))
	client := newClient(ts)
	mcp := responses.ToolParamOfMcp("crm")
	mcp.OfMcp.ServerURL = openai.String("https://crm.example.com/mcp")
	st := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-5",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("mail ann the summary")},
		Tools: []responses.ToolUnionParam{mcp},
	})
	var text strings.Builder
	var items []string
	var done []responses.Response
	last := int64(-1)
	for st.Next() {
		ev := st.Current()
		if ev.SequenceNumber <= last {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, last)
		}
		last = ev.SequenceNumber
		switch ev.Type {
		case "response.output_item.added":
			items = append(items, ev.Item.Type)
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			done = append(done, ev.Response)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(items, ",") != "mcp_list_tools,message,mcp_call,message" || text.String() != "Mailing Ann and Eve now.All sent." {
		t.Fatalf("items %v, text %q", items, text.String())
	}
	if len(done) != 1 || len(done[0].Output) != 4 || done[0].Output[2].Type != "mcp_call" || done[0].Output[2].ID != "mcp_mcpr_ann" {
		t.Fatalf("completed %+v", done)
	}
	if up.count() != 2 {
		t.Errorf("%d upstream requests", up.count())
	}
}

// TestHostedMCPRetrievalAsShown: a non-stream answer whose approval request promptgate let pass but
// could not answer (a function call of the turn reaches the client) is retrieved as it was shown —
// the notice, not the approval request the upstream stored — and a streamed retrieval of it is
// refused.
func TestHostedMCPRetrievalAsShown(t *testing.T) {
	t.Parallel()
	api := &hostedAPI{first: []string{approvalItem("mcpr_ann", "ann@acme.com"), fcItem("fc_1", "call_1", "get_weather", `{"city":"Oslo"}`, "completed")},
		stored: map[string]string{}}
	up := newUpstream(t, api.ServeHTTP)
	p, _ := sjson.SetBytes(hostedProtocol(true), "tools.allow", []string{"mcp", "get_weather"})
	ts, _ := flowServer(t, up.URL, p)
	req, _ := sjson.DeleteBytes(hostedStreamRequest(true, "get_weather"), "stream")
	status, _, b := post(t, ts, flowtest.Responses, req, nil)
	if status != http.StatusOK || outputTypes(gjson.ParseBytes(b)) != "message,function_call" || strings.Contains(string(b), "mcp_approval_request") {
		t.Fatalf("%d %s", status, b)
	}
	resp, err := ts.Client().Get(ts.URL + "/v1/responses/resp_1")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || gjson.GetBytes(got, "output").Raw != gjson.GetBytes(b, "output").Raw {
		t.Errorf("retrieval %d %s", resp.StatusCode, got)
	}
	resp, err = ts.Client().Get(ts.URL + "/v1/responses/resp_1?stream=true")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || strings.Contains(string(got), "mcp_approval_request") {
		t.Errorf("streamed retrieval %d %s", resp.StatusCode, got)
	}
}

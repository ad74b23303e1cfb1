package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

func TestBlockedMemoryBoundedAndDeduplicated(t *testing.T) {
	m := newBlockedMemory(2)
	m.remember("resp_a", blockedCall{CallID: "c1", Tool: "t"})
	m.remember("resp_a", blockedCall{CallID: "c1", Tool: "t"})
	m.remember("resp_a", blockedCall{CallID: "c2", Tool: "t"})
	m.remember("", blockedCall{CallID: "c3"})
	m.remember("resp_b", blockedCall{CallID: ""})
	if got := m.lookup("resp_a"); len(got) != 2 || got[0].CallID != "c1" || got[1].CallID != "c2" {
		t.Fatalf("resp_a: %+v", got)
	}
	if m.lookup("resp_b") != nil || m.lookup("") != nil {
		t.Fatal("a call without an id or a response without an id was kept")
	}
	m.remember("resp_b", blockedCall{CallID: "c4"})
	m.remember("resp_c", blockedCall{CallID: "c5"})
	if m.lookup("resp_a") != nil || m.lookup("resp_b") == nil || m.lookup("resp_c") == nil {
		t.Fatal("the oldest response was not the one forgotten")
	}
	got := m.lookup("resp_c")
	got[0].CallID = "changed"
	if m.lookup("resp_c")[0].CallID != "c5" {
		t.Fatal("lookup hands out the memory's own slice")
	}
}

func TestAnswerBlocked(t *testing.T) {
	calls := []blockedCall{{CallID: "call_1", Tool: "web_fetch", Reason: "not allowed"}, {CallID: "call_2", Tool: "x\ny", Reason: "r"}}
	out1 := `{"type":"function_call_output","call_id":"call_1","output":"[promptgate] blocked tool call web_fetch: not allowed (the call was not run)"}`
	for _, tc := range []struct{ name, in, want string }{
		{"string", `{"model":"m","input":"hi \"there\"","z":1}`,
			`{"model":"m","input":[` + out1 + `,{"type":"function_call_output","call_id":"call_2","output":"[promptgate] blocked tool call \"x\\ny\": r (the call was not run)"},{"role":"user","content":"hi \"there\""}],"z":1}`},
		{"array, one answered by the client", `{"input":[{"type":"function_call_output","call_id":"call_2","output":"mine"},{"role":"user","content":"u"}]}`,
			`{"input":[` + out1 + `,{"type":"function_call_output","call_id":"call_2","output":"mine"},{"role":"user","content":"u"}]}`},
		{"no input", `{"model":"m"}`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := answerBlocked([]byte(tc.in), calls)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !gjson.ValidBytes(got) || gjson.GetBytes(got, "input.#").Int() < 1 || n < 1 {
				t.Fatalf("%d %s", n, got)
			}
		})
	}
	// All answered: untouched.
	in := `{"input":[{"type":"function_call_output","call_id":"call_1","output":"a"},{"type":"function_call_output","call_id":"call_2","output":"b"}]}`
	if got, n, err := answerBlocked([]byte(in), calls); err != nil || n != 0 || string(got) != in {
		t.Fatalf("%d %v %s", n, err, got)
	}
	// The bad form: an input that is neither a string nor an array is an error, not a silent pass.
	if _, _, err := answerBlocked([]byte(`{"input":{"role":"user"}}`), calls); err == nil {
		t.Fatal("an object input was accepted")
	}
}

func TestStoredResponseID(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/responses/resp_1":             "resp_1",
		"/v1/responses/resp_1/input_items": "",
		"/v1/responses/":                   "",
		"/v1/responses":                    "",
		"/v1/chat/completions/x":           "",
		// Spellings a loose upstream router takes for the same retrieval.
		"/v1/responses/resp_1/":     "resp_1",
		"/v1/Responses/resp_1":      "resp_1",
		"/v1/responses/resp_1;x":    "resp_1",
		"/v1/responses//resp_1":     "resp_1",
		"/v1/responses/resp_1%2F":   "resp_1",
		"/v1/responses/resp%5F1":    "resp_1",
		"/v1/responses/resp_1%20":   "resp_1",
		"/v1/responses/resp_1/../x": "x",
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://h"+path, nil)
		if got := storedResponseID(r); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	r, _ := http.NewRequest(http.MethodDelete, "http://h/v1/responses/resp_1", nil)
	if storedResponseID(r) != "" {
		t.Error("DELETE taken for a retrieval")
	}
}

// storingUpstream imitates the Responses API's storage: it keeps each answer by id, serves it on GET
// /v1/responses/{id}, and refuses a continuation that leaves a function_call of the previous response
// unanswered, as OpenAI does.
type storingUpstream struct {
	mu     sync.Mutex
	stored map[string]string
	n      int
	answer func(id string) string // the output items of the next answer
	stream bool
	inputs []string
}

func (u *storingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.Method == http.MethodGet {
		id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
		body, ok := u.stored[id]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	b, _ := io.ReadAll(r.Body)
	u.inputs = append(u.inputs, gjson.GetBytes(b, "input").Raw)
	if prev := gjson.GetBytes(b, "previous_response_id").Str; prev != "" {
		answered := map[string]bool{}
		for _, it := range gjson.GetBytes(b, "input").Array() {
			if it.Get("type").Str == "function_call_output" {
				answered[it.Get("call_id").Str] = true
			}
		}
		for _, it := range gjson.Get(u.stored[prev], "output").Array() {
			if it.Get("type").Str == "function_call" && !answered[it.Get("call_id").Str] {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = fmt.Fprintf(w, `{"error":{"message":"No tool output found for function call %s.","type":"invalid_request_error","param":"input","code":null}}`, it.Get("call_id").Str)
				return
			}
		}
	}
	u.n++
	id := fmt.Sprintf("resp_%d", u.n)
	items := u.answer(id)
	body := `{"id":"` + id + `","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[` + items + `]}`
	u.stored[id] = body
	if !gjson.GetBytes(b, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	ev := &respEvents{}
	ev.ev("response.created", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}`)
	for i, it := range gjson.Parse("[" + items + "]").Array() {
		if it.Get("type").Str == "function_call" {
			ev.call(i, it.Get("id").Str, it.Get("call_id").Str, it.Get("name").Str, it.Get("arguments").Str)
		} else {
			ev.text(i, it.Get("content.0.text").Str)
		}
	}
	ev.ev("response.completed", `"response":`+body)
	u.mu.Unlock()
	splitUpstream(ev.b.String(), 1)(w, r)
	u.mu.Lock()
}

// TestResponsesContinuationAfterBlockedCall: a blocked call stays in the upstream's stored response; the next
// turn (previous_response_id) still works because the proxy answers that call, and retrieving the stored
// response does not show it — non-stream and stream, with the official client.
func TestResponsesContinuationAfterBlockedCall(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			u := &storingUpstream{stored: map[string]string{}, answer: func(id string) string {
				if id == "resp_2" {
					return fcItem("fc_evil_"+id, "call_evil_"+id, "web_fetch", respBadArgs, "completed")
				}
				return fcItem("fc_good_"+id, "call_good_"+id, "get_weather", respGoodArgs, "completed") + "," +
					fcItem("fc_evil_"+id, "call_evil_"+id, "web_fetch", respBadArgs, "completed")
			}}
			up := newUpstream(t, u.ServeHTTP)
			ts, _ := newVetProxy(t, up.URL, "refuse")
			client := newClient(ts)
			ctx := context.Background()

			first := func(prev string) string {
				t.Helper()
				if !stream {
					got, err := client.Responses.New(ctx, respParams(prev))
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(got.RawJSON(), "call_evil") {
						t.Fatalf("blocked call leaked: %s", got.RawJSON())
					}
					return got.ID
				}
				st := client.Responses.NewStreaming(ctx, respParams(prev))
				var id string
				for st.Next() {
					if ev := st.Current(); ev.Type == "response.completed" {
						id = ev.Response.ID
						if strings.Contains(ev.RawJSON(), "call_evil") {
							t.Fatalf("blocked call leaked: %s", ev.RawJSON())
						}
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				return id
			}
			id1 := first("")
			// The client answers the call it saw; the proxy answers the one it blocked.
			p := respParams(id1)
			answer := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp":3}`)
			answer.OfFunctionCallOutput.CallID = openai.String("call_good_" + id1)
			p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{answer}}
			got, err := client.Responses.New(ctx, p)
			if err != nil {
				t.Fatalf("the continuation failed: %v", err)
			}
			u.mu.Lock()
			sent := u.inputs[len(u.inputs)-1]
			u.mu.Unlock()
			answers := gjson.Get(sent, `#(call_id=="call_evil_`+id1+`").output`).Str
			if answers != "[promptgate] blocked tool call web_fetch: rule docs-only: url does not match the pattern (the call was not run)" ||
				gjson.Get(sent, `#(call_id=="call_good_`+id1+`").output`).Str != `{"temp":3}` || strings.Contains(sent, "SECRET123") {
				t.Fatalf("upstream input %s", sent)
			}
			// resp_2 had only the blocked call: a plain string input continues it, kept as the user's message
			// after the proxy's answer.
			got3, err := client.Responses.New(ctx, respParams(got.ID))
			if err != nil {
				t.Fatalf("the continuation with a string input failed: %v", err)
			}
			u.mu.Lock()
			sent = u.inputs[len(u.inputs)-1]
			u.mu.Unlock()
			if gjson.Get(sent, "#").Int() != 2 || gjson.Get(sent, "0.call_id").Str != "call_evil_"+got.ID || gjson.Get(sent, "1").Raw != `{"role":"user","content":"go"}` {
				t.Fatalf("upstream input %s", sent)
			}
			// The fake upstream does refuse an unanswered call (else this test would prove nothing): resp_3's
			// allowed call is left unanswered by the client.
			var apiErr *openai.Error
			if _, err := client.Responses.New(ctx, respParams(got3.ID)); !errors.As(err, &apiErr) || !strings.Contains(apiErr.RawJSON(), "No tool output found for function call call_good_"+got3.ID) {
				t.Fatalf("the fake upstream accepted an unanswered allowed call: %v", err)
			}

			// The stored response, retrieved through the proxy, no longer holds the blocked call.
			var raw *http.Response
			stored, err := client.Responses.Get(ctx, id1, responses.ResponseGetParams{}, option.WithResponseInto(&raw))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(stored.RawJSON(), "call_evil") || !strings.Contains(stored.RawJSON(), "call_good_"+id1) || raw.Header.Get(HeaderBlocked) != "1" {
				t.Fatalf("stored response %s %v", stored.RawJSON(), raw.Header)
			}
		})
	}
}

// TestStoredResponseStreamRetrievalRefused: a streamed retrieval of a response with a blocked call is
// refused rather than shown; one without is passed as it is.
func TestStoredResponseStreamRetrievalRefused(t *testing.T) {
	s := &Server{blocked: newBlockedMemory(0), echoes: newInstructionMemory(0)}
	s.blocked.remember("resp_1", blockedCall{CallID: "call_evil", Tool: "web_fetch", Reason: "r"})
	mk := func(id string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://h/v1/responses/"+id+"?stream=true", nil)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader("data: {\"item\":{\"call_id\":\"call_evil\"}}\n\n")), Request: req}
	}
	resp := mk("resp_1")
	if err := s.stripStored(resp, "resp_1"); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	assertAPIError(t, resp, b, http.StatusForbidden, "tool_call_blocked")
	// The content type is parsed as everywhere else: letter case and parameters do not hide a stream.
	for _, ct := range []string{"Text/Event-Stream; charset=utf-8", " text/event-stream;charset=UTF-8"} {
		resp = mk("resp_1")
		resp.Header.Set("Content-Type", ct)
		if err := s.stripStored(resp, "resp_1"); err != nil {
			t.Fatalf("%q: %v", ct, err)
		}
		b, _ = io.ReadAll(resp.Body)
		assertAPIError(t, resp, b, http.StatusForbidden, "tool_call_blocked")
	}
	resp = mk("resp_2")
	if err := s.stripStored(resp, "resp_2"); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || !strings.Contains(string(b), "call_evil") {
		t.Fatalf("an unrelated stream was changed: %d %s", resp.StatusCode, b)
	}
	// A malformed stored body of a response with blocked calls fails as a malformed upstream answer.
	req, _ := http.NewRequest(http.MethodGet, "http://h/v1/responses/resp_1", nil)
	resp = &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"output":[{"type":"function_call","call_id":"call_evil"}`)), Request: req}
	if err := s.stripStored(resp, "resp_1"); err == nil {
		t.Fatal("a truncated stored response was passed")
	}
}

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

// storingUpstream imitates the Responses API's storage: it keeps each answer by id, serves it on
// GET /v1/responses/{id}, and refuses a continuation that leaves a function_call of the previous
// response unanswered, as OpenAI does.
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

// TestResponsesContinuationAfterBlockedCall: a blocked call stays in the upstream's stored
// response; the next turn (previous_response_id) still works because the proxy answers that call,
// and retrieving the stored response does not show it — non-stream and stream, with the official
// client.
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
			// resp_2 had only the blocked call: a plain string input continues it, kept as the
			// user's message after the proxy's answer.
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
			// The fake upstream does refuse an unanswered call (else this test would prove
			// nothing): resp_3's allowed call is left unanswered by the client.
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

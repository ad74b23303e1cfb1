package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// storingChat imitates Chat Completions' storage (store: true): it keeps each completion as the
// model wrote it and the messages it was sent, serves them on GET
// /v1/chat/completions/{id}[/messages], lists them on GET /v1/chat/completions and answers an
// update (POST /v1/chat/completions/{id}) with the completion.
type storingChat struct {
	mu       sync.Mutex
	n        int
	order    []string
	stored   map[string]string
	messages map[string]string
	calls    string // the tool_calls of the next answer
}

func newStoringChat(calls string) *storingChat {
	return &storingChat{stored: map[string]string{}, messages: map[string]string{}, calls: calls}
}

// add stores a completion that did not come through the proxy.
func (u *storingChat) add(id, body string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stored[id], _ = sjson.Set(body, "id", id)
	u.order = append(u.order, id)
}

func (u *storingChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	rest := strings.TrimPrefix(r.URL.Path, "/v1/chat/completions")
	id, sub, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	switch {
	case rest == "" && r.Method == http.MethodGet:
		var data []string
		for _, id := range u.order {
			data = append(data, u.stored[id])
		}
		_, _ = fmt.Fprintf(w, `{"object":"list","data":[%s],"has_more":false}`, strings.Join(data, ","))
	case rest == "" && r.Method == http.MethodPost:
		u.create(w, r)
	case sub == "messages":
		_, _ = fmt.Fprintf(w, `{"object":"list","data":%s,"has_more":false}`, u.messages[id])
	default:
		body, ok := u.stored[id]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":"not_found"}}`)
			return
		}
		_, _ = io.WriteString(w, body)
	}
}

func (u *storingChat) create(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.n++
	id := fmt.Sprintf("chatcmpl-%d", u.n)
	var msgs []string
	for i, m := range gjson.GetBytes(b, "messages").Array() {
		item, _ := sjson.Set(m.Raw, "id", fmt.Sprintf("%s-%d", id, i))
		msgs = append(msgs, item)
	}
	u.messages[id] = "[" + strings.Join(msgs, ",") + "]"
	body := `{"id":"` + id + `","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` + u.calls + `]},"finish_reason":"tool_calls"}]}`
	u.stored[id] = body
	u.order = append(u.order, id)
	if !gjson.GetBytes(b, "stream").Bool() {
		_, _ = io.WriteString(w, body)
		return
	}
	var sse strings.Builder
	chunk := func(delta, finish string) {
		fmt.Fprintf(&sse, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", id, delta, finish)
	}
	chunk(`{"role":"assistant","content":null}`, "null")
	for i, c := range gjson.Parse("[" + u.calls + "]").Array() {
		tc, _ := sjson.Set(c.Raw, "index", i)
		chunk(`{"tool_calls":[`+tc+`]}`, "null")
	}
	chunk(`{}`, `"tool_calls"`)
	sse.WriteString("data: [DONE]\n\n")
	u.mu.Unlock()
	splitUpstream(sse.String(), 7)(w, r)
	u.mu.Lock()
}

// TestStoredChatCompletionShowsWhatWasReleased: a completion created with store: true, one of whose
// calls promptgate blocked, is shown by every later read as the create showed it — its retrieval,
// the answer of an update and the listing (the blocked call's notice in place of the call,
// X-Promptgate-Blocked) — and the listing of its messages shows the client's own system text, never
// the layered prompt. A completion the proxy did not relay shows no call at all. Body and stream
// creates; an upstream base URL with a path.
func TestStoredChatCompletionShowsWhatWasReleased(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		base   string
	}{{"body", false, ""}, {"stream", true, ""}, {"base path", false, "/openai"}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newStoringChat(goodCall + "," + badHost)
			u.add("chatcmpl-elsewhere", completionWithCalls(badHost))
			up := newUpstream(t, http.StripPrefix(tc.base, u).ServeHTTP)
			ts, _ := newVetProxy(t, up.URL+tc.base, "refuse")

			req, _ := sjson.Set(vetRequest, "store", true)
			req, _ = sjson.Set(req, "stream", tc.stream)
			req, _ = sjson.SetRaw(req, "messages.-1", `{"role":"system","content":"You are the client's own assistant."}`)
			get := func(method, path, body string) (http.Header, string) {
				t.Helper()
				r, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
				if body != "" {
					r.Header.Set("Content-Type", "application/json")
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
				}
				return resp.Header, string(b)
			}
			if _, body := get(http.MethodPost, "/v1/chat/completions", req); strings.Contains(body, "SECRET123") || !strings.Contains(body, "call_good") {
				t.Fatalf("create: %s", body)
			}
			check := func(what string, h http.Header, c gjson.Result) {
				t.Helper()
				msg := c.Get("choices.0.message")
				if strings.Contains(c.Raw, "SECRET123") || strings.Contains(c.Raw, "call_evil") || msg.Get("tool_calls.#").Int() != 1 ||
					msg.Get("tool_calls.0.id").Str != "call_good" || c.Get("choices.0.finish_reason").Str != "tool_calls" {
					t.Fatalf("%s: %s", what, c.Raw)
				}
				if h != nil && h.Get(HeaderBlocked) == "" {
					t.Fatalf("%s: no %s header", what, HeaderBlocked)
				}
			}
			h, got := get(http.MethodGet, "/v1/chat/completions/chatcmpl-1", "")
			check("retrieval", h, gjson.Parse(got))
			h, got = get(http.MethodPost, "/v1/chat/completions/chatcmpl-1", `{"metadata":{"k":"v"}}`)
			check("update", h, gjson.Parse(got))

			h, got = get(http.MethodGet, "/v1/chat/completions", "")
			list := gjson.Parse(got)
			check("listing", nil, list.Get(`data.#(id=="chatcmpl-1")`))
			other := list.Get(`data.#(id=="chatcmpl-elsewhere")`)
			if other.Get("choices.0.message.tool_calls").Exists() || strings.Contains(other.Raw, "SECRET123") ||
				!strings.Contains(other.Get("choices.0.message.content").Str, "no record of releasing") ||
				other.Get("choices.0.finish_reason").Str != "stop" || h.Get(HeaderBlocked) != "2" {
				t.Fatalf("a completion the proxy did not relay, listed: %s %v", other.Raw, h)
			}

			_, got = get(http.MethodGet, "/v1/chat/completions/chatcmpl-1/messages", "")
			msgs := gjson.Get(got, "data")
			sys := msgs.Get(`#(role=="system")#`)
			if len(sys.Array()) != 1 || sys.Get("0.content").Str != "You are the client's own assistant." ||
				strings.Contains(got, "guarded") || msgs.Get(`#(role=="user").content`).Str != "go" {
				t.Fatalf("messages: %s", got)
			}
			// The fake upstream does keep the layered prompt (else this would prove nothing).
			u.mu.Lock()
			kept := u.messages["chatcmpl-1"]
			u.mu.Unlock()
			if !strings.Contains(kept, "guarded") {
				t.Fatalf("the upstream kept no layered prompt: %s", kept)
			}
		})
	}
}

// TestResponsesRetrievalUnderAnUpstreamBasePath: with an upstream base URL whose path is not /v1 (a
// gateway or Azure-style prefix), a retrieved stored response is still edited: the route is read
// from the path the client sent, not from the one that went upstream.
func TestResponsesRetrievalUnderAnUpstreamBasePath(t *testing.T) {
	u := &storingUpstream{stored: map[string]string{}, answer: func(id string) string {
		return fcItem("fc_good_"+id, "call_good_"+id, "get_weather", respGoodArgs, "completed") + "," +
			fcItem("fc_evil_"+id, "call_evil_"+id, "web_fetch", respBadArgs, "completed")
	}}
	up := newUpstream(t, http.StripPrefix("/gateway", u).ServeHTTP)
	ts, _ := newVetProxy(t, up.URL+"/gateway", "refuse")
	r, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/responses", strings.NewReader(`{"model":"m","input":"go","tools":[`+
		`{"type":"function","name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}}}},`+
		`{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`))
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	created, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(created), "call_evil") {
		t.Fatalf("create: %d %s", resp.StatusCode, created)
	}
	resp, err = http.Get(ts.URL + "/v1/responses/resp_1")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(got), "call_evil") || !strings.Contains(string(got), "call_good_resp_1") || resp.Header.Get(HeaderBlocked) != "1" {
		t.Fatalf("retrieval: %d %s %v", resp.StatusCode, got, resp.Header)
	}
}

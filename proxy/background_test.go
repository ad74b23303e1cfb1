package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// bgUpstream imitates the Responses API's background mode: a POST with "background": true is
// answered at once with a queued response (no output); GET /v1/responses/{id} then answers with
// what get returns, which a test sets (the completed response, an SSE stream for ?stream=true, or a
// bad form).
type bgUpstream struct {
	mu    sync.Mutex
	n     int
	posts []string
	gets  []string
	// queued answers a POST; nil means the standard queued body.
	queued func(w http.ResponseWriter, id string, stream bool)
	get    func(w http.ResponseWriter, r *http.Request, id string)
}

func (u *bgUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	if r.Method == http.MethodGet {
		id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
		u.gets = append(u.gets, r.URL.RequestURI())
		get := u.get
		u.mu.Unlock()
		get(w, r, id)
		return
	}
	b, _ := io.ReadAll(r.Body)
	u.posts = append(u.posts, string(b))
	u.n++
	id := fmt.Sprintf("resp_bg_%d", u.n)
	queued := u.queued
	u.mu.Unlock()
	stream := gjson.GetBytes(b, "stream").Bool()
	if queued != nil {
		queued(w, id, stream)
		return
	}
	if stream {
		ev := &respEvents{}
		ev.ev("response.created", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"queued","background":true,"model":"gpt-4.1","output":[]}`)
		ev.ev("response.queued", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"queued","background":true,"model":"gpt-4.1","output":[]}`)
		ev.ev("response.completed", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"completed","background":true,"model":"gpt-4.1","output":[]}`)
		splitUpstream(ev.b.String(), 5)(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, queuedJSON(id))
}

func (u *bgUpstream) lastPost() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.posts[len(u.posts)-1]
}

func queuedJSON(id string) string {
	return `{"id":"` + id + `","object":"response","created_at":1,"status":"queued","background":true,"model":"gpt-4.1","output":[]}`
}

// completedJSON is the completed background response id with the given output items.
func completedJSON(id string, items ...string) string {
	return `{"id":"` + id + `","object":"response","created_at":1,"status":"completed","background":true,"model":"gpt-4.1","output":[` + strings.Join(items, ",") + `]}`
}

// goodAndEvil are an allowed call and one that breaks the docs-only rule.
var goodAndEvil = []string{
	fcItem("fc_good", "call_good", "get_weather", respGoodArgs, "completed"),
	fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed"),
}

// serveJSON answers a retrieval with body.
func serveJSON(body string) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// bgRequest is a background Responses request that declares web_fetch and get_weather.
const bgRequest = `{"model":"m","background":true,"input":"go","tools":[{"type":"function","name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}},{"type":"function","name":"get_weather"}]}`

func getFrom(t *testing.T, ts *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// toolEvents are the tool_call events of the decision log, as tool/verdict.
func toolEvents(rec *memAudit) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for _, e := range rec.events {
		if e.Kind == "tool_call" {
			out = append(out, e.Tool+"/"+e.Verdict)
		}
	}
	return out
}

// TestBackgroundPollVettedOfficialClient: a background request is answered queued; the app polls
// with the official client and gets the completed response with the disallowed call removed and the
// allowed one as sent; the decisions are logged once although the app polls twice; the next turn
// answers the blocked call.
func TestBackgroundPollVettedOfficialClient(t *testing.T) {
	u := &bgUpstream{}
	u.get = serveJSON(completedJSON("resp_bg_1", goodAndEvil...))
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	client := newClient(ts)
	ctx := context.Background()

	p := respParams("")
	p.Background = openai.Bool(true)
	queued, err := client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if queued.ID != "resp_bg_1" || queued.Status != "queued" || len(queued.Output) != 0 {
		t.Fatalf("queued answer %s", queued.RawJSON())
	}
	if !gjson.Get(u.lastPost(), "background").Bool() {
		t.Fatalf("background not sent upstream: %s", u.lastPost())
	}
	for poll := range 2 {
		var raw *http.Response
		got, err := client.Responses.Get(ctx, queued.ID, responses.ResponseGetParams{}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Output) != 1 || got.Output[0].AsFunctionCall().CallID != "call_good" || got.Output[0].AsFunctionCall().Arguments != respGoodArgs {
			t.Fatalf("poll %d: output %s", poll, got.RawJSON())
		}
		if strings.Contains(got.RawJSON(), "call_evil") || strings.Contains(got.RawJSON(), "SECRET123") {
			t.Fatalf("poll %d: the disallowed call of a background response reached the client: %s", poll, got.RawJSON())
		}
		if raw.Header.Get(HeaderBlocked) != "1" || raw.Header.Get(HeaderProtocol) != "guarded" {
			t.Fatalf("poll %d: headers %v", poll, raw.Header)
		}
	}
	if got := strings.Join(toolEvents(rec), ","); got != "get_weather/allowed,web_fetch/blocked" {
		t.Fatalf("decision log %q, want each call once", got)
	}
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == "tool_call" && (e.Protocol != "guarded" || e.RequestID == "" || e.ArgsSHA256 == "") {
			t.Errorf("event %+v", e)
		}
		if e.Tool == "web_fetch" && e.Rule != "docs-only" {
			t.Errorf("event %+v", e)
		}
	}
	rec.mu.Unlock()

	// The next turn: the proxy answers the blocked call for the upstream, the client answers its
	// own.
	next := respParams(queued.ID)
	answer := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp":3}`)
	answer.OfFunctionCallOutput.CallID = openai.String("call_good")
	next.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{answer}}
	if _, err := client.Responses.New(ctx, next); err != nil {
		t.Fatal(err)
	}
	sent := gjson.Get(u.lastPost(), "input")
	if sent.Get(`#(call_id=="call_evil").output`).Str != "[promptgate] blocked tool call web_fetch: rule docs-only: url does not match the pattern (the call was not run)" ||
		sent.Get(`#(call_id=="call_good").output`).Str != `{"temp":3}` {
		t.Fatalf("next turn input %s", sent.Raw)
	}
}

// TestBackgroundPollModes: refuse with every call blocked leaves the notice; error makes the poll a
// 403; audit passes the call and logs it as audited.
func TestBackgroundPollModes(t *testing.T) {
	evil := fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")
	for _, tc := range []struct {
		mode string
		want func(t *testing.T, resp *http.Response, b []byte)
		log  string
	}{
		{"refuse", func(t *testing.T, resp *http.Response, b []byte) {
			if resp.StatusCode != 200 || strings.Contains(string(b), "evil") || gjson.GetBytes(b, "output.#").Int() != 1 ||
				gjson.GetBytes(b, "output.0.content.0.text").Str != "[promptgate] blocked tool call web_fetch: rule docs-only: url does not match the pattern" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		}, "web_fetch/blocked"},
		{"error", func(t *testing.T, resp *http.Response, b []byte) {
			assertAPIError(t, resp, b, http.StatusForbidden, "tool_call_blocked")
			if strings.Contains(string(b), "evil") || strings.Contains(string(b), "SECRET123") {
				t.Fatalf("blocked call in the error: %s", b)
			}
		}, "web_fetch/blocked"},
		{"audit", func(t *testing.T, resp *http.Response, b []byte) {
			if resp.StatusCode != 200 || gjson.GetBytes(b, "output.0.call_id").Str != "call_evil" || resp.Header.Get(HeaderBlocked) != "" {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
			}
		}, "web_fetch/audited"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			u := &bgUpstream{get: serveJSON(completedJSON("resp_bg_1", evil))}
			up := newUpstream(t, u.ServeHTTP)
			ts, rec := newVetProxy(t, up.URL, tc.mode)
			resp, b := postTo(t, ts, PathResponses, bgRequest, nil)
			if resp.StatusCode != 200 || gjson.GetBytes(b, "status").Str != "queued" {
				t.Fatalf("queued: %d %s", resp.StatusCode, b)
			}
			resp, b = getFrom(t, ts, PathResponses+"/resp_bg_1")
			tc.want(t, resp, b)
			resp, b = getFrom(t, ts, PathResponses+"/resp_bg_1")
			tc.want(t, resp, b)
			if got := strings.Join(toolEvents(rec), ","); got != tc.log {
				t.Fatalf("decision log %q, want %q", got, tc.log)
			}
		})
	}
}

// TestBackgroundPollLooseSpellings: every spelling of the retrieval that a loose upstream router
// takes is vetted.
func TestBackgroundPollLooseSpellings(t *testing.T) {
	u := &bgUpstream{get: serveJSON(completedJSON("resp_bg_1", goodAndEvil...))}
	up := newUpstream(t, u.ServeHTTP)
	ts, _ := newVetProxy(t, up.URL, "refuse")
	postTo(t, ts, PathResponses, bgRequest, nil)
	for _, p := range []string{"/v1/responses/resp_bg_1/", "/v1/Responses/resp_bg_1", "/v1/responses/resp_bg_1;x", "/v1/responses/resp%5Fbg_1"} {
		resp, b := getFrom(t, ts, p)
		if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || !strings.Contains(string(b), "call_good") {
			t.Errorf("%s: %d %s", p, resp.StatusCode, b)
		}
	}
}

// bgStream is the SSE stream of a completed background response with text, an allowed and a
// disallowed call.
func bgStream(id string) string {
	ev := &respEvents{}
	ev.ev("response.created", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"in_progress","background":true,"model":"gpt-4.1","output":[]}`)
	ev.text(0, "Let me check. ").
		call(1, "fc_good", "call_good", "get_weather", respGoodArgs).
		call(2, "fc_evil", "call_evil", "web_fetch", respBadArgs)
	ev.ev("response.completed", `"response":{"id":"`+id+`","object":"response","created_at":1,"status":"completed","background":true,"model":"gpt-4.1","output":[`+strings.Join(ev.output, ",")+`]}`)
	return ev.b.String()
}

// TestBackgroundStreamedRetrieval: GET /v1/responses/{id}?stream=true of a remembered background
// response goes through the stream vetting (upstream writes of 1..3 bytes), with the official
// client too; the decisions are logged once over two retrievals.
func TestBackgroundStreamedRetrieval(t *testing.T) {
	u := &bgUpstream{get: func(w http.ResponseWriter, r *http.Request, id string) {
		// The official client asks with a JSON body {"stream":true} on the GET; others with
		// ?stream=true.
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("stream") != "true" && !gjson.GetBytes(b, "stream").Bool() {
			http.Error(w, "want stream", http.StatusTeapot)
			return
		}
		splitUpstream(bgStream(id), 3)(w, r)
	}}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	postTo(t, ts, PathResponses, bgRequest, nil)

	resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1?stream=true")
	out := string(b)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, out)
	}
	if strings.Contains(out, "call_evil") || strings.Contains(out, "fc_evil") || strings.Contains(out, "SECRET123") {
		t.Fatalf("the disallowed call was streamed: %s", out)
	}
	if !strings.Contains(out, `"call_id":"call_good"`) || !strings.Contains(out, "[promptgate] blocked tool call web_fetch") || !strings.Contains(out, "response.completed") {
		t.Fatalf("stream %s", out)
	}

	client := newClient(ts)
	st := client.Responses.GetStreaming(context.Background(), "resp_bg_1", responses.ResponseGetParams{})
	var final responses.Response
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(final.RawJSON(), "call_evil") || len(final.Output) != 3 || final.Output[1].AsFunctionCall().CallID != "call_good" {
		t.Fatalf("final %s", final.RawJSON())
	}
	if got := strings.Join(toolEvents(rec), ","); got != "get_weather/allowed,web_fetch/blocked" {
		t.Fatalf("decision log %q", got)
	}
}

// TestBackgroundStreamedCreation: a background request with stream on reports its id in the stream;
// a later (non-stream) poll of it is vetted.
func TestBackgroundStreamedCreation(t *testing.T) {
	u := &bgUpstream{get: serveJSON(completedJSON("resp_bg_1", goodAndEvil...))}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	resp, b := postTo(t, ts, PathResponses, strings.Replace(bgRequest, `"background":true`, `"background":true,"stream":true`, 1), nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "resp_bg_1") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = getFrom(t, ts, PathResponses+"/resp_bg_1")
	if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || !strings.Contains(string(b), "call_good") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := strings.Join(toolEvents(rec), ","); got != "get_weather/allowed,web_fetch/blocked" {
		t.Fatalf("decision log %q", got)
	}
}

// TestBackgroundInProgressCallWithheld: a poll while a call is still being generated shows neither
// the call nor a decision about it; the poll that has it complete vets it once.
func TestBackgroundInProgressCallWithheld(t *testing.T) {
	var mu sync.Mutex
	body := `{"id":"resp_bg_1","object":"response","status":"in_progress","background":true,"output":[` +
		fcItem("fc_evil", "call_evil", "web_fetch", `{"url":"https://evil.exa`, "in_progress") + `]}`
	u := &bgUpstream{get: func(w http.ResponseWriter, r *http.Request, id string) {
		mu.Lock()
		defer mu.Unlock()
		serveJSON(body)(w, r, id)
	}}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	postTo(t, ts, PathResponses, bgRequest, nil)
	resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1")
	if resp.StatusCode != 200 || strings.Contains(string(b), "evil") || gjson.GetBytes(b, "output.#").Int() != 0 || len(toolEvents(rec)) != 0 {
		t.Fatalf("%d %s %v", resp.StatusCode, b, toolEvents(rec))
	}
	mu.Lock()
	body = completedJSON("resp_bg_1", fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed"))
	mu.Unlock()
	resp, b = getFrom(t, ts, PathResponses+"/resp_bg_1")
	if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || resp.Header.Get(HeaderBlocked) != "1" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := strings.Join(toolEvents(rec), ","); got != "web_fetch/blocked" {
		t.Fatalf("decision log %q", got)
	}
}

// TestBackgroundNotRememberedPassesThrough: a response created without background and a response id
// the proxy never saw (another instance's, or one from before a restart) are retrieved as before:
// passed through unchanged. (One it has forgotten is refused:
// TestRetrievalAfterTheMemoryWasFlooded.)
func TestBackgroundNotRememberedPassesThrough(t *testing.T) {
	stored := completedJSON("resp_x", goodAndEvil...)
	u := &bgUpstream{get: serveJSON(stored), queued: func(w http.ResponseWriter, id string, _ bool) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, queuedJSON(id))
	}}
	up := newUpstream(t, u.ServeHTTP)
	o, _ := vetOptions(t, up.URL, "refuse", "")
	o.Engine.surfaces = surfaces(EngineOptions{StoredResponses: 1})
	ts := serveProxy(t, o)

	// Not background: the POST is vetted as always (no call here) and its retrieval is passed.
	for _, req := range []string{
		strings.Replace(bgRequest, `"background":true,`, ``, 1),
		strings.Replace(bgRequest, `"background":true`, `"background":false`, 1),
		strings.Replace(bgRequest, `"background":true`, `"background":null`, 1),
	} {
		resp, b := postTo(t, ts, PathResponses, req, nil)
		if resp.StatusCode != 200 || string(b) != queuedJSON(gjson.GetBytes(b, "id").Str) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		resp, got := getFrom(t, ts, PathResponses+"/"+gjson.GetBytes(b, "id").Str)
		if resp.StatusCode != 200 || string(got) != stored {
			t.Fatalf("a non-background retrieval was changed: %d %s", resp.StatusCode, got)
		}
	}
	// An unknown id.
	if resp, got := getFrom(t, ts, PathResponses+"/resp_unknown"); resp.StatusCode != 200 || string(got) != stored {
		t.Fatalf("unknown id: %d %s", resp.StatusCode, got)
	}
	if u.n != 3 {
		t.Fatalf("upstream posts %d", u.n)
	}
}

// TestBackgroundBadForms: every bad form of a remembered background response's retrieval fails
// closed as a malformed upstream answer (502 upstream_error), and a queued answer without an id is
// refused, since its retrievals could not be vetted.
func TestBackgroundBadForms(t *testing.T) {
	evilJSON := fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")
	for _, tc := range []struct {
		name   string
		get    func(w http.ResponseWriter, r *http.Request, id string)
		status int
		code   string
	}{
		{"truncated JSON", serveJSON(`{"id":"resp_bg_1","output":[` + evilJSON), 502, "upstream_error"},
		{"not an object", serveJSON(`[` + evilJSON + `]`), 502, "upstream_error"},
		{"duplicate keys", serveJSON(`{"id":"resp_bg_1","output":[],"output":[` + evilJSON + `]}`), 502, "upstream_error"},
		{"HTML", func(w http.ResponseWriter, _ *http.Request, _ string) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>"+evilJSON+"</html>")
		}, 502, "upstream_error"},
		{"unexpected success status", func(w http.ResponseWriter, _ *http.Request, _ string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, completedJSON("resp_bg_1", evilJSON))
		}, 502, "upstream_error"},
		{"error status with a non-JSON body", func(w http.ResponseWriter, _ *http.Request, _ string) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "oops "+evilJSON)
		}, 502, "upstream_error"},
		{"stream cut before its end", func(w http.ResponseWriter, r *http.Request, id string) {
			raw := bgStream(id)
			splitUpstream(raw[:strings.Index(raw, "event: response.completed")], 4)(w, r)
		}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &bgUpstream{get: tc.get}
			up := newUpstream(t, u.ServeHTTP)
			ts, _ := newVetProxy(t, up.URL, "refuse")
			postTo(t, ts, PathResponses, bgRequest, nil)
			resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1?stream=true")
			if strings.Contains(string(b), "call_evil") || strings.Contains(string(b), "SECRET123") {
				t.Fatalf("the disallowed call got through: %s", b)
			}
			if tc.code != "" {
				assertAPIError(t, resp, b, tc.status, tc.code)
				return
			}
			if resp.StatusCode != tc.status || !strings.Contains(string(b), `"code":"upstream_stream_truncated"`) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}

	// A JSON error (the response is gone upstream) is passed on as it is.
	u := &bgUpstream{get: func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"message":"No response found","type":"invalid_request_error","param":null,"code":null}}`)
	}}
	up := newUpstream(t, u.ServeHTTP)
	ts, _ := newVetProxy(t, up.URL, "refuse")
	postTo(t, ts, PathResponses, bgRequest, nil)
	if resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1"); resp.StatusCode != 404 || gjson.GetBytes(b, "error.message").Str != "No response found" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}

	// A queued answer without a usable id.
	for _, body := range []string{
		`{"object":"response","status":"queued","background":true,"output":[]}`,
		`{"id":7,"object":"response","status":"queued","background":true,"output":[]}`,
		`{"id":"","object":"response","status":"queued","background":true,"output":[]}`,
	} {
		u := &bgUpstream{queued: func(w http.ResponseWriter, _ string, _ bool) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		}}
		up := newUpstream(t, u.ServeHTTP)
		ts, _ := newVetProxy(t, up.URL, "refuse")
		resp, b := postTo(t, ts, PathResponses, bgRequest, nil)
		assertAPIError(t, resp, b, http.StatusBadGateway, "upstream_error")
		// Without background the same answer is passed, as before.
		resp, b = postTo(t, ts, PathResponses, strings.Replace(bgRequest, `"background":true,`, ``, 1), nil)
		if resp.StatusCode != 200 || string(b) != body {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
}

// TestBackgroundPolicyIsTheRequests: the retrieval is vetted with the policy of the request that
// created the response, not with another request's: a tool that request did not declare stays
// refused even if a later request declares it.
func TestBackgroundPolicyIsTheRequests(t *testing.T) {
	weather := fcItem("fc_w", "call_w", "get_weather", respGoodArgs, "completed")
	u := &bgUpstream{get: serveJSON(completedJSON("resp_bg_1", weather))}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	onlyFetch := `{"model":"m","background":true,"input":"go","tools":[{"type":"function","name":"web_fetch"}]}`
	postTo(t, ts, PathResponses, onlyFetch, nil)
	postTo(t, ts, PathResponses, strings.Replace(bgRequest, `"background":true,`, ``, 1), nil)
	resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1")
	if resp.StatusCode != 200 || strings.Contains(string(b), "call_w") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := strings.Join(toolEvents(rec), ","); got != "get_weather/blocked" {
		t.Fatalf("decision log %q", got)
	}
}

// TestBackgroundResumedStream: a streamed retrieval resumed mid-response (starting_after) begins
// inside the disallowed call, without its output_item.added: the call is still blocked, and the
// allowed call, which only the final response holds, is vetted there.
func TestBackgroundResumedStream(t *testing.T) {
	u := &bgUpstream{get: func(w http.ResponseWriter, r *http.Request, id string) {
		raw := bgStream(id)
		i := strings.LastIndex(raw[:strings.Index(raw, `"item_id":"fc_evil"`)], "event: ")
		splitUpstream(raw[i:], 4)(w, r)
	}}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	postTo(t, ts, PathResponses, bgRequest, nil)
	resp, b := getFrom(t, ts, PathResponses+"/resp_bg_1?stream=true&starting_after=20")
	if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || strings.Contains(string(b), "SECRET123") || !strings.Contains(string(b), `"call_id":"call_good"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := strings.Join(toolEvents(rec), ","); got != "web_fetch/blocked,get_weather/allowed" {
		t.Fatalf("decision log %q", got)
	}
}

// TestBackgroundStreamedCreationWithCalls: calls vetted in the creating stream are not logged again
// when a poll shows the same calls; a loose background value ("true" as a string) is treated as
// background.
func TestBackgroundStreamedCreationWithCalls(t *testing.T) {
	u := &bgUpstream{
		queued: func(w http.ResponseWriter, id string, stream bool) {
			if !stream {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, queuedJSON(id))
				return
			}
			splitUpstream(bgStream(id), 6)(w, nil)
		},
		get: func(w http.ResponseWriter, r *http.Request, id string) {
			raw := bgStream(id)
			final := raw[strings.Index(raw, `"type":"response.completed"`):]
			serveJSON(gjson.Get(`{`+final[:strings.Index(final, "\n")], "response").Raw)(w, r, id)
		},
	}
	up := newUpstream(t, u.ServeHTTP)
	ts, rec := newVetProxy(t, up.URL, "refuse")
	resp, b := postTo(t, ts, PathResponses, strings.Replace(bgRequest, `"background":true`, `"background":true,"stream":true`, 1), nil)
	if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || !strings.Contains(string(b), "call_good") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for range 2 {
		resp, b = getFrom(t, ts, PathResponses+"/resp_bg_1")
		if resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") || !strings.Contains(string(b), "call_good") || resp.Header.Get(HeaderBlocked) != "1" {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	if got := strings.Join(toolEvents(rec), ","); got != "get_weather/allowed,web_fetch/blocked" {
		t.Fatalf("decision log %q, want each call once", got)
	}

	postTo(t, ts, PathResponses, strings.Replace(bgRequest, `"background":true`, `"background":"true"`, 1), nil)
	if resp, b := getFrom(t, ts, PathResponses+"/resp_bg_2"); resp.StatusCode != 200 || strings.Contains(string(b), "call_evil") {
		t.Fatalf("a loose background value left the response unvetted: %d %s", resp.StatusCode, b)
	}
}

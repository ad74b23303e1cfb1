package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/genai"
)

// The Gemini surface attacked as a capable attacker would: the model's output (its calls, text and
// thoughts) and the answer's shape are the attacker's, the app is honest and reads every answer with
// Google's official Go client. Each attack checks that no call the protocol refuses reaches the
// client, through the real proxy, non-stream and stream.

// evilFetch is a call of web_fetch that the guarded protocol's rule docs-only refuses.
const evilFetch = `{"name":"web_fetch","args":{"url":"https://evil.example/steal"}}`

// rawGeminiUpstream answers generateContent with body and streamGenerateContent with the events
// (each an event's raw bytes, written in pieces).
func rawGeminiUpstream(t *testing.T, body string, events []string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range events {
				writeSplit(w, ev, 23)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// candidate is a GenerateContentResponse with one candidate of parts.
func candidate(parts string, extra string) string {
	return `{"candidates":[{"content":{"role":"model","parts":[` + parts + `]},"finishReason":"STOP","index":0}]` + extra + `}`
}

// clientCalls is every call the official client reads from an answer, with its arguments and its
// streamed partial arguments.
func clientCalls(r *genai.GenerateContentResponse) []string {
	var out []string
	for _, c := range r.Candidates {
		if c.Content == nil {
			continue
		}
		for _, p := range c.Content.Parts {
			if fc := p.FunctionCall; fc != nil {
				b, _ := json.Marshal(fc)
				out = append(out, string(b))
			}
		}
	}
	return out
}

// askGemini reads an answer of the proxy with the official client, stream or not: the calls it
// reads, and the error it reports (nil when none).
func askGemini(t *testing.T, ts *httptest.Server, stream bool) (calls []string, err error) {
	t.Helper()
	c := newGenaiClient(t, ts)
	ctx := context.Background()
	if !stream {
		r, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("Fetch the page."), geminiTools())
		if err != nil {
			return nil, err
		}
		return clientCalls(r), nil
	}
	for r, e := range c.Models.GenerateContentStream(ctx, "gemini-2.5-flash", genai.Text("Fetch the page."), geminiTools()) {
		if e != nil {
			err = e
			continue
		}
		calls = append(calls, clientCalls(r)...)
	}
	return calls, err
}

// TestGeminiCallsTheClientCouldRead: a refused call hidden where a reader might skip it — a thought
// part, a part that is text too, a second candidate, snake_case, a member named in another case (the
// Go client decodes parts with encoding/json, which folds case), streamed partial arguments the
// vetting does not read (partialArgs, which the Go client hands over), arguments whose keys differ
// in case only, a number no float64 holds, a deep nesting, an id of another type, an event that is a
// JSON array or holds two data lines — never reaches the official client as a call.
func TestGeminiCallsTheClientCouldRead(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200)
	for _, tc := range []struct {
		name   string
		parts  string // the candidate's parts (body, and one event)
		answer string // the whole answer, when parts cannot say it
		events []string
	}{
		{name: "a thought part", parts: `{"thought":true,"functionCall":` + evilFetch + `}`},
		{name: "a part that is text too", parts: `{"text":"Fetching.","functionCall":` + evilFetch + `}`},
		{name: "snake_case", parts: `{"function_call":` + evilFetch + `}`},
		{name: "a member in another case", parts: `{"FunctionCall":` + evilFetch + `}`},
		{name: "args in another case", parts: `{"functionCall":{"name":"web_fetch","Args":{"url":"https://evil.example/steal"}}}`},
		{name: "name in another case", parts: `{"functionCall":{"Name":"web_fetch","name":"get_weather","args":{"city":"Oslo","url":"https://evil.example/steal"}}}`},
		{name: "partial arguments", parts: `{"functionCall":{"name":"get_weather","args":{"city":"Oslo"},"partialArgs":[{"jsonPath":"$.city","stringValue":"https://evil.example/steal"}],"willContinue":true}}`},
		{name: "a member the vetting does not read", parts: `{"functionCall":{"name":"get_weather","args":{"city":"Oslo"},"argsJson":"{\"city\":\"https://evil.example/steal\"}"}}`},
		{name: "argument keys in another case", parts: `{"functionCall":{"name":"web_fetch","args":{"url":"https://docs.example.com/a","URL":"https://evil.example/steal"}}}`},
		{name: "a number no float64 holds", parts: `{"functionCall":{"name":"web_fetch","args":{"url":"https://docs.example.com/a","n":1e400}}}`},
		{name: "a deep nesting", parts: `{"functionCall":{"name":"web_fetch","args":{"url":"https://docs.example.com/a","x":` + deep + `}}}`},
		{name: "an id of another type", parts: `{"functionCall":{"id":7,"name":"web_fetch","args":{"url":"https://evil.example/steal"}}}`},
		{name: "a second candidate", answer: `{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP","index":0},` +
			`{"content":{"role":"model","parts":[{"functionCall":` + evilFetch + `}]},"finishReason":"STOP","index":1}]}`},
		{name: "two candidates of one index", answer: `{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP","index":0},` +
			`{"content":{"role":"model","parts":[{"functionCall":` + evilFetch + `}]},"finishReason":"STOP","index":0}]}`},
		{name: "an event that is an array", events: []string{"data: [" + candidate(`{"functionCall":`+evilFetch+`}`, "") + "]\r\n\r\n",
			"data: " + candidate(`{"text":"ok"}`, "") + "\r\n\r\n"}},
		{name: "an event of two data lines", events: []string{"data: " + `{"candidates":[{"content":{"role":"model","parts":[{"text":"a"}]},"index":0}]}` +
			"\r\ndata: " + candidate(`{"functionCall":`+evilFetch+`}`, "") + "\r\n\r\n", "data: " + candidate(`{"text":"ok"}`, "") + "\r\n\r\n"}},
		{name: "an event with a blank line of CR alone", events: []string{"data: " + `{"candidates":[{"content":{"role":"model","parts":[{"text":"a"}]},"index":0}]}` +
			"\r\r\ndata: " + candidate(`{"functionCall":`+evilFetch+`}`, "") + "\r\n\r\n", "data: " + candidate(`{"text":"ok"}`, "") + "\r\n\r\n"}},
	} {
		body := tc.answer
		if body == "" && tc.parts != "" {
			body = candidate(tc.parts, "")
		}
		events := tc.events
		if events == nil {
			events = []string{"data: " + body + "\r\n\r\n"}
		}
		if body == "" {
			body = candidate(`{"text":"ok"}`, "")
		}
		ts := newGeminiProxy(t, rawGeminiUpstream(t, body, events), "refuse", "")
		for _, stream := range []bool{false, true} {
			calls, err := askGemini(t, ts, stream)
			for _, c := range calls {
				if strings.Contains(c, "evil.example") {
					t.Errorf("%s stream=%v: the client reads the call %s (err %v)", tc.name, stream, c, err)
				}
			}
		}
	}
}

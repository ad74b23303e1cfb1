package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// writeSplit writes body to w in pieces of at most n bytes, flushing after each.
func writeSplit(w http.ResponseWriter, body string, n int) {
	for len(body) > 0 {
		k := min(n, len(body))
		_, _ = io.WriteString(w, body[:k])
		w.(http.Flusher).Flush()
		body = body[k:]
	}
}

// TestRedteamOddUpstreamBodies sends, through the real proxy, upstream answers whose framing some client reads
// as a call of a tool that is not allowed (or that breaks a rule): none of the call's bytes may reach the
// client, whatever the upstream's Content-Type says.
func TestRedteamOddUpstreamBodies(t *testing.T) {
	evilEntry := `{"index":0,"id":"call_EVIL","type":"function","function":{"name":"delete_all","arguments":"{\"k\":\"SECRET\"}"}}`
	evilChunk := `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[` + evilEntry + `]},"finish_reason":null}]}`
	evilBody := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[` + evilEntry + `]},"finish_reason":"tool_calls"}]}`
	cases := []struct{ name, ct, body string }{
		{"JSON body labelled as a stream", "text/event-stream", evilBody + "\n\n"},
		{"pretty JSON body labelled as a stream", "text/event-stream", strings.ReplaceAll(evilBody, ",", ",\n  ") + "\n\n"},
		{"stream with a lone CR", "text/event-stream", "data: \r" + evilChunk + "\n\ndata: [DONE]\n\n"},
		{"stream with CR CR LF", "text/event-stream; charset=utf-8", "data: {\"choices\":[{\"index\":0,\"delta\":\r\r\ndata: {\"tool_calls\":[" + evilEntry + "]}\r\r\ndata: }]}\n\ndata: [DONE]\n\n"},
		{"stream with a BOM", "text/event-stream", "\ufeffdata: " + evilChunk + "\n\ndata: [DONE]\n\n"},
		{"stream with upper-case keys", "text/event-stream", "data: " + strings.Replace(evilChunk, "tool_calls", "TOOL_CALLS", 1) + "\n\ndata: [DONE]\n\n"},
		{"SSE labelled as JSON", "application/json", "data: " + evilChunk + "\n\ndata: [DONE]\n\n"},
		{"SSE without a type", "", "data: " + evilChunk + "\n\ndata: [DONE]\n\n"},
		{"body with upper-case keys", "application/json", strings.Replace(evilBody, "tool_calls", "Tool_Calls", 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.ct != "" {
					w.Header().Set("Content-Type", tc.ct)
				} else {
					w.Header()["Content-Type"] = nil
				}
				writeSplit(w, tc.body, 7)
			})
			ts, _ := newVetProxy(t, up.URL, "refuse")
			for _, stream := range []string{"false", "true"} {
				req := strings.Replace(vetRequest, `"model":"m"`, `"model":"m","stream":`+stream, 1)
				resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(req))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if bytes.Contains(got, []byte("call_EVIL")) || bytes.Contains(got, []byte("SECRET")) {
					t.Fatalf("stream=%s: %d %q", stream, resp.StatusCode, got)
				}
			}
		})
	}
}

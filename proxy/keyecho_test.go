package proxy

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// An upstream that echoes the credential it received — in an error message, a header, a stream,
// split across writes — never hands an operator key to the client, who must not learn it: every
// occurrence is overwritten with '*' (the length kept, so a Content-Length stays right), on
// rewritten and passed-through routes, for both keys. The rest of the answer is unchanged.
func TestUpstreamEchoOfAKeyIsMasked(t *testing.T) {
	t.Parallel()
	const openaiKey, anthKey = "sk-openai-operator-7Q", "sk-ant-operator-9Z"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		cred := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		w.Header().Set("X-Debug-Credential", cred)
		switch {
		case strings.Contains(r.Header.Get("X-Case"), "stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			text := "data: " + chunk(`{"content":"you sent `+cred+`"}`, "") + "\n\n"
			cut := strings.Index(text, cred) + 7 // the key straddles two writes
			_, _ = io.WriteString(w, text[:cut])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, text[cut:]+"data: "+chunk(`{}`, "stop")+"\n\ndata: [DONE]\n\n")
		default:
			body := `{"error":{"message":"Incorrect API key provided: ` + cred + `","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, body)
		}
	})
	u, _ := url.Parse(up.URL + "/v1")
	ts := serveProxy(t, Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{
		"openai": {URL: u, Key: bindKey(t, openaiKey, u)}, "anthropic": {URL: u, Key: bindKey(t, anthKey, u)}}})
	for _, c := range []struct{ name, method, path, body, key string }{
		{"chat error", "POST", PathChat, chatBody, openaiKey},
		{"chat stream", "POST", PathChat, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, openaiKey},
		{"messages error", "POST", PathMessages, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, anthKey},
		{"passthrough error", "GET", "/v1/models", "", openaiKey},
		{"passthrough stream", "GET", "/v1/models", "", openaiKey},
		{"anthropic passthrough", "POST", "/v1/messages/count_tokens", `{"model":"m","messages":[]}`, anthKey},
	} {
		resp, b := sendTo(t, ts, c.method, c.path, "", c.body, map[string]string{"Content-Type": "application/json", "X-Case": c.name})
		got := string(b) + resp.Header.Get("X-Debug-Credential")
		if strings.Contains(got, c.key) || strings.Contains(got, c.key[:len(c.key)-3]) {
			t.Errorf("%s: the operator key reached the client: %d %s %v", c.name, resp.StatusCode, b, resp.Header)
		}
		if stars := strings.Repeat("*", len(c.key)); !strings.Contains(string(b), stars) || !strings.Contains(resp.Header.Get("X-Debug-Credential"), stars) {
			t.Errorf("%s: the echo is not masked in place: %s %v", c.name, b, resp.Header)
		}
	}
}

// splitReader returns its data in pieces whose sizes come from sizes, in turn.
type splitReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (r *splitReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)])%7 + 1
		r.i++
	}
	n = copy(p, r.data[:min(n, len(r.data))])
	r.data = r.data[n:]
	return n, nil
}

func (r *splitReader) Close() error { return nil }

// FuzzKeyMask: however an upstream body is split into reads, what the client gets is the body with
// every occurrence of a key masked, byte for byte as if it had been masked whole.
func FuzzKeyMask(f *testing.F) {
	for _, seed := range []struct{ body, sizes string }{
		{"Incorrect API key provided: sk-abc", "\x01\x02\x03"},
		{"sk-absk-abcsk-abc", "\x00"},
		{"ssk-sk-abcsk-ab", "\x05\x01"},
		{"no key here, sk-ab and sk-a", "\x06"},
		{"data: {\"k\":\"sk-abc\"}\n\n", "\x02"},
	} {
		f.Add(seed.body, seed.sizes)
	}
	keys := [][]byte{[]byte("sk-abc"), []byte("sk-zz")}
	f.Fuzz(func(t *testing.T, body, sizes string) {
		want := []byte(body)
		maskAll(want, keys)
		resp := &http.Response{Header: http.Header{}}
		m := &keyMask{body: &splitReader{data: []byte(body), sizes: []byte(sizes)}, keys: keys, resp: resp}
		got, err := io.ReadAll(m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("masked %q into %q (%v), want %q", body, got, err, want)
		}
	})
}

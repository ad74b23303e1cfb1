// Package demo is a scripted model that speaks the four APIs promptgate rewrites — Chat
// Completions (/chat/completions), the Responses API (/responses), Anthropic Messages (/messages)
// and Google's Gemini (/models/M:generateContent, :streamGenerateContent), stream and non-stream,
// in each API's own event shapes — so that promptgate can be tried, documented and tested without
// a key and without the network. `promptgate demo` runs it beside the proxy with the demo protocol
// (Protocol) and the requests of Examples.
//
// The model is deterministic: the request alone decides the answer (see Reply). It owns the script,
// the wire shapes of its answers and the demo's definitions; it does not own anything of the proxy
// and imports none of it, so what it checks is the proxy as a real upstream sees it.
package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Model is the model name the demo answers with when a request names none, and lists at /models.
const Model = "promptgate-demo"

// maxBody bounds the request body the model reads.
const maxBody = 16 << 20

// Options configure a Handler.
type Options struct {
	// Now stamps the answers' creation times; nil is time.Now.
	Now func() time.Time
	// SplitFrames writes each SSE frame in two writes, flushed apart, as networks deliver them;
	// false writes (and flushes) one frame at a time.
	SplitFrames bool
}

// Handler serves the model under any base path: POST .../chat/completions, .../responses,
// .../messages and .../models/M:generateContent or :streamGenerateContent, GET .../models. Other
// paths are 404 in the OpenAI error shape.
func Handler(o Options) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &handler{o: o}
}

type handler struct{ o Options }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	api, ok := apiOf(r.URL.Path)
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		writeJSON(w, http.StatusOK, []byte(fmt.Sprintf(`{"object":"list","data":[{"id":%q,"object":"model","created":0,"owned_by":"promptgate"}]}`, Model)))
		return
	}
	if !ok {
		writeError(w, Chat, http.StatusNotFound, "not_found_error", "the demo model serves POST /chat/completions, /responses, /messages and /models/M:generateContent")
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, api, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, api, http.StatusBadRequest, "invalid_request_error", "the request body could not be read whole (at most 16 MiB)")
		return
	}
	req, err := Parse(api, body)
	if err != nil {
		writeError(w, api, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if api == Gemini {
		req.stream = strings.HasSuffix(r.URL.Path, ":streamGenerateContent")
		req.model = geminiModel(r.URL.Path)
	}
	a := Reply(req)
	m := Meta{ID: responseID(api, body), Model: req.model, Created: h.o.Now().Unix(), InputTokens: tokens(len(body)),
		Instructions: req.instructions, IncludeUsage: req.includeUsage}
	if !req.stream {
		writeJSON(w, http.StatusOK, Body(api, a, m))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for _, f := range Events(api, a, m) {
		parts := [][]byte{f}
		if h.o.SplitFrames && len(f) > 1 {
			parts = [][]byte{f[:len(f)/2], f[len(f)/2:]}
		}
		for _, p := range parts {
			if _, err := w.Write(p); err != nil {
				return // the client went away
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// apiOf is the API a request path asks for, by its last segments.
func apiOf(path string) (API, bool) {
	switch {
	case strings.Contains(path, "/models/") && (strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent")):
		return Gemini, true
	case strings.HasSuffix(path, "/chat/completions"):
		return Chat, true
	case strings.HasSuffix(path, "/responses"):
		return Responses, true
	case strings.HasSuffix(path, "/messages"):
		return Messages, true
	}
	return 0, false
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers in the error shape of api.
func writeError(w http.ResponseWriter, api API, status int, typ, msg string) {
	m, _ := json.Marshal(msg)
	var b bytes.Buffer
	switch api {
	case Messages:
		fmt.Fprintf(&b, `{"type":"error","error":{"type":%q,"message":%s}}`, typ, m)
	case Gemini:
		fmt.Fprintf(&b, `{"error":{"code":%d,"message":%s,"status":%q}}`, status, m, geminiStatus(status))
	default:
		fmt.Fprintf(&b, `{"error":{"message":%s,"type":%q,"param":null,"code":null}}`, m, typ)
	}
	writeJSON(w, status, b.Bytes())
}

// tokens is a rough token count of n bytes of text, for the answers' usage.
func tokens(n int) int { return (n + 3) / 4 }

// geminiModel is the model a Gemini path names: the segment after models/, before the method.
func geminiModel(path string) string {
	m := path[strings.LastIndex(path, "/models/")+len("/models/"):]
	m, _, _ = strings.Cut(m, ":")
	return m
}

// geminiStatus is the gRPC status name Google's errors carry for an HTTP status.
func geminiStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusNotFound:
		return "NOT_FOUND"
	}
	return "UNKNOWN"
}

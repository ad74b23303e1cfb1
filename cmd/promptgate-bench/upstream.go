package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fakeUpstream is the model API of the run. It reads the whole request body, then answers at once with a
// canned answer of the shape the HeaderShape header asks for; everything it sends is built before the first
// request, so its own cost is as small as a Go HTTP server's can be.
type fakeUpstream struct {
	json       []byte
	sse, tool  [][]byte
	chunkDelay time.Duration

	mu   sync.Mutex
	last []byte // the last body received with HeaderCapture set
}

func newFakeUpstream(respBytes, chunks int, chunkDelay time.Duration) *fakeUpstream {
	return &fakeUpstream{
		json:       completionJSON(respBytes),
		sse:        streamEvents(chunks, false),
		tool:       streamEvents(chunks, true),
		chunkDelay: chunkDelay,
	}
}

// ServeHTTP answers POST /v1/chat/completions (and any other path the same way).
func (u *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(HeaderCapture) != "" {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.last = body
		u.mu.Unlock()
	} else if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("X-Request-Id", "req_bench_upstream")
	switch r.Header.Get(HeaderShape) {
	case shapeSSE:
		u.stream(w, u.sse)
	case shapeSSETool:
		u.stream(w, u.tool)
	default:
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(u.json)))
		_, _ = w.Write(u.json)
	}
}

// stream writes one event per write and flushes it, pausing chunkDelay between events.
func (u *fakeUpstream) stream(w http.ResponseWriter, events [][]byte) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i, ev := range events {
		if i > 0 && u.chunkDelay > 0 {
			time.Sleep(u.chunkDelay)
		}
		if _, err := w.Write(ev); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// lastBody is the control endpoint that returns the last captured body.
func (u *fakeUpstream) lastBody(w http.ResponseWriter, _ *http.Request) {
	u.mu.Lock()
	b := u.last
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

const (
	chunkHead = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o-mini","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":`
	chunkTail = `,"logprobs":null,"finish_reason":%s}]}`
)

func chunk(delta, finish string) []byte {
	return []byte("data: " + chunkHead + delta + fmt.Sprintf(chunkTail, finish) + "\n\n")
}

// streamEvents is a chat-completions stream of exactly n chunks plus [DONE]: the role, text, and (tool)
// a get_ticket call whose arguments come in pieces, then the finish_reason.
func streamEvents(n int, tool bool) [][]byte {
	evs := [][]byte{chunk(`{"role":"assistant","content":"","refusal":null}`, "null")}
	var call [][]byte
	finish := `"stop"`
	if tool {
		call = append(call, chunk(`{"tool_calls":[{"index":0,"id":"call_bench_1","type":"function","function":{"name":"get_ticket","arguments":""}}]}`, "null"))
		for _, piece := range []string{`{\"`, `id`, `\":`, ` \"`, `T-`, `123`, `45`, `\"}`} {
			call = append(call, chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"`+piece+`"}}]}`, "null"))
		}
		finish = `"tool_calls"`
	}
	for i := 0; len(evs) < n-1-len(call); i++ {
		evs = append(evs, chunk(`{"content":" word`+strconv.Itoa(i)+`"}`, "null"))
	}
	evs = append(evs, call...)
	evs = append(evs, chunk(`{}`, finish))
	return append(evs, []byte("data: [DONE]\n\n"))
}

// completionJSON is a non-stream chat completion of about size bytes.
func completionJSON(size int) []byte {
	const head = `{"id":"chatcmpl-bench","object":"chat.completion","created":1735689600,"model":"gpt-4o-mini","system_fingerprint":"fp_bench","choices":[{"index":0,"message":{"role":"assistant","content":"`
	const tail = `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1900,"completion_tokens":210,"total_tokens":2110}}`
	var b bytes.Buffer
	b.WriteString(head)
	words := strings.Fields("Paris is the capital of France and the answer is short because the question was")
	for i := 0; b.Len()+len(tail) < size; i++ {
		b.WriteString(words[i%len(words)])
		b.WriteByte(' ')
	}
	b.WriteString(tail)
	return b.Bytes()
}

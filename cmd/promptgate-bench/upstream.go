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

// fakeUpstream is the model API of the run. It reads the whole request body, then answers at once
// with a canned answer of the shape the HeaderShape header asks for; everything it sends is built
// before the first request, so its own cost is as small as a Go HTTP server's can be.
type fakeUpstream struct {
	json                []byte
	sse, tool           [][]byte
	messages, responses [][]byte // tool streams of the other surfaces
	chunkDelay          time.Duration

	mu   sync.Mutex
	last []byte // the last body received with HeaderCapture set
}

func newFakeUpstream(respBytes, chunks int, chunkDelay time.Duration) *fakeUpstream {
	return &fakeUpstream{
		json:       completionJSON(respBytes),
		sse:        streamEvents(chunks, false),
		tool:       streamEvents(chunks, true),
		messages:   messagesEvents(chunks),
		responses:  responsesEvents(chunks),
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
	case shapeMessagesTool:
		u.stream(w, u.messages)
	case shapeResponsesTool:
		u.stream(w, u.responses)
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

// streamEvents is a chat-completions stream of exactly n chunks plus [DONE]: the role, text, and
// (tool) a get_ticket call whose arguments come in pieces, then the finish_reason.
func streamEvents(n int, tool bool) [][]byte {
	evs := [][]byte{chunk(`{"role":"assistant","content":"","refusal":null}`, "null")}
	var call [][]byte
	finish := `"stop"`
	if tool {
		call = append(call, chunk(`{"tool_calls":[{"index":0,"id":"call_bench_1","type":"function","function":{"name":"get_ticket","arguments":""}}]}`, "null"))
		for _, piece := range argPieces {
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

// argPieces are the pieces of the get_ticket call's arguments, {"id": "T-12345"}, as JSON string
// contents.
var argPieces = []string{`{\"`, `id`, `\":`, ` \"`, `T-`, `123`, `45`, `\"}`}

// sseEvent is one event with an event: line.
func sseEvent(name, data string) []byte { return []byte("event: " + name + "\ndata: " + data + "\n\n") }

// messagesEvents is an Anthropic Messages stream of exactly n events: a text block, then a
// get_ticket tool_use block whose input comes in pieces.
func messagesEvents(n int) [][]byte {
	head := [][]byte{
		sseEvent("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1900,"output_tokens":1}}}`),
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	}
	tail := [][]byte{
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		sseEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_bench_1","name":"get_ticket","input":{}}}`),
	}
	for _, p := range argPieces {
		tail = append(tail, sseEvent("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"`+p+`"}}`))
	}
	tail = append(tail, sseEvent("content_block_stop", `{"type":"content_block_stop","index":1}`),
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":210}}`),
		sseEvent("message_stop", `{"type":"message_stop"}`))
	evs := head
	for i := 0; len(evs) < n-len(tail); i++ {
		evs = append(evs, sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word`+strconv.Itoa(i)+`"}}`))
	}
	return append(evs, tail...)
}

// responsesEvents is a Responses stream of exactly n events: a message item, then a get_ticket
// function_call item whose arguments come in pieces, then response.completed with both.
func responsesEvents(n int) [][]byte {
	seq := 0
	ev := func(typ, rest string) []byte {
		b := sseEvent(typ, `{"type":"`+typ+`","sequence_number":`+strconv.Itoa(seq)+`,`+rest+`}`)
		seq++
		return b
	}
	const resp = `"id":"resp_bench","object":"response","created_at":1735689600,"model":"gpt-4.1","tools":[]`
	const msg = `"id":"msg_bench","type":"message","role":"assistant"`
	const call = `"id":"fc_bench","type":"function_call","call_id":"call_bench_1","name":"get_ticket"`
	head := [][]byte{
		ev("response.created", `"response":{`+resp+`,"status":"in_progress","output":[]}`),
		ev("response.output_item.added", `"output_index":0,"item":{`+msg+`,"status":"in_progress","content":[]}`),
		ev("response.content_part.added", `"item_id":"msg_bench","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}`),
	}
	const tailLen = 7 + 8 // the message's and the call's closing events, the call's pieces
	var text strings.Builder
	evs := head
	for i := 0; len(evs) < n-tailLen; i++ {
		w := " word" + strconv.Itoa(i)
		text.WriteString(w)
		evs = append(evs, ev("response.output_text.delta", `"item_id":"msg_bench","output_index":0,"content_index":0,"delta":"`+w+`","logprobs":[]`))
	}
	part := `{"type":"output_text","annotations":[],"text":"` + text.String() + `"}`
	done := `{` + msg + `,"status":"completed","content":[` + part + `]}`
	args := strings.Join(argPieces, "")
	callDone := `{` + call + `,"arguments":"` + args + `","status":"completed"}`
	evs = append(evs,
		ev("response.output_text.done", `"item_id":"msg_bench","output_index":0,"content_index":0,"text":"`+text.String()+`","logprobs":[]`),
		ev("response.content_part.done", `"item_id":"msg_bench","output_index":0,"content_index":0,"part":`+part),
		ev("response.output_item.done", `"output_index":0,"item":`+done),
		ev("response.output_item.added", `"output_index":1,"item":{`+call+`,"arguments":"","status":"in_progress"}`))
	for _, p := range argPieces {
		evs = append(evs, ev("response.function_call_arguments.delta", `"item_id":"fc_bench","output_index":1,"delta":"`+p+`"`))
	}
	return append(evs,
		ev("response.function_call_arguments.done", `"item_id":"fc_bench","output_index":1,"arguments":"`+args+`"`),
		ev("response.output_item.done", `"output_index":1,"item":`+callDone),
		ev("response.completed", `"response":{`+resp+`,"status":"completed","output":[`+done+`,`+callDone+`],"usage":{"input_tokens":1900,"output_tokens":210,"total_tokens":2110}}`))
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

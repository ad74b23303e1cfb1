package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Meta is what an answer's wire form carries beside the answer.
type Meta struct {
	ID      string
	Model   string
	Created int64 // Unix seconds
	// InputTokens is the usage's input count.
	InputTokens int
	// Instructions are a Responses request's instructions as JSON, echoed in response objects (""
	// for null).
	Instructions string
	// IncludeUsage is a Chat stream's stream_options.include_usage: a last chunk carries the usage.
	IncludeUsage bool
}

// Piece sizes of a streamed answer: text and arguments arrive in deltas of at most these many
// bytes.
const (
	textPiece = 24
	argsPiece = 12
)

// responseID is the id of the answer to body: the same request gets the same id.
func responseID(api API, body []byte) string {
	h := sha256.Sum256(body)
	prefix := map[API]string{Chat: "chatcmpl-demo", Responses: "resp_demo", Messages: "msg_demo", Gemini: "demo"}[api]
	return prefix + hex.EncodeToString(h[:8])
}

// js is v as JSON.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and maps of strings always marshal
	}
	return string(b)
}

func (a Answer) outTokens() int {
	n := len(a.Text)
	for _, c := range a.Calls {
		n += len(c.Name) + len(c.Arguments)
	}
	return tokens(n)
}

// Body is a as a non-stream answer of api.
func Body(api API, a Answer, m Meta) []byte {
	out := a.outTokens()
	switch api {
	case Chat:
		msg := map[string]any{"role": "assistant", "content": a.Text, "refusal": nil}
		finish := "stop"
		if len(a.Calls) > 0 {
			var calls []any
			for _, c := range a.Calls {
				calls = append(calls, map[string]any{"id": "call_" + c.ID, "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
			}
			msg["tool_calls"] = calls
			finish = "tool_calls"
		}
		return fmt.Appendf(nil, `{"id":%q,"object":"chat.completion","created":%d,"model":%s,"choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],"usage":%s}`,
			m.ID, m.Created, js(m.Model), js(msg), finish, chatUsage(m.InputTokens, out))
	case Responses:
		return []byte(m.response("completed", a.items("completed"), m.InputTokens, out))
	case Gemini:
		return []byte(m.geminiEvent(a.geminiParts(a.Text), true, out))
	default:
		var blocks []string
		if a.Text != "" {
			blocks = append(blocks, js(map[string]any{"type": "text", "text": a.Text}))
		}
		stop := "end_turn"
		for _, c := range a.Calls {
			blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%s","name":%s,"input":%s}`, c.ID, js(c.Name), c.Arguments))
			stop = "tool_use"
		}
		return fmt.Appendf(nil, `{"id":%q,"type":"message","role":"assistant","model":%s,"content":[%s],"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`,
			m.ID, js(m.Model), strings.Join(blocks, ","), stop, m.InputTokens, out)
	}
}

func chatUsage(in, out int) string {
	return fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, in, out, in+out)
}

// response is a Responses object with status and output items.
func (m Meta) response(status string, items []string, in, out int) string {
	instr, usage := "null", "null"
	if m.Instructions != "" {
		instr = m.Instructions
	}
	if status == "completed" {
		usage = fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}`, in, out, in+out)
	}
	return fmt.Sprintf(`{"id":%q,"object":"response","created_at":%d,"status":%q,"error":null,"incomplete_details":null,"instructions":%s,"model":%s,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":%s}`,
		m.ID, m.Created, status, instr, js(m.Model), strings.Join(items, ","), usage)
}

// items are a's Responses output items.
func (a Answer) items(status string) []string {
	var items []string
	if a.Text != "" {
		items = append(items, a.messageItem(status))
	}
	for _, c := range a.Calls {
		items = append(items, c.item(status, c.Arguments))
	}
	return items
}

func (a Answer) messageItem(status string) string {
	return fmt.Sprintf(`{"type":"message","id":"msg_%s","status":%q,"role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]}`,
		textID(a.Text), status, js(a.Text))
}

func (c Call) item(status, args string) string {
	return fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":"call_%s","name":%s,"arguments":%s,"status":%q}`,
		c.ID, c.ID, js(c.Name), js(args), status)
}

// textID names a message item by its text.
func textID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// pieces splits s into parts of at most n bytes, never inside a character (each is sent as a JSON
// string).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		k := n
		for k > 0 && !utf8.RuneStart(s[k]) {
			k--
		}
		if k == 0 {
			_, k = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// Events is a as a stream of api: one SSE frame per element, as the API sends them.
func Events(api API, a Answer, m Meta) [][]byte {
	switch api {
	case Chat:
		return chatEvents(a, m)
	case Responses:
		return responsesEvents(a, m)
	case Gemini:
		return geminiEvents(a, m)
	}
	return messagesEvents(a, m)
}

// geminiParts are the parts of a Gemini candidate holding text (when not empty) and a's calls, each
// whole.
func (a Answer) geminiParts(text string) []string {
	var parts []string
	if text != "" {
		parts = append(parts, js(map[string]any{"text": text}))
	}
	for _, c := range a.Calls {
		parts = append(parts, fmt.Sprintf(`{"functionCall":{"name":%s,"args":%s}}`, js(c.Name), c.Arguments))
	}
	return parts
}

// geminiEvent is a GenerateContentResponse with one candidate of parts; the last one carries its
// finish reason and the usage.
func (m Meta) geminiEvent(parts []string, last bool, out int) string {
	finish, usage := "", ""
	if last {
		finish = `,"finishReason":"STOP"`
		usage = fmt.Sprintf(`,"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d}`, m.InputTokens, out, m.InputTokens+out)
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[%s]}%s,"index":0}]%s,"modelVersion":%s,"responseId":%q}`,
		strings.Join(parts, ","), finish, usage, js(m.Model), m.ID)
}

// geminiEvents stream the text in pieces, then one last event with the calls, whole, as Gemini
// sends them; frames end in CRLF, as Google's do.
func geminiEvents(a Answer, m Meta) [][]byte {
	var out [][]byte
	frame := func(ev string) { out = append(out, []byte("data: "+ev+"\r\n\r\n")) }
	for _, p := range pieces(a.Text, textPiece) {
		frame(m.geminiEvent(Answer{}.geminiParts(p), false, 0))
	}
	frame(m.geminiEvent(Answer{Calls: a.Calls}.geminiParts(""), true, a.outTokens()))
	return out
}

func chatEvents(a Answer, m Meta) [][]byte {
	var out [][]byte
	chunk := func(delta, finish string) {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		out = append(out, fmt.Appendf(nil, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":%s,\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
			m.ID, m.Created, js(m.Model), delta, f))
	}
	chunk(`{"role":"assistant","content":"","refusal":null}`, "")
	for _, p := range pieces(a.Text, textPiece) {
		chunk(js(map[string]any{"content": p}), "")
	}
	for i, c := range a.Calls {
		chunk(js(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": "call_" + c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}), "")
		for _, p := range pieces(c.Arguments, argsPiece) {
			chunk(js(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}), "")
		}
	}
	finish := "stop"
	if len(a.Calls) > 0 {
		finish = "tool_calls"
	}
	chunk(`{}`, finish)
	if m.IncludeUsage {
		out = append(out, fmt.Appendf(nil, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":%s,\"choices\":[],\"usage\":%s}\n\n",
			m.ID, m.Created, js(m.Model), chatUsage(m.InputTokens, a.outTokens())))
	}
	return append(out, []byte("data: [DONE]\n\n"))
}

func responsesEvents(a Answer, m Meta) [][]byte {
	var out [][]byte
	seq := 0
	ev := func(typ, fields string) {
		data := fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, typ, seq, fields)
		seq++
		out = append(out, []byte("event: "+typ+"\ndata: "+data+"\n\n"))
	}
	ev("response.created", `"response":`+m.response("in_progress", nil, m.InputTokens, 0))
	ev("response.in_progress", `"response":`+m.response("in_progress", nil, m.InputTokens, 0))
	oi := 0
	if a.Text != "" {
		id := "msg_" + textID(a.Text)
		ev("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"type":"message","id":%q,"status":"in_progress","role":"assistant","content":[]}`, oi, id))
		ev("response.content_part.added", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`, id, oi))
		for _, p := range pieces(a.Text, textPiece) {
			ev("response.output_text.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"delta":%s,"logprobs":[]`, id, oi, js(p)))
		}
		ev("response.output_text.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"text":%s,"logprobs":[]`, id, oi, js(a.Text)))
		ev("response.content_part.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":%s,"annotations":[]}`, id, oi, js(a.Text)))
		ev("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, oi, a.messageItem("completed")))
		oi++
	}
	for _, c := range a.Calls {
		id := "fc_" + c.ID
		ev("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":%s`, oi, c.item("in_progress", "")))
		for _, p := range pieces(c.Arguments, argsPiece) {
			ev("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"delta":%s`, id, oi, js(p)))
		}
		ev("response.function_call_arguments.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"arguments":%s`, id, oi, js(c.Arguments)))
		ev("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, oi, c.item("completed", c.Arguments)))
		oi++
	}
	ev("response.completed", `"response":`+m.response("completed", a.items("completed"), m.InputTokens, a.outTokens()))
	return out
}

func messagesEvents(a Answer, m Meta) [][]byte {
	var out [][]byte
	ev := func(typ, data string) {
		out = append(out, []byte("event: "+typ+"\ndata: "+data+"\n\n"))
	}
	ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`,
		m.ID, js(m.Model), m.InputTokens))
	idx := 0
	if a.Text != "" {
		ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, idx))
		ev("ping", `{"type":"ping"}`)
		for _, p := range pieces(a.Text, textPiece) {
			ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, idx, js(p)))
		}
		ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx))
		idx++
	}
	stop := "end_turn"
	for _, c := range a.Calls {
		ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":"toolu_%s","name":%s,"input":{}}}`, idx, c.ID, js(c.Name)))
		for _, p := range pieces(c.Arguments, argsPiece) {
			ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, idx, js(p)))
		}
		ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx))
		idx++
		stop = "tool_use"
	}
	ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, a.outTokens()))
	ev("message_stop", `{"type":"message_stop"}`)
	return out
}

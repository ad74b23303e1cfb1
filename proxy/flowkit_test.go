package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// The kit of the information-flow tests through the real proxy: a scripted upstream that answers
// each request with the next of its turns (text and calls) in the shape of the surface asked,
// stream or not (an SSE event split across two writes), and a reader of what the client was shown.

// scriptedTurn is one answer of the scripted model: its text (before its calls) and its calls.
type scriptedTurn struct {
	text  string
	calls []flowtest.Call
	// in and out are the answer's usage: input and output tokens.
	in, out int
}

// flowUpstream is a scripted model behind the proxy, on every surface's path. A request that
// carries the header X-Test-Script gets the next turn of the script of that name (set with script),
// any other the next of the default script (the turns given to newFlowUpstream); past a script's
// end, its last turn again.
type flowUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	scripts map[string][]scriptedTurn
	served  map[string]int
	bodies  [][]byte
	paths   []string
}

// headerScript names the script a request is answered from.
const headerScript = "X-Test-Script"

func newFlowUpstream(t testing.TB, turns ...scriptedTurn) *flowUpstream {
	t.Helper()
	u := &flowUpstream{scripts: map[string][]scriptedTurn{"": turns}, served: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

// script sets the turns of a named script.
func (u *flowUpstream) script(name string, turns ...scriptedTurn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.scripts[name] = turns
}

func (u *flowUpstream) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	name := r.Header.Get(headerScript)
	u.mu.Lock()
	u.bodies = append(u.bodies, b)
	u.paths = append(u.paths, r.URL.Path)
	turns := u.scripts[name]
	round := u.served[name]
	u.served[name]++
	u.mu.Unlock()
	if len(turns) == 0 {
		http.Error(w, `{"error":{"message":"no script"}}`, http.StatusInternalServerError)
		return
	}
	turn := turns[min(round, len(turns)-1)]
	sf, ok := upstreamSurface(r.URL.Path)
	if !ok {
		http.Error(w, `{"error":{"message":"no such path"}}`, http.StatusNotFound)
		return
	}
	if !streamAsked(r.URL.Path, b) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, turn.body(sf, round+1))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range turn.events(sf, round+1) {
		writeSplit(w, ev, len(ev)/2+1)
	}
}

// upstreamSurface is the surface of an upstream request's path; ok is false for a path of none.
func upstreamSurface(path string) (sf flowtest.Surface, ok bool) {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return flowtest.Chat, true
	case strings.HasSuffix(path, "/responses"):
		return flowtest.Responses, true
	case strings.HasSuffix(path, "/messages"):
		return flowtest.Messages, true
	case strings.HasSuffix(path, ":generateContent"), strings.HasSuffix(path, ":streamGenerateContent"):
		return flowtest.Gemini, true
	}
	return "", false
}

// streamAsked reports whether an upstream request asks for a stream: Gemini's by its method, the
// others' by their body's stream.
func streamAsked(path string, body []byte) bool {
	if sf, _ := upstreamSurface(path); sf == flowtest.Gemini {
		return strings.HasSuffix(path, ":streamGenerateContent")
	}
	return gjson.GetBytes(body, "stream").Bool()
}

// requests is what the upstream received, in order.
func (u *flowUpstream) requests() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// js is the JSON text of v.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// halves splits s in two (on a byte boundary, which may cut a character: the stream's fragments do
// too).
func halves(s string) [2]string { return [2]string{s[:len(s)/2], s[len(s)/2:]} }

// body is the turn as a non-stream answer of surface sf; round numbers its ids.
func (tu scriptedTurn) body(sf flowtest.Surface, round int) string {
	switch sf {
	case flowtest.Chat:
		msg := `{"role":"assistant","content":null,"refusal":null}`
		if tu.text != "" {
			msg, _ = sjson.Set(msg, "content", tu.text)
		}
		finish := "stop"
		if len(tu.calls) > 0 {
			var calls []string
			for _, c := range tu.calls {
				calls = append(calls, js(map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Tool, "arguments": string(flowtest.Args(c.Args))}}))
			}
			msg, _ = sjson.SetRaw(msg, "tool_calls", "["+strings.Join(calls, ",")+"]")
			finish = "tool_calls"
		}
		return fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":%d,"model":"m","choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			round, 1000+round, msg, finish, tu.in, tu.out, tu.in+tu.out)
	case flowtest.Responses:
		return fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":%d,"status":"completed","model":"m","instructions":null,"output":[%s],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}`,
			round, 1000+round, strings.Join(tu.respItems(round, "completed"), ","), tu.in, tu.out, tu.in+tu.out)
	case flowtest.Gemini:
		return tu.geminiAnswer(tu.geminiParts(), true, round)
	default:
		var blocks []string
		if tu.text != "" {
			blocks = append(blocks, js(map[string]any{"type": "text", "text": tu.text}))
		}
		stop := "end_turn"
		for _, c := range tu.calls {
			blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, c.ID, c.Tool, flowtest.Args(c.Args)))
			stop = "tool_use"
		}
		return fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","model":"m","content":[%s],"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`,
			round, strings.Join(blocks, ","), stop, tu.in, tu.out)
	}
}

// geminiParts are the turn's Gemini parts: its text, then its calls (with their ids).
func (tu scriptedTurn) geminiParts() []string {
	var parts []string
	if tu.text != "" {
		parts = append(parts, js(map[string]any{"text": tu.text}))
	}
	for _, c := range tu.calls {
		parts = append(parts, geminiCall(c))
	}
	return parts
}

// geminiCall is a functionCall part with the call's id.
func geminiCall(c flowtest.Call) string {
	var args bytes.Buffer
	if err := json.Compact(&args, flowtest.Args(c.Args)); err != nil {
		args.Write(flowtest.Args(c.Args))
	}
	return fmt.Sprintf(`{"functionCall":{"id":%q,"name":%q,"args":%s}}`, c.ID, c.Tool, args.Bytes())
}

// geminiAnswer is a GenerateContentResponse of the parts; last adds the finishReason and the usage.
func (tu scriptedTurn) geminiAnswer(parts []string, last bool, round int) string {
	end := ""
	if last {
		end = fmt.Sprintf(`,"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d}`, tu.in, tu.out, tu.in+tu.out)
	} else {
		end = "}]"
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[%s]},"index":0%s,"modelVersion":"m","responseId":"resp-%d"}`, strings.Join(parts, ","), end, round)
}

// respItems are the turn's Responses output items.
func (tu scriptedTurn) respItems(round int, status string) []string {
	var items []string
	if tu.text != "" {
		items = append(items, fmt.Sprintf(`{"type":"message","id":"msg_%d","status":%q,"role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]}`, round, status, js(tu.text)))
	}
	for _, c := range tu.calls {
		items = append(items, fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":%q,"name":%q,"arguments":%s,"status":%q}`, c.ID, c.ID, c.Tool, js(string(flowtest.Args(c.Args))), status))
	}
	return items
}

// events is the turn as a stream of surface sf, one SSE frame per element.
func (tu scriptedTurn) events(sf flowtest.Surface, round int) []string {
	var out []string
	switch sf {
	case flowtest.Chat:
		chunk := func(delta, finish string) {
			f := "null"
			if finish != "" {
				f = `"` + finish + `"`
			}
			out = append(out, fmt.Sprintf("data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}]}\n\n", round, 1000+round, delta, f))
		}
		chunk(`{"role":"assistant","content":""}`, "")
		if tu.text != "" {
			for _, h := range halves(tu.text) {
				chunk(js(map[string]any{"content": h}), "")
			}
		}
		for i, c := range tu.calls {
			chunk(js(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Tool, "arguments": ""}}}}), "")
			for _, h := range halves(string(flowtest.Args(c.Args))) {
				chunk(js(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": h}}}}), "")
			}
		}
		finish := "stop"
		if len(tu.calls) > 0 {
			finish = "tool_calls"
		}
		chunk(`{}`, finish)
		out = append(out, fmt.Sprintf("data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", round, 1000+round, tu.in, tu.out, tu.in+tu.out))
		out = append(out, "data: [DONE]\n\n")
	case flowtest.Responses:
		seq := 0
		ev := func(typ, data string) {
			data, _ = sjson.Set(data, "type", typ)
			data, _ = sjson.Set(data, "sequence_number", seq)
			seq++
			out = append(out, "event: "+typ+"\ndata: "+data+"\n\n")
		}
		resp := fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":%d,"status":"in_progress","model":"m","instructions":null,"output":[],"usage":null}`, round, 1000+round)
		ev("response.created", `{"response":`+resp+`}`)
		ev("response.in_progress", `{"response":`+resp+`}`)
		oi := 0
		if tu.text != "" {
			id := fmt.Sprintf("msg_%d", round)
			ev("response.output_item.added", fmt.Sprintf(`{"output_index":%d,"item":{"type":"message","id":%q,"status":"in_progress","role":"assistant","content":[]}}`, oi, id))
			ev("response.content_part.added", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`, id, oi))
			for _, h := range halves(tu.text) {
				ev("response.output_text.delta", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"content_index":0,"delta":%s,"logprobs":[]}`, id, oi, js(h)))
			}
			ev("response.output_text.done", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"content_index":0,"text":%s,"logprobs":[]}`, id, oi, js(tu.text)))
			ev("response.content_part.done", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"content_index":0,"part":{"type":"output_text","text":%s,"annotations":[]}}`, id, oi, js(tu.text)))
			ev("response.output_item.done", fmt.Sprintf(`{"output_index":%d,"item":%s}`, oi, tu.respItems(round, "completed")[0]))
			oi++
		}
		for _, c := range tu.calls {
			args := string(flowtest.Args(c.Args))
			id := "fc_" + c.ID
			ev("response.output_item.added", fmt.Sprintf(`{"output_index":%d,"item":{"type":"function_call","id":%q,"call_id":%q,"name":%q,"arguments":"","status":"in_progress"}}`, oi, id, c.ID, c.Tool))
			for _, h := range halves(args) {
				ev("response.function_call_arguments.delta", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"delta":%s}`, id, oi, js(h)))
			}
			ev("response.function_call_arguments.done", fmt.Sprintf(`{"item_id":%q,"output_index":%d,"arguments":%s}`, id, oi, js(args)))
			ev("response.output_item.done", fmt.Sprintf(`{"output_index":%d,"item":{"type":"function_call","id":%q,"call_id":%q,"name":%q,"arguments":%s,"status":"completed"}}`, oi, id, c.ID, c.Tool, js(args)))
			oi++
		}
		done := fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":%d,"status":"completed","model":"m","instructions":null,"output":[%s],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}`,
			round, 1000+round, strings.Join(tu.respItems(round, "completed"), ","), tu.in, tu.out, tu.in+tu.out)
		ev("response.completed", `{"response":`+done+`}`)
	default:
		ev := func(typ, data string) {
			out = append(out, "event: "+typ+"\ndata: "+data+"\n\n")
		}
		ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_%d","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, round, tu.in))
		idx := 0
		if tu.text != "" {
			ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, idx))
			for _, h := range halves(tu.text) {
				ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, idx, js(h)))
			}
			ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx))
			idx++
		}
		ev("ping", `{"type":"ping"}`)
		stop := "end_turn"
		for _, c := range tu.calls {
			ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, idx, c.ID, c.Tool))
			for _, h := range halves(string(flowtest.Args(c.Args))) {
				ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, idx, js(h)))
			}
			ev("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, idx))
			idx++
			stop = "tool_use"
		}
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, tu.out))
		ev("message_stop", `{"type":"message_stop"}`)
	case flowtest.Gemini:
		// The text in two events, the second with the first call (Gemini sends a call whole, often
		// after the tail of the text in the same event), each further call in one of its own; the
		// last event with the finish and usage.
		var parts [][]string
		if tu.text != "" {
			for _, h := range halves(tu.text) {
				parts = append(parts, []string{js(map[string]any{"text": h})})
			}
		}
		for i, c := range tu.calls {
			if i == 0 && len(parts) > 0 {
				parts[len(parts)-1] = append(parts[len(parts)-1], geminiCall(c))
				continue
			}
			parts = append(parts, []string{geminiCall(c)})
		}
		if len(parts) == 0 {
			parts = append(parts, nil)
		}
		for i, p := range parts {
			out = append(out, "data: "+tu.geminiAnswer(p, i == len(parts)-1, round)+"\r\n\r\n")
		}
	}
	return out
}

// flowPaths are the surfaces' rewritten routes.
var flowPaths = map[flowtest.Surface]string{flowtest.Chat: PathChat, flowtest.Responses: PathResponses, flowtest.Messages: PathMessages,
	flowtest.Gemini: "/v1beta/models/m:generateContent"}

// flowRequest renders a client request of surface sf: the conversation, the tools it declares,
// stream.
func flowRequest(t testing.TB, sf flowtest.Surface, turns []flowtest.Turn, tools []string, stream bool, extra map[string]any) []byte {
	t.Helper()
	var decl []any
	for _, name := range tools {
		params := map[string]any{"type": "object"}
		switch sf {
		case flowtest.Chat:
			decl = append(decl, map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": params}})
		case flowtest.Responses:
			decl = append(decl, map[string]any{"type": "function", "name": name, "parameters": params})
		case flowtest.Gemini:
			decl = append(decl, map[string]any{"name": name, "parameters": params})
		default:
			decl = append(decl, map[string]any{"name": name, "input_schema": params})
		}
	}
	fields := map[string]any{"tools": decl, "stream": stream}
	if sf == flowtest.Gemini {
		// Gemini streams by its route (post picks it from this mark; the stand-in upstream ignores
		// it).
		fields["tools"] = []any{map[string]any{"functionDeclarations": decl}}
	}
	if sf == flowtest.Messages {
		fields["max_tokens"] = 1024
	}
	if stream && sf == flowtest.Chat {
		fields["stream_options"] = map[string]any{"include_usage": true}
	}
	for k, v := range extra {
		fields[k] = v
	}
	return flowtest.Render(t, sf, turns, fields)
}

// flowServer is promptgate in front of up, serving the protocol (its default), with its decision
// log.
func flowServer(t testing.TB, up string, protocol json.RawMessage, opts ...func(*Options)) (*httptest.Server, *memAudit) {
	t.Helper()
	id := gjson.GetBytes(protocol, "id").String()
	e := testEngine(t, "defaultProtocol: "+id+"\n", nil, nil, []json.RawMessage{protocol})
	u, err := url.Parse(up + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	gu, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	rec := &memAudit{}
	o := Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}, "gemini": {URL: gu}}, Audit: rec}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, rec
}

// post sends a client request and returns the answer's status, headers and body (a stream read
// whole).
func post(t testing.TB, ts *httptest.Server, sf flowtest.Surface, body []byte, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	path := flowPaths[sf]
	if sf == flowtest.Gemini && gjson.GetBytes(body, "stream").Bool() {
		path = "/v1beta/models/m:streamGenerateContent?alt=sse"
	}
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// shown is what a client assembles from an answer: its text and its calls, in order.
type shown struct {
	text  string
	calls []flowtest.Call
	// usage is the answer's usage object as the client ends up with it.
	usage gjson.Result
	// ids are the answer's ids as the client sees them: a non-stream body's one, every chunk's or
	// event's.
	ids []string
	// err is the contract's code of the error the answer carries (an error body's, a stream's error
	// event's), "" when none; status is the HTTP status a Gemini error gives as its code (0
	// elsewhere).
	err    string
	status int64
}

// readError reads the error an answer's body or event carries, if any: the contract's code is
// error.code on every surface but Gemini, whose error.code is the HTTP status and whose ErrorInfo
// detail gives the code as its reason.
func (s *shown) readError(sf flowtest.Surface, root gjson.Result) {
	e := root.Get("error")
	if !e.IsObject() {
		return
	}
	if sf != flowtest.Gemini {
		s.err = e.Get("code").String()
		return
	}
	s.err, s.status = e.Get(`details.#(@type=="type.googleapis.com/google.rpc.ErrorInfo").reason`).String(), e.Get("code").Int()
}

// sseData returns the data of every event of a stream, with its event: line.
func sseData(t testing.TB, b []byte) (names []string, datas []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			names = append(names, name)
			datas = append(datas, strings.TrimPrefix(line, "data: "))
			name = ""
		}
	}
	return names, datas
}

// read assembles what the client was shown, as the official SDKs' accumulators do.
func read(t testing.TB, sf flowtest.Surface, stream bool, b []byte) shown {
	t.Helper()
	var s shown
	if !stream {
		root := gjson.ParseBytes(b)
		s.readError(sf, root)
		if sf != flowtest.Gemini { // readGemini reads its responseId and usageMetadata
			s.ids = append(s.ids, root.Get("id").String())
			s.usage = root.Get("usage")
		}
		switch sf {
		case flowtest.Chat:
			m := root.Get("choices.0.message")
			s.text = m.Get("content").String()
			m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
				s.calls = append(s.calls, flowtest.Call{ID: c.Get("id").String(), Tool: c.Get("function.name").String(), Args: json.RawMessage(c.Get("function.arguments").String())})
				return true
			})
		case flowtest.Responses:
			s.readResponsesOutput(root.Get("output"))
		case flowtest.Gemini:
			s.readGemini(root)
		default:
			root.Get("content").ForEach(func(_, c gjson.Result) bool {
				switch c.Get("type").String() {
				case "text":
					s.text += c.Get("text").String()
				case "tool_use":
					s.calls = append(s.calls, flowtest.Call{ID: c.Get("id").String(), Tool: c.Get("name").String(), Args: json.RawMessage(c.Get("input").Raw)})
				}
				return true
			})
		}
		return s
	}
	names, datas := sseData(t, b)
	for _, d := range datas {
		s.readError(sf, gjson.Parse(d))
	}
	switch sf {
	case flowtest.Chat:
		byIndex := map[int64]int{}
		for _, d := range datas {
			if d == "[DONE]" {
				continue
			}
			root := gjson.Parse(d)
			s.ids = append(s.ids, root.Get("id").String()+"@"+root.Get("created").String())
			if u := root.Get("usage"); u.IsObject() {
				s.usage = u
			}
			delta := root.Get("choices.0.delta")
			s.text += delta.Get("content").String()
			delta.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
				i := c.Get("index").Int()
				at, ok := byIndex[i]
				if !ok {
					at = len(s.calls)
					byIndex[i] = at
					s.calls = append(s.calls, flowtest.Call{})
				}
				if id := c.Get("id").String(); id != "" {
					s.calls[at].ID = id
				}
				if n := c.Get("function.name").String(); n != "" {
					s.calls[at].Tool = n
				}
				s.calls[at].Args = append(s.calls[at].Args, c.Get("function.arguments").String()...)
				return true
			})
		}
	case flowtest.Gemini:
		for _, d := range datas {
			s.readGemini(gjson.Parse(d))
		}
	case flowtest.Responses:
		for i, d := range datas {
			root := gjson.Parse(d)
			if id := root.Get("response.id"); id.Exists() {
				s.ids = append(s.ids, names[i]+":"+id.String())
			}
			if names[i] == "response.completed" {
				s.readResponsesOutput(root.Get("response.output"))
				s.usage = root.Get("response.usage")
			}
		}
	default:
		type block struct {
			typ  string
			call flowtest.Call
			text string
		}
		var blocks []*block
		byIndex := map[int64]*block{}
		for _, d := range datas {
			root := gjson.Parse(d)
			switch root.Get("type").String() {
			case "message_start":
				s.ids = append(s.ids, root.Get("message.id").String())
				s.usage = root.Get("message.usage")
			case "content_block_start":
				cb := root.Get("content_block")
				b := &block{typ: cb.Get("type").String(), call: flowtest.Call{ID: cb.Get("id").String(), Tool: cb.Get("name").String()}}
				byIndex[root.Get("index").Int()] = b
				blocks = append(blocks, b)
			case "content_block_delta":
				b := byIndex[root.Get("index").Int()]
				if b == nil {
					t.Fatalf("a delta for a block that did not start: %s", d)
				}
				b.text += root.Get("delta.text").String()
				b.call.Args = append(b.call.Args, root.Get("delta.partial_json").String()...)
			case "message_delta":
				u := s.usage.Raw
				root.Get("usage").ForEach(func(k, v gjson.Result) bool {
					u, _ = sjson.SetRaw(u, k.String(), v.Raw)
					return true
				})
				s.usage = gjson.Parse(u)
			}
		}
		for _, b := range blocks {
			switch b.typ {
			case "text":
				s.text += b.text
			case "tool_use":
				s.calls = append(s.calls, b.call)
			}
		}
	}
	return s
}

// readGemini adds a GenerateContentResponse (a body, or an event of a stream) to what the client
// was shown.
func (s *shown) readGemini(root gjson.Result) {
	s.ids = append(s.ids, root.Get("responseId").String())
	if u := root.Get("usageMetadata"); u.IsObject() {
		s.usage = u
	}
	root.Get("candidates.0.content.parts").ForEach(func(_, p gjson.Result) bool {
		s.text += p.Get("text").String()
		if fc := p.Get("functionCall"); fc.Exists() {
			s.calls = append(s.calls, flowtest.Call{ID: fc.Get("id").String(), Tool: fc.Get("name").String(), Args: json.RawMessage(fc.Get("args").Raw)})
		}
		return true
	})
}

func (s *shown) readResponsesOutput(out gjson.Result) {
	out.ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").String() {
		case "message":
			it.Get("content").ForEach(func(_, p gjson.Result) bool {
				s.text += p.Get("text").String()
				return true
			})
		case "function_call":
			s.calls = append(s.calls, flowtest.Call{ID: it.Get("call_id").String(), Tool: it.Get("name").String(), Args: json.RawMessage(it.Get("arguments").String())})
		}
		return true
	})
}

// usageKeys name a surface's usage members: the input tokens, the output tokens and their total (""
// where the surface has none).
func usageKeys(sf flowtest.Surface) (in, out, total string) {
	switch sf {
	case flowtest.Chat:
		return "prompt_tokens", "completion_tokens", "total_tokens"
	case flowtest.Responses:
		return "input_tokens", "output_tokens", "total_tokens"
	case flowtest.Gemini:
		return "promptTokenCount", "candidatesTokenCount", "totalTokenCount"
	}
	return "input_tokens", "output_tokens", ""
}

// contentsPath is the array of a surface's request body that holds the conversation.
func contentsPath(sf flowtest.Surface) string {
	switch sf {
	case flowtest.Responses:
		return "input"
	case flowtest.Gemini:
		return "contents"
	}
	return "messages"
}

// sameJSON reports whether two JSON texts are the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return js(x) == js(y)
}

// stringValues are the string values of a JSON text that are at least n bytes long.
func stringValues(raw []byte, n int) []string {
	var out []string
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		switch {
		case v.Type == gjson.String && len(v.Str) >= n:
			out = append(out, v.Str)
		case v.IsArray() || v.IsObject():
			v.ForEach(func(_, e gjson.Result) bool {
				walk(e)
				return true
			})
		}
	}
	walk(gjson.ParseBytes(raw))
	return out
}

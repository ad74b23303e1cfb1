package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// apiUpstream imitates what real clients of the Responses API depend on: every response object
// echoes the request's instructions; each response is kept for GET /v1/responses/{id} (also
// streamed, ?stream=true) and POST /v1/responses/{id}/cancel; "background": true is answered queued
// and completed on retrieval; and an input is refused as the API refuses it when it breaks the
// pairing of reasoning items (a reasoning item must be followed by the item that followed it when
// it was produced, and that item must be preceded by it) or leaves a function_call without its
// function_call_output.
type apiUpstream struct {
	mu     sync.Mutex
	n      int
	stored map[string]string
	// follower maps a reasoning item's id to the id of the item produced right after it; leader the
	// other way.
	follower, leader map[string]string
	// answer gives the output items of the nth response (from 1).
	answer func(n int) []string
	// refused are the messages of the 400s the upstream answered.
	refused []string
}

func newAPIUpstream(answer func(n int) []string) *apiUpstream {
	return &apiUpstream{stored: map[string]string{}, follower: map[string]string{}, leader: map[string]string{}, answer: answer}
}

func (u *apiUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	rest := strings.TrimPrefix(r.URL.Path, "/v1/responses")
	if rest != "" {
		id, cancel := strings.CutSuffix(strings.TrimPrefix(rest, "/"), "/cancel")
		body, ok := u.stored[id]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"No response found","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		if cancel {
			body, _ = sjson.Set(body, "status", "cancelled")
		}
		b, _ := io.ReadAll(r.Body) // openai-go asks for a streamed retrieval in a JSON body
		if r.URL.Query().Get("stream") == "true" || gjson.GetBytes(b, "stream").Bool() {
			u.mu.Unlock()
			defer u.mu.Lock()
			splitUpstream(u.events(body), 3)(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
		return
	}
	b, _ := io.ReadAll(r.Body)
	if msg := u.check(gjson.GetBytes(b, "input")); msg != "" {
		u.refused = append(u.refused, msg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","param":"input","code":null}}`, jsonStr(msg))
		return
	}
	u.n++
	id := fmt.Sprintf("resp_%d", u.n)
	items := u.answer(u.n)
	for i := 1; i < len(items); i++ {
		if gjson.Get(items[i-1], "type").Str == "reasoning" {
			prev, next := gjson.Get(items[i-1], "id").Str, gjson.Get(items[i], "id").Str
			u.follower[prev], u.leader[next] = next, prev
		}
	}
	instructions := gjson.GetBytes(b, "instructions").Raw
	if instructions == "" {
		instructions = "null"
	}
	body := `{"id":"` + id + `","object":"response","created_at":1,"status":"completed","instructions":` + instructions +
		`,"model":"gpt-5","output":[` + strings.Join(items, ",") + `]}`
	u.stored[id] = body
	switch {
	case gjson.GetBytes(b, "background").Bool():
		queued, _ := sjson.Set(body, "status", "queued")
		queued, _ = sjson.SetRaw(queued, "output", "[]")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, queued)
	case gjson.GetBytes(b, "stream").Bool():
		u.mu.Unlock()
		defer u.mu.Lock()
		splitUpstream(u.events(body), 3)(w, r)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// check is the API's refusal of an input, or "".
func (u *apiUpstream) check(input gjson.Result) string {
	items := input.Array()
	answered := map[string]bool{}
	for _, it := range items {
		if it.Get("type").Str == "function_call_output" {
			answered[it.Get("call_id").Str] = true
		}
	}
	for i, it := range items {
		id := it.Get("id").Str
		if it.Get("type").Str == "reasoning" {
			if want, ok := u.follower[id]; ok && (i+1 >= len(items) || items[i+1].Get("id").Str != want) {
				return fmt.Sprintf("Item '%s' of type 'reasoning' was provided without its required following item.", id)
			}
		}
		if lead, ok := u.leader[id]; ok && (i == 0 || items[i-1].Get("id").Str != lead) {
			return fmt.Sprintf("Item '%s' of type '%s' was provided without its required 'reasoning' item: '%s'.", id, it.Get("type").Str, lead)
		}
		if it.Get("type").Str == "function_call" && !answered[it.Get("call_id").Str] {
			return fmt.Sprintf("No tool output found for function call %s.", it.Get("call_id").Str)
		}
	}
	return ""
}

// events is the stream of the response body: created and in_progress (without output), each item's
// events, completed; every event that carries the response carries its instructions.
func (u *apiUpstream) events(body string) string {
	snap, _ := sjson.Set(body, "status", "in_progress")
	snap, _ = sjson.SetRaw(snap, "output", "[]")
	ev := &respEvents{}
	ev.ev("response.created", `"response":`+snap)
	ev.ev("response.in_progress", `"response":`+snap)
	for i, it := range gjson.Get(body, "output").Array() {
		switch it.Get("type").Str {
		case "function_call":
			ev.call(i, it.Get("id").Str, it.Get("call_id").Str, it.Get("name").Str, it.Get("arguments").Str)
		case "reasoning":
			ev.reasoning(i, it.Raw)
		default:
			ev.text(i, it.Get("content.0.text").Str)
		}
	}
	ev.ev("response.completed", `"response":`+body)
	return ev.b.String()
}

// reasoning streams a reasoning item (item, its JSON): added without summary, the summary's part
// and text events, done.
func (r *respEvents) reasoning(oi int, item string) *respEvents {
	o, id := strconvI(oi), gjson.Get(item, "id").Str
	added, _ := sjson.SetRaw(item, "summary", "[]")
	added, _ = sjson.Delete(added, "encrypted_content")
	r.ev("response.output_item.added", `"output_index":`+o+`,"item":`+added)
	for i, s := range gjson.Get(item, "summary").Array() {
		at := `"item_id":"` + id + `","output_index":` + o + `,"summary_index":` + strconvI(i)
		r.ev("response.reasoning_summary_part.added", at+`,"part":{"type":"summary_text","text":""}`)
		r.ev("response.reasoning_summary_text.delta", at+`,"delta":`+jsonStr(s.Get("text").Str))
		r.ev("response.reasoning_summary_text.done", at+`,"text":`+jsonStr(s.Get("text").Str))
		r.ev("response.reasoning_summary_part.done", at+`,"part":`+s.Raw)
	}
	r.ev("response.output_item.done", `"output_index":`+o+`,"item":`+item)
	return r
}

func reasoningItem(id, summary string) string {
	return `{"id":"` + id + `","type":"reasoning","summary":[{"type":"summary_text","text":` + jsonStr(summary) +
		`}],"encrypted_content":"gAAAA` + id + `"}`
}

func messageItem(id, text string) string {
	return `{"id":"` + id + `","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":` + jsonStr(text) + `}]}`
}

// streamed reads a Responses stream: the output of its response.completed, and the items of its
// output_item.done events in order (what clients that keep items as they arrive replay).
func streamed(t *testing.T, b []byte) (completed string, done []string) {
	t.Helper()
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch gjson.Get(data, "type").Str {
		case "response.output_item.done":
			done = append(done, gjson.Get(data, "item").Raw)
		case "response.completed":
			completed = gjson.Get(data, "response.output").Raw
		case "error":
			t.Fatalf("stream ended with an error: %s", data)
		}
	}
	return completed, done
}

// replay is the next turn of a stateless client (store: false): the previous input, the output it
// was shown, an answer to every function call in it, and a new user message.
func replay(t *testing.T, prev []string, output []string) []string {
	t.Helper()
	next := append(append([]string(nil), prev...), output...)
	for _, it := range output {
		if gjson.Get(it, "type").Str == "function_call" {
			next = append(next, `{"type":"function_call_output","call_id":`+jsonStr(gjson.Get(it, "call_id").Str)+`,"output":"{\"temp\":3}"}`)
		}
	}
	return append(next, `{"role":"user","content":"and now?"}`)
}

func statelessBody(input []string, stream bool) string {
	b := `{"model":"gpt-5","store":false,"include":["reasoning.encrypted_content"],"instructions":"You are ACME's agent.",` +
		`"tools":[{"type":"function","name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}},` +
		`{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"input":[` + strings.Join(input, ",") + `]}`
	if stream {
		b, _ = sjson.Set(b, "stream", true)
	}
	return b
}

// TestResponsesStatelessReplayAfterBlockedCall: a stateless client (store: false) replays the
// output it was shown as the next turn's input. When a blocked call followed a reasoning item, the
// reasoning item goes with it, so that the next turn is accepted by an upstream that enforces the
// API's pairing of reasoning items — non-stream, and stream replayed from response.completed or
// from the output_item.done events.
func TestResponsesStatelessReplayAfterBlockedCall(t *testing.T) {
	evil := fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")
	good := fcItem("fc_good", "call_good", "get_weather", respGoodArgs, "completed")
	for _, tc := range []struct {
		name  string
		items []string
		// shown is the item ids the client must see, in order ("notice" for the notice item), in a
		// body and in a stream (where each blocked call's notice takes its place).
		shown, streamShown []string
	}{
		{"reasoning then blocked call", []string{reasoningItem("rs_1", "think"), evil}, []string{"notice"}, []string{"notice"}},
		{"two reasonings then blocked call", []string{reasoningItem("rs_1", "a"), reasoningItem("rs_2", "b"), evil, messageItem("msg_1", "done")},
			[]string{"msg_1", "notice"}, []string{"notice", "msg_1"}},
		{"reasoning, allowed call, blocked call", []string{reasoningItem("rs_1", "think"), good, evil},
			[]string{"rs_1", "fc_good"}, []string{"rs_1", "fc_good", "notice"}},
		{"reasoning, blocked call, reasoning, allowed call", []string{reasoningItem("rs_1", "a"), evil, reasoningItem("rs_2", "b"), good},
			[]string{"rs_2", "fc_good"}, []string{"notice", "rs_2", "fc_good"}},
		{"reasoning then text", []string{reasoningItem("rs_1", "think"), messageItem("msg_1", "hi")}, []string{"rs_1", "msg_1"}, []string{"rs_1", "msg_1"}},
	} {
		for _, mode := range []string{"non-stream", "stream completed", "stream items"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				u := newAPIUpstream(func(n int) []string {
					if n == 1 {
						return tc.items
					}
					return []string{messageItem("msg_last", "ok")}
				})
				up := newUpstream(t, u.ServeHTTP)
				ts, _ := newVetProxy(t, up.URL, "refuse")
				first := []string{`{"role":"user","content":"go"}`}
				resp, b := postTo(t, ts, PathResponses, statelessBody(first, mode != "non-stream"), nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("first turn: %d %s", resp.StatusCode, b)
				}
				var output []string
				switch mode {
				case "non-stream":
					for _, it := range gjson.GetBytes(b, "output").Array() {
						output = append(output, it.Raw)
					}
				case "stream completed":
					completed, _ := streamed(t, b)
					for _, it := range gjson.Parse(completed).Array() {
						output = append(output, it.Raw)
					}
				case "stream items":
					_, output = streamed(t, b)
				}
				var ids []string
				for _, it := range output {
					id := gjson.Get(it, "id").Str
					if strings.HasPrefix(id, "msg_promptgate_") {
						id = "notice"
					}
					ids = append(ids, id)
				}
				want := tc.shown
				if mode != "non-stream" {
					want = tc.streamShown
				}
				if strings.Join(ids, " ") != strings.Join(want, " ") {
					t.Fatalf("the client was shown %q, want %q", ids, want)
				}
				resp, b = postTo(t, ts, PathResponses, statelessBody(replay(t, first, output), false), nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("the next turn was refused: %d %s", resp.StatusCode, b)
				}
			})
		}
	}
	// The fake upstream does refuse a reasoning item without its follower, and a call without its
	// reasoning (else this test would prove nothing).
	u := newAPIUpstream(func(int) []string { return []string{reasoningItem("rs_1", "x"), good} })
	up := newUpstream(t, u.ServeHTTP)
	ts, _ := newVetProxy(t, up.URL, "refuse")
	if resp, b := postTo(t, ts, PathResponses, statelessBody([]string{`{"role":"user","content":"go"}`}, false), nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, input := range [][]string{{reasoningItem("rs_1", "x")}, {good, `{"type":"function_call_output","call_id":"call_good","output":"x"}`}} {
		if resp, b := postTo(t, ts, PathResponses, statelessBody(input, false), nil); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("the fake upstream accepted %s: %d %s", input, resp.StatusCode, b)
		}
	}
}

// TestResponsesInstructionsEcho: every Responses object the client gets — the created response,
// every stream event that carries the response, a retrieval (also streamed), a background response
// and its retrievals, a cancel — holds the client's own instructions, or null when it sent none;
// never the layered prompt the upstream was sent.
func TestResponsesInstructionsEcho(t *testing.T) {
	u := newAPIUpstream(func(int) []string { return []string{messageItem("msg_1", "hi")} })
	up := newUpstream(t, u.ServeHTTP)
	ts, _ := newVetProxy(t, up.URL, "refuse")
	client := newClient(ts)
	ctx := context.Background()
	const own = "You are ACME's agent.\nBe brief."
	check := func(where, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: instructions %s, want %s", where, got, want)
		}
	}
	for _, tc := range []struct {
		name   string
		params responses.ResponseNewParams
		want   string
	}{
		{"own", responses.ResponseNewParams{Model: "gpt-5", Instructions: openai.String(own), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, jsonStr(own)},
		{"none", responses.ResponseNewParams{Model: "gpt-5", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, "null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.Responses.New(ctx, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			check("create", gjson.Get(got.RawJSON(), "instructions").Raw, tc.want)
			if sent := gjson.GetBytes(up.lastBody(t), "instructions").Str; !strings.HasPrefix(sent, "=== SYSTEM CORE ===") {
				t.Fatalf("the upstream was not sent the layered prompt: %q", sent)
			}
			stored, err := client.Responses.Get(ctx, got.ID, responses.ResponseGetParams{})
			if err != nil {
				t.Fatal(err)
			}
			check("retrieve", gjson.Get(stored.RawJSON(), "instructions").Raw, tc.want)
			gs := client.Responses.GetStreaming(ctx, got.ID, responses.ResponseGetParams{})
			n := 0
			for gs.Next() {
				if r := gjson.Get(gs.Current().RawJSON(), "response"); r.Exists() {
					n++
					check("streamed retrieve "+gs.Current().Type, r.Get("instructions").Raw, tc.want)
				}
			}
			if err := gs.Err(); err != nil || n != 3 {
				t.Fatalf("streamed retrieve: %d response events, %v", n, err)
			}
			cancelled, err := client.Responses.Cancel(ctx, got.ID)
			if err != nil {
				t.Fatal(err)
			}
			check("cancel", gjson.Get(cancelled.RawJSON(), "instructions").Raw, tc.want)

			st := client.Responses.NewStreaming(ctx, tc.params)
			n = 0
			for st.Next() {
				if r := gjson.Get(st.Current().RawJSON(), "response"); r.Exists() {
					n++
					check("stream "+st.Current().Type, r.Get("instructions").Raw, tc.want)
				}
			}
			if err := st.Err(); err != nil || n != 3 {
				t.Fatalf("stream: %d response events, %v", n, err)
			}

			bg := tc.params
			bg.Background = openai.Bool(true)
			queued, err := client.Responses.New(ctx, bg)
			if err != nil {
				t.Fatal(err)
			}
			check("background create", gjson.Get(queued.RawJSON(), "instructions").Raw, tc.want)
			done, err := client.Responses.Get(ctx, queued.ID, responses.ResponseGetParams{})
			if err != nil {
				t.Fatal(err)
			}
			check("background retrieve", gjson.Get(done.RawJSON(), "instructions").Raw, tc.want)
			gs = client.Responses.GetStreaming(ctx, queued.ID, responses.ResponseGetParams{})
			n = 0
			for gs.Next() {
				if r := gjson.Get(gs.Current().RawJSON(), "response"); r.Exists() {
					n++
					check("background streamed retrieve "+gs.Current().Type, r.Get("instructions").Raw, tc.want)
				}
			}
			if err := gs.Err(); err != nil || n != 3 {
				t.Fatalf("background streamed retrieve: %d response events, %v", n, err)
			}
		})
	}
	// A response this proxy did not create (or has forgotten) is retrieved with instructions null:
	// the proxy cannot tell the client's own from the layered prompt the upstream keeps.
	u.mu.Lock()
	u.stored["resp_elsewhere"] = `{"id":"resp_elsewhere","object":"response","status":"completed","instructions":"=== SYSTEM CORE ===\nsecret","output":[]}`
	u.mu.Unlock()
	var raw *http.Response
	stored, err := client.Responses.Get(ctx, "resp_elsewhere", responses.ResponseGetParams{}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	check("unknown retrieve", gjson.Get(stored.RawJSON(), "instructions").Raw, "null")
}

// TestResponsesRetrievalShowsNotice: a response whose call was refused shows, when retrieved later,
// exactly the output the create showed — the notice item included (same id, same text) — non-stream
// and stream.
func TestResponsesRetrievalShowsNotice(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			u := newAPIUpstream(func(int) []string {
				return []string{reasoningItem("rs_1", "think"), fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")}
			})
			up := newUpstream(t, u.ServeHTTP)
			ts, _ := newVetProxy(t, up.URL, "refuse")
			body, _ := sjson.Delete(statelessBody([]string{`{"role":"user","content":"go"}`}, stream), "store")
			resp, b := postTo(t, ts, PathResponses, body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			shown, id := gjson.GetBytes(b, "output").Raw, gjson.GetBytes(b, "id").Str
			if stream {
				shown, _ = streamed(t, b)
				id = "resp_1"
			}
			if !strings.Contains(shown, "[promptgate] blocked tool call web_fetch") {
				t.Fatalf("the create showed no notice: %s", shown)
			}
			resp, got := getFrom(t, ts, PathResponses+"/"+id)
			if resp.StatusCode != http.StatusOK || gjson.GetBytes(got, "output").Raw != shown || resp.Header.Get(HeaderBlocked) != "1" {
				t.Fatalf("retrieved %d %v\n%s\nwant the output\n%s", resp.StatusCode, resp.Header, got, shown)
			}
		})
	}
}

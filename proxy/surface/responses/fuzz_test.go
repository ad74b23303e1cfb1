package responses

import (
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// visibleCalls are every function call a client could read from an output stream, however lenient:
// the items of output_item.added (with their argument deltas) and output_item.done events, and the
// output of every response snapshot. Argument deltas are assembled twice, as two kinds of clients
// place them: by output_index (the official SDKs; a Go client reads a missing one as 0) and by
// item_id.
func visibleCalls(t *testing.T, out []byte) []call {
	t.Helper()
	var calls []call
	byIndex := map[int64]int{} // output_index -> position in calls of the call assembled by index
	byItem := map[string]int{} // item id -> position in calls of the call assembled by item id
	for ev := range relaytest.Events(t, out) {
		if !gjson.ValidBytes(ev.Data) {
			continue
		}
		d := gjson.ParseBytes(ev.Data)
		oi := d.Get("output_index").Int()
		item := d.Get("item")
		itemCall := func() call {
			return call{item.Get("call_id").String(), item.Get("name").String(), item.Get("arguments").String()}
		}
		switch d.Get("type").String() {
		case "response.output_item.added":
			delete(byIndex, oi)
			if vetted(item.Get("type").String()) {
				calls = append(calls, itemCall())
				byIndex[oi] = len(calls) - 1
				calls = append(calls, itemCall())
				byItem[item.Get("id").String()] = len(calls) - 1
			}
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			if pos, ok := byIndex[oi]; ok {
				calls[pos].Args += d.Get("delta").String()
			}
			if id := d.Get("item_id"); id.Exists() {
				if pos, ok := byItem[id.String()]; ok {
					calls[pos].Args += d.Get("delta").String()
				}
			}
		case "response.output_item.done":
			if vetted(item.Get("type").String()) {
				calls = append(calls, itemCall())
			}
		}
		for _, it := range d.Get("response.output").Array() {
			if vetted(it.Get("type").String()) {
				calls = append(calls, call{it.Get("call_id").String(), it.Get("name").String(), it.Get("arguments").String()})
			}
		}
	}
	return calls
}

// normID gives every notice item of a stream one id: they are random.
func normID(out []byte) []byte {
	return regexp.MustCompile(`msg_promptgate_[0-9a-f]+`).ReplaceAll(out, []byte("msg_promptgate_N"))
}

func FuzzStream(f *testing.F) {
	for _, tc := range streamCases {
		relaytest.AddSeeds(f, tc.in, tc.mode, tc.atomic)
	}
	// Argument deltas of the argument template's shape: escapes, OpenAI's obfuscation padding, the
	// sequence number after the delta, a delta after the call is done.
	esc := (&rs{}).created().call(0, "fc_1", "call_1", "get_weather", `{"city":"Pa\"ris\n","unit":"celsius"}`, 5).
		call(1, "fc_2", "call_2", "get_weather", `{"city":"Bern"}`, 3).completed().String()
	f.Add([]byte(esc), byte(0), false, uint8(0), uint64(1))
	f.Add([]byte(esc), byte(1), true, uint8(5), uint64(2))
	padded := strings.ReplaceAll(esc, `"}`+"\n\nevent: response.function_call_arguments.delta", `","obfuscation":"ab1"}`+"\n\nevent: response.function_call_arguments.delta")
	f.Add([]byte(padded), byte(0), false, uint8(3), uint64(3))
	r := (&rs{}).created().call(0, "fc_1", "call_1", "get_weather", `{"city":"Bern"}`, 4)
	for range 2 {
		r.ev("response.function_call_arguments.delta", `{"item_id":"fc_1","output_index":0,"delta":"x\""}`)
	}
	late := r.completed().String()
	// A call added at the output_index of a message whose text went out: its events are held, not
	// passed.
	text := `{"item_id":"msg_1","output_index":0,"content_index":0,"delta":"x","logprobs":[]}`
	r = (&rs{}).created().ev("response.output_item.added", `{"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`).
		ev("response.output_text.delta", text).ev("response.output_text.delta", text).
		ev("response.output_item.added", `{"output_index":0,"item":`+fnItem("fc_1", "call_1", "get_weather", "", "in_progress")+`}`).
		ev("response.output_text.delta", text)
	f.Add([]byte(r.completed().String()), byte(0), false, uint8(0), uint64(1))
	f.Add([]byte(late), byte(0), false, uint8(0), uint64(1))
	f.Add([]byte(late), byte(0), true, uint8(0), uint64(1))
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64) {
		m := relaytest.FuzzMode(mode)
		out, ds, blocked := runStream(t, string(input), checkerFor(m, atomic), int(split%16), seed)
		relaytest.CheckBlocked(t, ds, blocked)

		// The shortcuts (templates) change nothing: without them, the same output and the same
		// decisions.
		relaytest.CheckShortcutsChangeNothing(t, string(input), int(split%16), seed, relaytest.Opener(NewStream, checkerFor(m, atomic)), out, ds, blocked, normID)

		passed := map[call]bool{} // by call id and name
		for _, d := range ds {
			if !d.Blocked() && d.Reason != vet.ReasonAfterRelease {
				passed[call{CallID: d.CallID, Name: d.Tool}] = true
				if m == vet.ModeAudit {
					// An audited call that changed between events passes as it came, whatever its
					// name.
					passed[call{CallID: d.CallID}] = true
				}
			}
		}
		check := checkerFor(m, atomic)
		for _, c := range visibleCalls(t, out) {
			// Audit passes everything as it came: an item whose id changed between events may be
			// visible under what its last event said (even nothing), as long as the call was
			// recorded.
			if m == vet.ModeAudit && len(passed) > 0 {
				continue
			}
			if !passed[call{CallID: c.CallID, Name: c.Name}] {
				t.Fatalf("client sees call %+v that was not allowed: %+v\n%s", c, ds, out)
			}
			if m == vet.ModeAudit {
				continue
			}
			// What is visible is a released call, whole: the added item with every delta, the done
			// item, the final output.
			if reason, _, ok := check.Check(c.Name, []byte(c.Args)); !ok {
				t.Fatalf("released call %+v breaks the policy: %s\n%s", c, reason, out)
			}
		}
	})
}

package messages

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// visibleCalls are every tool_use block a client could read from an output stream, however lenient:
// the blocks of message_start and of content_block_start, with the input_json_delta fragments of
// their index applied as the official SDKs apply them.
func visibleCalls(t *testing.T, out []byte) []cblock {
	t.Helper()
	var calls []cblock
	cur := map[int64]int{}
	for ev := range relaytest.Events(t, out) {
		if !gjson.ValidBytes(ev.Data) {
			continue
		}
		d := gjson.ParseBytes(ev.Data)
		idx := d.Get("index").Int()
		switch d.Get("type").String() {
		case "message_start":
			for _, b := range d.Get("message.content").Array() {
				if b.Get("type").String() == "tool_use" {
					calls = append(calls, cblock{Type: "tool_use", ID: b.Get("id").String(), Name: b.Get("name").String(), Input: b.Get("input").Raw})
				}
			}
		case "content_block_start":
			b := d.Get("content_block")
			delete(cur, idx)
			if b.Get("type").String() == "tool_use" {
				calls = append(calls, cblock{Type: "tool_use", ID: b.Get("id").String(), Name: b.Get("name").String(), Input: b.Get("input").Raw})
				cur[idx] = len(calls) - 1
			}
		case "content_block_delta":
			pos, ok := cur[idx]
			if pj := d.Get("delta.partial_json").String(); ok && pj != "" && d.Get("delta.type").String() == "input_json_delta" {
				if calls[pos].Input == "{}" {
					calls[pos].Input = pj
				} else {
					calls[pos].Input += pj
				}
			}
		}
	}
	return calls
}

func FuzzStream(f *testing.F) {
	for _, tc := range streamCases {
		relaytest.AddSeeds(f, tc.in, tc.mode, tc.atomic)
	}
	// Input fragments of the argument template's shape, escapes in them.
	esc := (&as{}).start().tool(0, "toolu_a", "get_weather", `{"city":"Pa\"ris\n","unit":"celsius"}`, 5).
		tool(1, "toolu_b", "get_weather", `{"city":"Bern"}`, 3).end("tool_use").String()
	f.Add([]byte(esc), byte(0), false, uint8(0), uint64(1))
	frag := `{"index":0,"delta":{"type":"input_json_delta","partial_json":"x\"}"}}`
	late := (&as{}).start().tool(0, "toolu_a", "get_weather", `{"city":"Bern"}`, 3).ev("content_block_delta", frag).
		tool(0, "toolu_b", "get_weather", `{"city":`, 3).ev("content_block_delta", frag).end("tool_use").String()
	f.Add([]byte(late), byte(0), false, uint8(0), uint64(1))
	f.Add([]byte(late), byte(0), true, uint8(0), uint64(1)) // atomic: a stopped call waits for message_delta
	f.Add([]byte(esc), byte(1), true, uint8(5), uint64(2))
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64) {
		m := relaytest.FuzzMode(mode)
		out, ds, blocked := runStream(t, string(input), checkerFor(m, atomic), int(split%16), seed)
		relaytest.CheckBlocked(t, ds, blocked)

		// The shortcuts (templates) change nothing: without them, the same output and the same
		// decisions.
		relaytest.CheckShortcutsChangeNothing(t, string(input), int(split%16), seed, relaytest.Opener(NewStream, checkerFor(m, atomic)), out, ds, blocked, nil)
		passed := map[[2]string]bool{}
		for _, d := range ds {
			if !d.Blocked() && d.Reason != vet.ReasonAfterRelease {
				passed[[2]string{d.CallID, d.Tool}] = true
			}
		}
		check := checkerFor(m, atomic)
		for _, c := range visibleCalls(t, out) {
			if !passed[[2]string{c.ID, c.Name}] {
				t.Fatalf("client sees call %+v that was not allowed: %+v\n%s", c, ds, out)
			}
			if m == vet.ModeAudit {
				continue
			}
			if reason, _, ok := check.Check(c.Name, []byte(c.Input)); !ok {
				t.Fatalf("released call %+v breaks the policy: %s\n%s", c, reason, out)
			}
		}
	})
}

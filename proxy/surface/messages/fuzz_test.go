package messages

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// visibleCalls are every tool_use block a client could read from an output stream, however lenient: the
// blocks of message_start and of content_block_start, with the input_json_delta fragments of their index
// applied as the official SDKs apply them.
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
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64) {
		m := relaytest.FuzzMode(mode)
		out, ds, blocked := runStream(t, string(input), checkerFor(m, atomic), int(split%16), seed)
		relaytest.CheckBlocked(t, ds, blocked)
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

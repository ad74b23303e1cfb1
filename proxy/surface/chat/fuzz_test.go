package chat

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
	"github.com/promptgate/promptgate/proxy/sse"
)

var doneData = []byte("[DONE]")

// upstreamCalls assembles the calls of an input stream the way Stream keys them: by (choice,
// index, id), a new id at an index in use starting a new call. Events Stream drops (JSON that is
// not one valid object) are skipped.
func upstreamCalls(input []byte) []call {
	type key struct{ ch, ix int }
	var calls []call
	cur := map[key]int{}
	r := sse.NewReader(bytes.NewReader(input))
	for {
		ev, err := r.Next()
		if err != nil || ev.Truncated {
			return calls
		}
		if !ev.HasData || bytes.HasPrefix(ev.Data, doneData) {
			continue
		}
		if jsoncheck.Object(ev.Data, jsoncheck.Limits{MaxDepth: maxEventDepth}) != nil {
			continue
		}
		for _, c := range gjson.GetBytes(ev.Data, "choices").Array() {
			ch := int(c.Get("index").Int())
			for _, e := range c.Get("delta.tool_calls").Array() {
				ix := int(e.Get("index").Int())
				if ix == -1 {
					ix = 0
				}
				id := e.Get("id").String()
				pos, ok := cur[key{ch, ix}]
				if !ok || (id != "" && id != calls[pos].ID) {
					calls = append(calls, call{Choice: ch})
					pos = len(calls) - 1
					cur[key{ch, ix}] = pos
				}
				if id != "" {
					calls[pos].ID = id
				}
				calls[pos].Name += e.Get("function.name").String()
				calls[pos].Args += e.Get("function.arguments").String()
			}
			if fc := c.Get("delta.function_call"); fc.Exists() && fc.Type != gjson.Null {
				pos, ok := cur[key{ch, -100}]
				if !ok {
					calls = append(calls, call{Choice: ch, ID: "legacy"})
					pos = len(calls) - 1
					cur[key{ch, -100}] = pos
				}
				calls[pos].Name += fc.Get("name").String()
				calls[pos].Args += fc.Get("arguments").String()
			}
		}
	}
}

func FuzzStream(f *testing.F) {
	for _, tc := range streamCases {
		relaytest.AddSeeds(f, frame(tc.in), tc.mode, tc.atomic)
	}
	for _, tc := range differentialCases {
		f.Add([]byte(tc.raw), byte(0), false, uint8(3), uint64(3))
	}
	// Argument deltas with OpenAI's obfuscation padding, of the argument template's shape.
	var padded []string
	for i, ev := range callEvents(0, 0, "call_1", "get_weather", `{"city":"Paris \"x\"\n"}`, 3) {
		padded = append(padded, strings.TrimSuffix(ev, "}")+`,"obfuscation":"`+strings.Repeat("a", i%4)+`"}`)
	}
	f.Add([]byte(sseOf(append(padded, finish(0, "tool_calls"), done)...)), byte(0), false, uint8(0), uint64(1))
	f.Add([]byte(sseOf(append(padded, finish(0, "tool_calls"), done)...)), byte(1), true, uint8(7), uint64(2))
	f.Fuzz(func(t *testing.T, input []byte, mode byte, atomic bool, split uint8, seed uint64) {
		m := relaytest.FuzzMode(mode)
		out, ds, blocked := runStream(t, string(input), checkerFor(m, atomic), int(split%16), seed)
		got := assemble(t, out) // also checks that the output is clean SSE

		// The shortcuts (templates) change nothing: without them, the same output and the same
		// decisions.
		relaytest.CheckShortcutsChangeNothing(t, string(input), int(split%16), seed, relaytest.Opener(NewStream, checkerFor(m, atomic)), out, ds, blocked, nil)

		// Decisions: every call vetted once; blocked count matches.
		relaytest.CheckBlocked(t, ds, blocked)
		var passed []vet.Decision
		for _, d := range ds {
			if !d.Blocked() && d.Reason != vet.ReasonAfterRelease {
				passed = append(passed, d)
			}
		}

		// The calls a client assembles are exactly the calls that passed, in order.
		if len(got.Calls) != len(passed) {
			t.Fatalf("client sees %d calls, %d passed:\n%+v\n%+v\n%s", len(got.Calls), len(passed), got.Calls, passed, out)
		}
		up := upstreamCalls(input)
		check := checkerFor(m, atomic)
		for i, c := range got.Calls {
			d := passed[i]
			// (In audit mode a renamed call passes with its first name in the decision.)
			nameOK := c.Name == d.Tool || d.Reason == vet.ReasonNameChanged
			if c.Choice != d.Choice || !nameOK || (c.ID != "legacy" && c.ID != d.CallID) {
				t.Fatalf("call %d: client sees %+v, decision %+v", i, c, d)
			}
			// Late deltas of a released call are dropped (and recorded) outside audit mode: then
			// the client has a prefix of the upstream's arguments.
			late := false
			for _, d := range ds {
				late = late || (d.Reason == vet.ReasonAfterRelease && d.Choice == c.Choice && d.CallID == c.ID)
			}
			found := false
			for _, u := range up {
				found = found || u == c ||
					(late && u.Choice == c.Choice && u.ID == c.ID && u.Name == c.Name && strings.HasPrefix(u.Args, c.Args))
			}
			if !found {
				t.Fatalf("released call %+v is not an upstream call %+v", c, up)
			}
			if m != vet.ModeAudit {
				if reason, _, ok := check.Check(c.Name, []byte(c.Args)); !ok {
					t.Fatalf("released call %+v breaks the policy: %s", c, reason)
				}
				if c.ID == "" {
					t.Fatalf("released call without id: %+v", c)
				}
			}
		}
		if got.After != 0 {
			t.Fatalf("%d events after the end", got.After)
		}
		if got.Done && got.Error != "" {
			t.Fatalf("both [DONE] and an error")
		}
	})
}

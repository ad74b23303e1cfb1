package chat

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
)

const storedBody = `{"id":"cc_1","object":"chat.completion","choices":[
 {"index":0,"message":{"role":"assistant","content":"text","tool_calls":[
  {"id":"call_a","type":"function","function":{"name":"a","arguments":"{}"}},
  {"id":"call_b","type":"function","function":{"name":"b","arguments":"{\"x\":\"SECRET\"}"}},
  {"type":"function","function":{"name":"noid","arguments":"{}"}}]},"finish_reason":"tool_calls"},
 {"index":1,"message":{"role":"assistant","content":null,"function_call":{"name":"legacy","arguments":"{}"}},"finish_reason":"function_call"}]}`

// TestShownStoredCompletion: released calls stay; a blocked call is replaced by its notice, a held
// one's notice is shown beside a kept call; a call without an id, and a legacy call not released,
// are removed.
func TestShownStoredCompletion(t *testing.T) {
	s := New(Options{})
	s.stored.begin("cc_1", []string{"own"})
	s.stored.decided("cc_1", vet.Decision{CallID: "call_a", Tool: "a", Verdict: vet.VerdictAllowed})
	s.stored.decided("cc_1", vet.Decision{CallID: "call_b", Tool: "b", Verdict: vet.VerdictHeld, Notice: "[promptgate] held b: reply CODE"})
	s.stored.decided("cc_1", vet.Decision{Choice: 1, Tool: "legacy", Verdict: vet.VerdictBlocked, Reason: "no"})
	out, removed, err := s.showCompletion([]byte(storedBody), "")
	if err != nil {
		t.Fatal(err)
	}
	got := gjson.ParseBytes(out)
	if removed != 3 || strings.Contains(string(out), "SECRET") || got.Get("choices.0.message.tool_calls.#").Int() != 1 ||
		got.Get("choices.0.message.tool_calls.0.id").Str != "call_a" || got.Get("choices.0.message.content").Str != "text\n[promptgate] held b: reply CODE" ||
		got.Get("choices.0.finish_reason").Str != "tool_calls" {
		t.Fatalf("choice 0: %d %s", removed, out)
	}
	if got.Get("choices.1.message.function_call").Exists() || got.Get("choices.1.message.content").Str != "[promptgate] blocked tool call legacy: no" ||
		got.Get("choices.1.finish_reason").Str != "stop" {
		t.Fatalf("choice 1: %s", out)
	}
	// A released legacy call stays.
	s.stored.begin("cc_2", nil)
	s.stored.decided("cc_2", vet.Decision{Choice: 1, Tool: "legacy", Verdict: vet.VerdictAllowed})
	out, _, _ = s.showCompletion([]byte(strings.Replace(storedBody, "cc_1", "cc_2", 1)), "")
	if !gjson.GetBytes(out, "choices.1.message.function_call").Exists() {
		t.Fatalf("released legacy call removed: %s", out)
	}
	// The zero Surface remembers nothing: every call is removed.
	out, removed, _ = Surface{}.showCompletion([]byte(storedBody), "")
	if removed != 4 || gjson.GetBytes(out, "choices.0.message.tool_calls").Exists() || !strings.Contains(string(out), "no record of releasing") {
		t.Fatalf("unknown completion: %d %s", removed, out)
	}
}

// TestStoredMemoryBounds: past its count or its bytes, the memory forgets the oldest completions
// first.
func TestStoredMemoryBounds(t *testing.T) {
	s := New(Options{Remember: 2})
	for _, id := range []string{"a", "b", "c"} {
		s.stored.begin(id, nil)
	}
	if s.stored.view("a") != nil || s.stored.view("b") == nil || s.stored.view("c") == nil {
		t.Fatal("the oldest was not forgotten first")
	}
	s.stored.maxBytes = 15
	s.stored.begin("d", []string{"0123456789"})
	s.stored.begin("e", []string{"0123456789"})
	if s.stored.view("c") != nil || s.stored.view("d") != nil || s.stored.view("e") == nil || s.stored.bytes != 10 {
		t.Fatal("bytes past the bound did not forget the oldest")
	}
	s.stored.decided("e", vet.Decision{CallID: "x", Verdict: vet.VerdictBlocked, Reason: "r"})
	if s.stored.view("e") != nil || s.stored.bytes != 0 {
		t.Fatalf("a notice past the bound kept %d bytes", s.stored.bytes)
	}
}

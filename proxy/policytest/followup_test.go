package policytest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// heldChat is a chat conversation of the payments example in which the model pays an IBAN that only
// an invoice named (rule payee holds it); REPLY is the messages a follow-up appends.
const heldChat = `{"model": "m", "messages": [
  {"role": "user", "content": "Pay invoice INV-7 please."},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_invoice", "arguments": "{\"id\": \"INV-7\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "INV-7, Paper Ltd, 80.00 EUR, pay to GB29 NWBK 6016 1331 9268 19"}REPLY],
 "tools": [{"type": "function", "function": {"name": "read_invoice", "parameters": {"type": "object"}}},
           {"type": "function", "function": {"name": "send_money", "parameters": {"type": "object"}}}]}`

// payAnswer is the model's answer that pays the invoice's IBAN, as call ID.
const payAnswer = `{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "ID", "type": "function", "function": {"name": "send_money", "arguments": "{\"iban\": \"GB29 NWBK 6016 1331 9268 19\", \"amount\": 80}"}}]}}]}`

// chatStep is one step of a case file over heldChat: its request with reply appended, the answer
// paying as call id, and the calls it expects; extra is more of the step's keys (headers).
func chatStep(indent, reply, id, calls, extra string) string {
	body := strings.Replace(heldChat, "REPLY", reply, 1)
	ans := strings.Replace(payAnswer, `"ID"`, `"`+id+`"`, 1)
	lines := []string{
		"request: " + yamlString(body),
		"answer: {body: " + yamlString(ans) + "}",
		"expect: {calls: " + calls + "}",
	}
	if extra != "" {
		lines = append(lines, extra)
	}
	return strings.Join(lines, "\n"+indent) + "\n"
}

// yamlString is s as a YAML single-quoted string, on one line.
func yamlString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "'", "''") + "'"
}

// replyWith is the follow-up's messages: the notice the client was shown, and the user's text.
func replyWith(text string) string {
	return `, {"role": "assistant", "content": "{{notice}}"}, {"role": "user", "content": "` + text + `"}`
}

// conversationFile is a case file of the payments example with one case: a held payment, then the
// follow-ups given (each a chatStep at the indentation of a then item).
func conversationFile(followUps ...string) string {
	var b strings.Builder
	b.WriteString("protocol: {file: ../protocols/payments.json}\ncases:\n  - name: conversation\n    ")
	b.WriteString(chatStep("    ", "", "call_2", "[{id: call_2, outcome: held, rule: payee}]", ""))
	if len(followUps) > 0 {
		b.WriteString("    then:\n")
		for _, f := range followUps {
			b.WriteString("      - " + f)
		}
	}
	return b.String()
}

// runConversation parses src as a case file in examples/tests and runs its one case.
func runConversation(t *testing.T, src string) *Result {
	t.Helper()
	cases, problems := Parse(filepath.Join(examplesTests, "conversation.test.yaml"), "", []byte(src), Options{})
	if len(problems) > 0 || len(cases) != 1 {
		t.Fatalf("problems %v, %d cases; file:\n%s", problems, len(cases), src)
	}
	env := NewEnv(testConfig(), BuiltinSnapshot())
	if problems := env.LoadProtocols(context.Background(), cases, nil); len(problems) > 0 {
		t.Fatal(problems)
	}
	r, err := env.Run(context.Background(), cases[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFollowUpConfirmsTheHeldCall: the user's reply with the code of the notice (in the
// conversation, or the app's X-Promptgate-Confirm header) releases the call the model asks for
// again: confirmed, and the case passes.
func TestFollowUpConfirmsTheHeldCall(t *testing.T) {
	t.Parallel()
	confirmed := "[{id: call_3, outcome: confirmed, kind: confirm}]"
	for name, step := range map[string]string{
		"typed":  chatStep("        ", replyWith("Yes, pay it: {{code}}"), "call_3", confirmed, ""),
		"header": chatStep("        ", "", "call_3", confirmed, `headers: {X-Promptgate-Confirm: "{{code}}"}`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runConversation(t, conversationFile(step))
			if !r.Passed() {
				t.Fatalf("failures %v, problems %v, details %v", r.Failures, r.Problems, r.Details)
			}
			if !strings.Contains(strings.Join(r.Details, "\n"), "then[0]:\nPOST /v1/chat/completions") {
				t.Errorf("details do not show the follow-up: %v", r.Details)
			}
		})
	}
}

// TestFollowUpWithAWrongCodeIsNotConfirmed: a code the notice did not show releases nothing: the
// call is held again, and a case that expects it confirmed fails at that expectation.
func TestFollowUpWithAWrongCodeIsNotConfirmed(t *testing.T) {
	t.Parallel()
	for name, reply := range map[string]string{
		"typed":   replyWith("Yes, pay it: 0000-0000"),
		"unshown": `, {"role": "assistant", "content": "Shall I pay?"}, {"role": "user", "content": "{{code}}"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runConversation(t, conversationFile(chatStep("        ", reply, "call_3", "[{id: call_3, outcome: confirmed}]", "")))
			if len(r.Problems) > 0 || len(r.Failures) != 1 {
				t.Fatalf("want one failure; failures %v, problems %v", r.Failures, r.Problems)
			}
			f := r.Failures[0]
			if f.Field != "cases[0].then[0].expect.calls[0]" || !strings.Contains(f.Message, "got held") || !strings.Contains(f.Message, "want confirmed") {
				t.Errorf("failure %v", f)
			}
		})
	}
}

// TestFollowUpReusingACodeIsNotConfirmed: a code releases its call once; the same reply again holds
// the call again, saying the code was used.
func TestFollowUpReusingACodeIsNotConfirmed(t *testing.T) {
	t.Parallel()
	reply := replyWith("Yes, pay it: {{code}}")
	src := conversationFile(
		chatStep("        ", reply, "call_3", "[{id: call_3, outcome: confirmed}]", ""),
		chatStep("        ", reply, "call_4", "[{id: call_4, outcome: held}]", ""),
	)
	r := runConversation(t, src)
	if !r.Passed() {
		t.Fatalf("failures %v, problems %v, details %v", r.Failures, r.Problems, r.Details)
	}
	if d := strings.Join(r.Details, "\n"); !strings.Contains(d, "already used") {
		t.Errorf("details do not say the code was used:\n%s", d)
	}
	// Expecting the reused code to confirm fails the case.
	r = runConversation(t, strings.Replace(src, "call_4, outcome: held", "call_4, outcome: confirmed", 1))
	if len(r.Failures) != 1 || r.Failures[0].Field != "cases[0].then[1].expect.calls[0]" {
		t.Errorf("failures %v", r.Failures)
	}
}

// TestFollowUpNeedsAHeldCallBefore: {{code}} or {{notice}} where no step before expects a held call
// is a problem of the case file at the field that holds it; where one was expected and none was
// held, the step is not run and the case fails.
func TestFollowUpNeedsAHeldCallBefore(t *testing.T) {
	t.Parallel()
	released := strings.Replace(conversationFile(chatStep("        ", replyWith("{{code}}"), "call_3", "[{id: call_3, outcome: confirmed}]", "")),
		"[{id: call_2, outcome: held, rule: payee}]", "[{id: call_2, outcome: released}]", 1)
	_, problems := Parse("x.test.yaml", "", []byte(released), Options{})
	if len(problems) != 1 || problems[0].Field != "cases[0].then[0].request" || problems[0].Line != 8 || !strings.Contains(problems[0].Message, "no step before it expects a held call") {
		t.Errorf("problems %v", problems)
	}
	inHeader := strings.Replace(conversationFile(chatStep("        ", "", "call_3", "[{id: call_3, outcome: confirmed}]", `headers: {X-Promptgate-Confirm: "{{notice}}"}`)),
		"outcome: held", "outcome: released", 1)
	_, problems = Parse("x.test.yaml", "", []byte(inHeader), Options{})
	if len(problems) != 1 || problems[0].Field != "cases[0].then[0].headers.X-Promptgate-Confirm" {
		t.Errorf("problems %v", problems)
	}
	// Expected held, but the answer's call is one the payee rule lets through: nothing was held.
	known := conversationFile(chatStep("        ", replyWith("{{code}}"), "call_3", "[{id: call_3, outcome: confirmed}]", ""))
	src := strings.Replace(known, `"INV-7, Paper Ltd, 80.00 EUR, pay to GB29 NWBK 6016 1331 9268 19"}],`, `"INV-7"}],`, 1)
	src = strings.Replace(src, `"Pay invoice INV-7 please."}`, `"Pay invoice INV-7 to GB29 NWBK 6016 1331 9268 19."}`, 1)
	r := runConversation(t, src)
	var notRun bool
	for _, f := range r.Failures {
		notRun = notRun || f.Field == "cases[0].then[0]" && strings.Contains(f.Message, "not run") && strings.Contains(f.Message, "no call was held")
	}
	if !notRun || len(r.Problems) > 0 {
		t.Errorf("failures %v, problems %v", r.Failures, r.Problems)
	}
}

// TestFollowUpPlaceholdersAreJSONEscaped: the notice goes into the request as a JSON string's
// content, whatever it holds.
func TestFollowUpPlaceholdersAreJSONEscaped(t *testing.T) {
	t.Parallel()
	h := heldCall{code: "7KQM-3XPA", notice: "a \"quoted\"\nline\\ and <tag>"}
	got := fillRequest([]byte(`{"a": "{{notice}}", "b": "code {{code}}", "c": "{{other}}"}`), h)
	want := `{"a": "a \"quoted\"\nline\\ and \u003ctag\u003e", "b": "code 7KQM-3XPA", "c": "{{other}}"}`
	if string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if _, ok := heldOf("t", "id", "held. Arguments: ref=\"ABCD-EFGH\". reply with the code 7KQM-3XPA (valid for 10 minutes)."); !ok {
		t.Fatal("no code read")
	}
	if h, _ := heldOf("t", "id", "held. Arguments: ref=\"ABCD-EFGH\". reply with the code 7KQM-3XPA (valid for 10 minutes)."); h.code != "7KQM-3XPA" {
		t.Errorf("code %q: want the notice's last", h.code)
	}
}

// TestFollowUpsShareTheConversationsMemory: the steps of a case run through one proxy, so a rule
// that remembers a conversation caught (after: violation) applies to a follow-up after a held call;
// the same request as a case of its own, on a proxy of its own, is released.
func TestFollowUpsShareTheConversationsMemory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	proto, err := os.ReadFile(filepath.Join(examplesTests, "..", "protocols", "payments.json"))
	if err != nil {
		t.Fatal(err)
	}
	remembering := strings.Replace(string(proto), `"flows": [`, `"flows": [{"id": "caught", "after": ["violation"], "tools": ["send_email"]}, `, 1)
	if remembering == string(proto) {
		t.Fatal("payments.json has no flows")
	}
	if err := os.WriteFile(filepath.Join(dir, "payments.json"), []byte(remembering), 0o600); err != nil {
		t.Fatal(err)
	}
	mail := `{"model": "m", "messages": [{"role": "user", "content": "Pay invoice INV-7 please."}, {"role": "assistant", "content": "Done?"}, {"role": "user", "content": "Mail ap@acme.com that it is paid."}], "tools": [{"type": "function", "function": {"name": "send_email", "parameters": {"type": "object"}}}]}`
	mailAnswer := strings.Replace(strings.Replace(payAnswer, `"ID"`, `"call_9"`, 1), `"name": "send_money", "arguments": "{\"iban\": \"GB29 NWBK 6016 1331 9268 19\", \"amount\": 80}"`,
		`"name": "send_email", "arguments": "{\"to\": \"ap@acme.com\", \"body\": \"Paid.\"}"`, 1)
	mailStep := "request: " + yamlString(mail) + "\n        answer: {body: " + yamlString(mailAnswer) + "}\n        expect: {calls: [{id: call_9, outcome: blocked, kind: flow, rule: caught}]}\n"
	src := strings.Replace(conversationFile(mailStep), "../protocols/payments.json", "payments.json", 1)
	src += "  - name: alone\n    " + strings.ReplaceAll(strings.Replace(mailStep, "outcome: blocked, kind: flow, rule: caught", "outcome: released", 1), "\n        ", "\n    ")
	cases, problems := Parse(filepath.Join(dir, "memory.test.yaml"), "", []byte(src), Options{})
	if len(problems) > 0 || len(cases) != 2 {
		t.Fatalf("problems %v, %d cases:\n%s", problems, len(cases), src)
	}
	env := NewEnv(testConfig(), BuiltinSnapshot())
	if problems := env.LoadProtocols(context.Background(), cases, nil); len(problems) > 0 {
		t.Fatal(problems)
	}
	for _, c := range cases {
		r, err := env.Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Passed() {
			t.Errorf("%s: failures %v, problems %v, details %v", c.Name, r.Failures, r.Problems, r.Details)
		}
	}
}

package demo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Call is one tool call of an answer.
type Call struct {
	ID   string
	Name string
	// Arguments is a JSON object, compact.
	Arguments string
}

// Answer is what the model says to a request: its text, then its tool calls.
type Answer struct {
	Text  string
	Calls []Call
}

// heldNotice starts the notice with which the proxy replaces a call it holds for the user's
// confirmation.
const heldNotice = "[promptgate] held tool call"

// maxCalls bounds the calls of one answer.
const maxCalls = 16

// directive is how the script is told to call a tool: `call NAME {JSON object}`, anywhere in a
// text.
var directive = regexp.MustCompile(`(?i:\bcall)\s+([A-Za-z0-9_.\-]{1,64})\s*\{`)

// Reply is the script: what the model answers to r.
//   - The conversation ends with tool outputs: the model obeys every `call NAME {...}` in them, as a model
//     that follows what a document tells it (the demo of an injection); without one it reports what the
//     tool returned.
//   - It ends with a user message: the model makes the calls the message asks for the same way. A message
//     that asks for none, right after a notice that the proxy held a call, repeats the turn that made
//     the call (the user typed the confirmation code; a real model calls again).
//   - Otherwise it answers with the system prompt it received, so the layered prompt can be seen.
//
// Only declared tools are called; a call of another tool is answered with a sentence saying so.
func Reply(r Request) Answer {
	turns := r.Turns
	n := len(turns)
	i := n
	for i > 0 && turns[i-1].Role == RoleTool {
		i--
	}
	if i < n {
		var outs []string
		for _, t := range turns[i:] {
			outs = append(outs, t.Text)
		}
		text := strings.Join(outs, "\n")
		if a, ok := obey(text, r.Tools, n, "Following the instructions in the tool result, I am calling"); ok {
			return a
		}
		return Answer{Text: "The tool returned: " + cut(text, 300)}
	}
	if n > 0 && turns[n-1].Role == RoleUser {
		if a, ok := obey(turns[n-1].Text, r.Tools, n, "As you asked, I am calling"); ok {
			return a
		}
		if n > 1 && turns[n-2].Role == RoleAssistant && strings.Contains(turns[n-2].Text, heldNotice) {
			r.Turns = turns[:n-2]
			return Reply(r)
		}
	}
	return Answer{Text: echo(r)}
}

// obey makes the calls text asks for; ok is false when it asks for none. turn numbers the calls'
// ids.
func obey(text string, tools []string, turn int, intro string) (Answer, bool) {
	var calls []Call
	var made, missing []string
	for _, m := range directive.FindAllStringSubmatchIndex(text, -1) {
		name := text[m[2]:m[3]]
		args, ok := object(text[m[1]-1:])
		if !ok {
			continue
		}
		if !slices.Contains(tools, name) {
			missing = append(missing, name)
			continue
		}
		if len(calls) == maxCalls {
			break
		}
		calls = append(calls, Call{ID: callID(turn, len(calls), name, args), Name: name, Arguments: args})
		made = append(made, name)
	}
	if len(calls)+len(missing) == 0 {
		return Answer{}, false
	}
	var say []string
	if len(made) > 0 {
		say = append(say, intro+" "+names(made)+".")
	}
	for _, name := range missing {
		say = append(say, "I was asked to call "+name+", but I was given no tool of that name.")
	}
	return Answer{Text: strings.Join(say, " "), Calls: calls}, true
}

// names lists the tools called, in order, each once with its count when it is called more than
// once.
func names(made []string) string {
	var order []string
	count := map[string]int{}
	for _, n := range made {
		if count[n] == 0 {
			order = append(order, n)
		}
		count[n]++
	}
	for i, n := range order {
		if count[n] > 1 {
			order[i] = fmt.Sprintf("%s (%d calls)", n, count[n])
		}
	}
	return strings.Join(order, ", ")
}

// object reads the JSON object at the start of s, compacted.
func object(s string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return "", false
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", false
	}
	return b.String(), true
}

// callID is a call's id: the same request gives the same ids.
func callID(turn, i int, name, args string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%d\x00%s\x00%s", turn, i, name, args))
	return hex.EncodeToString(h[:12])
}

// echo is the answer to a message that asks for no call: what the model is, and the system prompt
// it got.
func echo(r Request) string {
	var b strings.Builder
	b.WriteString("I am promptgate's demo model: I answer from a script, not from a language model. ")
	b.WriteString("Write call TOOL {JSON arguments} in a message and I call that tool, if the request declares it.")
	if r.System == "" {
		b.WriteString("\n\nI received no system prompt.")
		return b.String()
	}
	fmt.Fprintf(&b, "\n\nThe system prompt I received (%d characters):\n\n%s", len(r.System), r.System)
	return b.String()
}

// cut shortens s to at most n bytes, on a character boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

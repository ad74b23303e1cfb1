package policytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
)

// Placeholders of a recorded case: the values the decision log does not keep.
const (
	placeholderModel = "PLACEHOLDER-model"
	placeholderUser  = "PLACEHOLDER: the conversation is not kept by the decision log; put the request's messages here"
)

// Recording is what the decision log kept of one request, from which a case is written.
type Recording struct {
	id, path        string
	protocol        string
	protocolVersion int
	removed         []string
	calls           []recordedCall
	// other are the events of other kinds (a request refused as a whole), which a case does not
	// replay.
	other []audit.Event
}

// recordedCall is one call: its first event (the decision) and the further ones on it.
type recordedCall struct {
	main audit.Event
	more []audit.Event
}

// NewRecording groups the events of request id, oldest first, that came on path (a rewritten route:
// the log does not keep it). The log keeps no call id: a call's further decisions are the events
// that follow its decision without arguments of their own, about the same tool, in the same round.
func NewRecording(id, path string, events []audit.Event) (*Recording, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("no decision of request %q: is the id right (the X-Request-Id of the answer), and is the event still in the log?", id)
	}
	if !proxy.PreviewPath(path) {
		return nil, fmt.Errorf("path %q: use one of %s", path, strings.Join(proxy.PreviewPaths(), ", "))
	}
	r := &Recording{id: id, path: path, protocol: events[0].Protocol, protocolVersion: events[0].ProtocolVersion}
	for _, e := range events {
		switch {
		case e.Kind == audit.KindToolRemoved:
			r.removed = append(r.removed, e.Tool)
		case !slices.Contains(callKinds(), e.Kind):
			r.other = append(r.other, e)
		case len(r.calls) > 0 && e.ArgsSHA256 == "" && r.last().main.Tool == e.Tool && r.last().main.Round == e.Round:
			r.last().more = append(r.last().more, e)
		default:
			r.calls = append(r.calls, recordedCall{main: e})
		}
	}
	if r.protocol == "" {
		return nil, fmt.Errorf("the events of request %q name no protocol", id)
	}
	if len(r.calls) == 0 && len(r.removed) == 0 {
		return nil, fmt.Errorf("request %q has no decision on a tool or a call to replay (%d other event(s))", id, len(r.other))
	}
	return r, nil
}

func (r *Recording) last() *recordedCall { return &r.calls[len(r.calls)-1] }

// rounds is how many answers the upstream gave (onViolation continue asks again).
func (r *Recording) rounds() int {
	n := 1
	for _, c := range r.calls {
		n = max(n, c.main.Round+1)
	}
	return n
}

// surface is the API of the recording's path.
func (r *Recording) surface() string { return surfaceOf(r.path) }

// tools are the tools the request must declare: the ones called and the ones removed, once each.
func (r *Recording) tools() []string {
	var out []string
	for _, c := range r.calls {
		if !slices.Contains(out, c.main.Tool) {
			out = append(out, c.main.Tool)
		}
	}
	for _, t := range r.removed {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// callID is the id a recorded call is given in the answer (the log keeps none); "" on Gemini, whose
// calls may have none.
func (r *Recording) callID(i int) string {
	switch r.surface() {
	case surfaceMessages:
		return "toolu_" + strconv.Itoa(i+1)
	case surfaceGemini:
		return ""
	}
	return "call_" + strconv.Itoa(i+1)
}

// args are a call's arguments: as kept, or a placeholder object that names the digest of the real
// ones.
func (c recordedCall) args() (raw string, kept bool) {
	if c.main.Args != "" {
		return c.main.Args, true
	}
	return fmt.Sprintf(`{"PLACEHOLDER":"the arguments are not kept (audit.includeArguments is off); their SHA-256 is %s"}`, c.main.ArgsSHA256), false
}

// request is the recorded request's body: placeholders, with every tool declared with an open
// schema.
func (r *Recording) request() []byte {
	var tools []string
	for _, t := range r.tools() {
		name := string(mustJSON(t))
		switch r.surface() {
		case surfaceChat:
			tools = append(tools, `{"type":"function","function":{"name":`+name+`,"parameters":{"type":"object"}}}`)
		case surfaceResponses:
			tools = append(tools, `{"type":"function","name":`+name+`,"parameters":{"type":"object"}}`)
		case surfaceMessages:
			tools = append(tools, `{"name":`+name+`,"input_schema":{"type":"object"}}`)
		default:
			tools = append(tools, `{"name":`+name+`,"parameters":{"type":"object"}}`)
		}
	}
	model, user := string(mustJSON(placeholderModel)), string(mustJSON(placeholderUser))
	switch r.surface() {
	case surfaceChat:
		return []byte(`{"model":` + model + `,"messages":[{"role":"user","content":` + user + `}],"tools":[` + strings.Join(tools, ",") + `]}`)
	case surfaceResponses:
		return []byte(`{"model":` + model + `,"input":` + user + `,"tools":[` + strings.Join(tools, ",") + `]}`)
	case surfaceMessages:
		return []byte(`{"model":` + model + `,"max_tokens":1024,"messages":[{"role":"user","content":` + user + `}],"tools":[` + strings.Join(tools, ",") + `]}`)
	}
	return []byte(`{"contents":[{"role":"user","parts":[{"text":` + user + `}]}],"tools":[{"functionDeclarations":[` + strings.Join(tools, ",") + `]}]}`)
}

// answer is the upstream's answer of a round: its calls, with their arguments byte for byte as
// logged; sep goes between the calls (a line break makes a body readable; none keeps an event on
// its line).
func (r *Recording) answer(round int, sep string) string {
	var parts []string
	for i, c := range r.calls {
		if c.main.Round != round {
			continue
		}
		name, id := string(mustJSON(c.main.Tool)), string(mustJSON(r.callID(i)))
		args, _ := c.args()
		switch r.surface() {
		case surfaceChat:
			parts = append(parts, `{"id":`+id+`,"type":"function","function":{"name":`+name+`,"arguments":`+string(mustJSON(args))+`}}`)
		case surfaceResponses:
			parts = append(parts, `{"type":"function_call","id":"fc_`+strconv.Itoa(i+1)+`","call_id":`+id+`,"name":`+name+`,"arguments":`+string(mustJSON(args))+`,"status":"completed"}`)
		case surfaceMessages:
			parts = append(parts, `{"type":"tool_use","id":`+id+`,"name":`+name+`,"input":`+args+`}`)
		default:
			parts = append(parts, `{"functionCall":{"name":`+name+`,"args":`+args+`}}`)
		}
	}
	list := sep + strings.Join(parts, ","+sep) + sep
	switch r.surface() {
	case surfaceChat:
		return `{"id":"chatcmpl-recorded","object":"chat.completion","created":0,"model":"` + placeholderModel + `","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":null,"tool_calls":[` + list + `]},"finish_reason":"tool_calls"}]}`
	case surfaceResponses:
		return `{"id":"resp_recorded","object":"response","created_at":0,"status":"completed","model":"` + placeholderModel + `","output":[` + list + `]}`
	case surfaceMessages:
		return `{"id":"msg_recorded","type":"message","role":"assistant","model":"` + placeholderModel + `","content":[` + list + `],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	}
	return `{"candidates":[{"content":{"role":"model","parts":[` + list + `]},"finishReason":"STOP","index":0}]}`
}

func mustJSON(s string) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a Go string always marshals
	}
	return b
}

// note says who recorded the case (by), from what and when, and which of its values are
// placeholders.
func (r *Recording) note(by, source string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded by %s from %s on %s.\n", by, source, now.Format(time.RFC3339))
	b.WriteString("The decision log keeps the protocol version, the tools removed and, for each call, its tool, its decision and its\n" +
		"arguments (only their SHA-256 unless audit.includeArguments is on). Every other value is a placeholder:\n")
	fmt.Fprintf(&b, "- path: the route is not kept; %s is the one --path gave.\n", r.path)
	b.WriteString("- request: the model and the conversation (PLACEHOLDER), and the tools the app declared with their schemas (each\n" +
		"  tool named by a decision, with an open schema). Rules on where a value came from (provenance, scan, flows)\n" +
		"  judge the conversation: put the real messages in for them to decide as they did.\n")
	b.WriteString("- answer: the call ids, the text, and whether it was a stream are not kept.\n")
	placeholders := 0
	for _, c := range r.calls {
		if _, kept := c.args(); !kept {
			placeholders++
		}
	}
	if placeholders > 0 {
		fmt.Fprintf(&b, "- the arguments of %d call(s) (PLACEHOLDER objects): argumentsSha256 under expect checks that the ones you put in are\n"+
			"  the recorded ones.\n", placeholders)
	}
	if len(r.other) > 0 {
		fmt.Fprintf(&b, "- %d decision(s) of other kinds (%s) are not replayed.\n", len(r.other), r.other[0].Kind)
	}
	if r.rounds() > 1 {
		b.WriteString("- onViolation continue asked the upstream again: one answer per round is given; the last round's text is not kept.\n")
	}
	return b.String()
}

// caseNameOf makes a case name of a request id.
func caseNameOf(id string) string {
	s := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(id, "_")
	s = strings.TrimLeft(s, "_.-")
	if s == "" {
		s = "recorded"
	}
	return s[:min(len(s), 100)]
}

// YAML is the case file of the recording; its note says it was recorded by by (what recorded it: a
// command, an endpoint) from source (the log it read) at now.
func (r *Recording) YAML(by, source string, now time.Time) ([]byte, error) {
	protocol := r.protocol
	if r.protocolVersion > 0 {
		protocol += "@" + strconv.Itoa(r.protocolVersion)
	}
	c := mapping()
	c.add("name", scalar(caseNameOf(r.id)))
	c.add("note", literal(r.note(by, source, now)))
	req, err := jsonNode(r.request())
	if err != nil {
		return nil, err
	}
	c.add("request", req)
	if n := r.rounds(); n == 1 {
		c.add("answer", r.answerNode(0))
	} else {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for i := 0; i < n; i++ {
			list.Content = append(list.Content, r.answerNode(i))
		}
		c.add("answers", list)
	}
	c.add("expect", r.expectNode())
	doc := mapping()
	doc.HeadComment = "A policy test case recorded from the decision log: see the note for the values that are placeholders.\n" +
		"Run it with: promptgate test FILE (add --db or --admin: the protocol is a version in the store)."
	doc.add("protocol", scalar(protocol))
	if r.path != proxy.PathChat {
		doc.add("path", scalar(r.path))
	}
	doc.add("cases", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{c.Node}})
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc.Node); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// expectNode is the expectations of the recording: the tools removed and every call's decision.
func (r *Recording) expectNode() *yaml.Node {
	e := mapping()
	if len(r.removed) > 0 {
		e.add("toolsRemoved", stringList(r.removed))
	}
	calls := &yaml.Node{Kind: yaml.SequenceNode}
	for i, c := range r.calls {
		m := mapping()
		if id := r.callID(i); id != "" {
			m.add("id", scalar(id))
		}
		m.add("tool", scalar(c.main.Tool))
		m.add("outcome", scalar(outcomeOfVerdict(c.main.Verdict)))
		if c.main.Kind != audit.KindToolCall {
			m.add("kind", scalar(c.main.Kind))
		}
		if c.main.Rule != "" || c.main.Verdict == audit.VerdictBlocked {
			m.add("rule", scalar(c.main.Rule))
		}
		if c.main.ArgsSHA256 != "" {
			m.add("argumentsSha256", scalar(c.main.ArgsSHA256))
		}
		calls.Content = append(calls.Content, m.Node)
	}
	e.add("calls", calls)
	return e.Node
}

// outcomeOfVerdict is the outcome a case names for a logged verdict.
func outcomeOfVerdict(v string) string {
	switch v {
	case audit.VerdictAllowed:
		return outcomeReleased
	case audit.VerdictAudited, audit.VerdictHeld, audit.VerdictConfirmed:
		return v
	}
	return outcomeBlocked
}

// answerNode is the answer of a round, its body as JSON text (the calls' arguments stay byte for
// byte as logged): a body, or one event where the route is a Gemini stream.
func (r *Recording) answerNode(round int) *yaml.Node {
	a := mapping()
	if strings.Contains(r.path, ":streamGenerateContent") {
		ev := mapping()
		ev.add("data", scalar(r.answer(round, "")))
		a.add("events", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{ev.Node}})
		return a.Node
	}
	a.add("body", literal(r.answer(round, "\n  ")+"\n"))
	return a.Node
}

// yamlMap builds a mapping node.
type yamlMap struct{ *yaml.Node }

func mapping() yamlMap { return yamlMap{&yaml.Node{Kind: yaml.MappingNode}} }

func (m yamlMap) add(key string, v *yaml.Node) {
	m.Content = append(m.Content, scalar(key), v)
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func literal(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.LiteralStyle}
}

func stringList(list []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range list {
		n.Content = append(n.Content, scalar(s))
	}
	return n
}

// jsonNode is a JSON document as a YAML node in block style, keys in their order.
func jsonNode(b []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	n := doc.Content[0]
	var plain func(*yaml.Node)
	plain = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			plain(c)
		}
	}
	plain(n)
	return n, nil
}

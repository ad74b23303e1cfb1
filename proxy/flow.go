package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// HeaderConfirm carries confirmation codes of held calls that the app gives beside the conversation
// (a confirm button): only the app can set a header, never the model or the content it reads.
const HeaderConfirm = "X-Promptgate-Confirm"

// NoticeCode is the confirmation code a held call's notice shows (XXXX-XXXX), read as a client
// reads the codes of an assistant message: the notice's last (the arguments it shows come before
// it); "" when it shows none.
func NoticeCode(notice string) string {
	codes := flow.ShownCodes(notice)
	if len(codes) == 0 {
		return ""
	}
	return codes[len(codes)-1]
}

// maxConfirmHeader bounds what is read of X-Promptgate-Confirm.
const maxConfirmHeader = 256

// analyzeFlow: where the protocol has information-flow rules, the conversation is read once — the
// body's messages, the history the surface knows of (a Responses request that continues out of the
// body's sight), promptgate.context and the plugins' answers as untrusted context — for the
// response side to judge each call against. Rules that do not compile (they were validated when the
// protocol was stored) refuse the request: fail closed.
func (e *Engine) analyzeFlow(_ context.Context, j *job) error {
	pol, err := j.plan.flow, j.plan.flowErr
	if err != nil {
		return fmt.Errorf("proxy: protocol %q: the information-flow rules do not compile: %w", j.eff.ID, err)
	}
	j.flowPolicy = pol
	if pol.Empty() {
		return nil
	}
	t, err := e.transcript(j)
	if err != nil {
		return err
	}
	conv, err := pol.Analyze(t, e.flowOptions(j))
	if err != nil {
		return &policy.Error{Code: policy.CodeInvalidRequest, Message: err.Error()}
	}
	j.flow = conv
	return nil
}

// transcript is the request's conversation as the surface reads it, read once per request (the flow
// rules, a shadow version's and learn mode share it).
func (e *Engine) transcript(j *job) (*flow.Transcript, error) {
	if j.transcript != nil {
		return j.transcript, nil
	}
	t, err := j.sf.Transcript(j.body)
	if err != nil {
		return nil, err
	}
	if e.calls != nil {
		t.LabelServers(e.calls.ServerOf)     // outputs of calls the MCP door let through are their server's
		t.LabelServerTexts(e.calls.WriterOf) // texts an MCP server wrote, sent as the user's
	}
	j.transcript = t
	return t, nil
}

// flowOptions are what the flow rules read of a request beside its transcript.
func (e *Engine) flowOptions(j *job) flow.Options {
	conversation := strings.TrimSpace(j.in.Header.Get(HeaderConversation))
	if conversation == "" {
		conversation = j.ext.Conversation
	}
	return flow.Options{
		Context:      append(extensionText(j.ext.Context), contextTexts(j.gathered)...),
		Lists:        j.gathered.Lists,
		Conversation: conversation,
		Confirmer:    j.in.Confirmer,
		Violations:   j.in.Violations,
		User:         firstNonEmpty(j.in.Header.Get(HeaderUser), j.ext.User),
		Codes:        confirmCodes(j.in.Header),
	}
}

// traceFlow: the conversation's size as the rules see it.
func traceFlow(sp *tracing.Span, j *job) {
	if j.flow == nil {
		return
	}
	sp.Int(attrFlowSegments, len(j.flow.Segments()))
	sp.Int(attrFlowCalls, len(j.flow.Calls()))
	sp.Bool(attrFlowUnseen, j.flow.Unseen() != "")
}

// confirmCodes are the values of X-Promptgate-Confirm, each cut to maxConfirmHeader bytes.
func confirmCodes(h map[string][]string) []string {
	var out []string
	for _, v := range h[HeaderConfirm] {
		if len(v) > maxConfirmHeader {
			v = v[:maxConfirmHeader]
		}
		out = append(out, v)
	}
	return out
}

// extensionText is the text of the request's own promptgate.context (its keys and string and number
// values), untrusted context for the flow rules; nil when there is none.
func extensionText(raw []byte) []string {
	if raw == nil {
		return nil
	}
	return []string{surface.JSONText(gjson.ParseBytes(raw), true)}
}

// contextTexts are the gathered context's texts, one per source (its keys and string and number
// values, line by line), and the sources' directives: plugin answers are untrusted context for the
// flow rules.
func contextTexts(g gather.Result) []string {
	var out []string
	for _, src := range g.Sources {
		var b strings.Builder
		walkText(&b, src.Value, 0)
		out = append(out, b.String())
	}
	return append(out, g.Directives...)
}

// maxContextDepth bounds the walk of a context value.
const maxContextDepth = 64

func walkText(b *strings.Builder, v *ctxjson.Value, depth int) {
	if v == nil || depth > maxContextDepth {
		return
	}
	line := func(s string) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	switch v.Kind() {
	case ctxjson.KindString, ctxjson.KindNumber:
		line(v.Text())
	case ctxjson.KindArray:
		for _, e := range v.Elems() {
			walkText(b, e, depth+1)
		}
	case ctxjson.KindObject:
		for k, e := range v.Fields() {
			line(k)
			walkText(b, e, depth+1)
		}
	}
}

// flowJudge judges each vetted call of an answer by the request's conversation (vet.Judge). A call
// judged again (a background response retrieved more than once) keeps its first decision: its
// budget is not counted twice, nor a confirmation code spent twice.
type flowJudge struct {
	conv *flow.Conversation
	size int
	mu   sync.Mutex
	memo map[[sha256.Size]byte]vet.Decision
}

var _ vet.Judge = (*flowJudge)(nil)

// maxJudgeMemo bounds the decisions a judge remembers; past it, calls are judged afresh.
const maxJudgeMemo = 1024

func newFlowJudge(conv *flow.Conversation, bodyBytes int) *flowJudge {
	return &flowJudge{conv: conv, size: bodyBytes, memo: map[[sha256.Size]byte]vet.Decision{}}
}

func (j *flowJudge) Size() int { return j.size }

// Judge implements vet.Judge: flow.Check's result as the call's decision — the first rule that
// decided it (its kind, verdict, reason and rule), the held call's notice, and the other decisions
// in More.
func (j *flowJudge) Judge(d vet.Decision) vet.Decision {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00", d.Choice, d.CallID, d.Tool)
	h.Write(d.Args)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	j.mu.Lock()
	if prev, ok := j.memo[key]; ok {
		j.mu.Unlock()
		return prev
	}
	j.mu.Unlock()
	r := j.conv.Check(flow.Call{Tool: d.Tool, Args: d.Args})
	out := decisionOf(d, r)
	j.mu.Lock()
	if len(j.memo) < maxJudgeMemo {
		j.memo[key] = out
	}
	j.mu.Unlock()
	return out
}

// decisionOf turns flow's result on a call into the call's decision.
func decisionOf(d vet.Decision, r flow.Result) vet.Decision {
	if r.Verdict == flow.VerdictAllowed || len(r.Decisions) == 0 {
		return d
	}
	main := 0
	if r.Verdict == flow.VerdictConfirmed || r.Verdict == flow.VerdictBlocked {
		for i, fd := range r.Decisions {
			if r.Verdict == flow.VerdictConfirmed && fd.Kind == flow.KindConfirm && fd.Verdict == flow.VerdictConfirmed ||
				r.Verdict == flow.VerdictBlocked && fd.Reason == r.Reason {
				main = i
				break
			}
		}
	}
	m := r.Decisions[main]
	d.Kind, d.Verdict, d.Reason, d.Rule = m.Kind, verdictOf(r.Verdict), m.Reason, m.Rule
	if r.Verdict == flow.VerdictHeld {
		d.Notice = r.Notice
	}
	for i, fd := range r.Decisions {
		if i != main {
			d.More = append(d.More, vet.Decision{Kind: fd.Kind, Choice: d.Choice, CallID: d.CallID, Tool: d.Tool,
				Verdict: fd.Verdict, Reason: fd.Reason, Rule: fd.Rule})
		}
	}
	return d
}

// verdictOf maps flow's verdict of a call to vet's.
func verdictOf(v string) vet.Verdict {
	switch v {
	case flow.VerdictBlocked:
		return vet.VerdictBlocked
	case flow.VerdictHeld:
		return vet.VerdictHeld
	case flow.VerdictConfirmed:
		return vet.VerdictConfirmed
	}
	return vet.VerdictAllowed
}

// NewConfirmer returns the Confirmer of held calls' codes: under key (at least flow.MinConfirmKey
// bytes; every instance that must accept another's codes needs the same) or, when key is "", under
// a random key of its own (its codes then hold on this process only, until it ends). Used codes are
// kept in memory, so a code is single-use per instance.
func NewConfirmer(key string) (*flow.Confirmer, error) {
	k := []byte(key)
	if key == "" {
		k = make([]byte, flow.MinConfirmKey)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("proxy: confirmation key: %w", err)
		}
	}
	cf, err := flow.NewConfirmer(k, flow.NewUsedSet(0), nil)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return cf, nil
}

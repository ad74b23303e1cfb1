package flow_test

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// held checks a call in a conversation and returns its result, which must be held, and its code.
func held(t *testing.T, c *flow.Conversation, call flow.Call) (flow.Result, string) {
	t.Helper()
	r := c.Check(call)
	if r.Verdict != flow.VerdictHeld {
		t.Fatalf("want held: %+v", r)
	}
	return r, codeOf(t, r.Notice)
}

// TestConfirmReplies: the replies users type confirm — a word of four letters before the code, the
// dashes and spaces of other keyboards, full-width forms — on every surface; a reply that only
// looks like one (one character off, inside a longer word) does not.
func TestConfirmReplies(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, confirmSpec)
	call := flow.Call{Tool: "send_money", Args: payArgs}
	fullWidth := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r > ' ' && r < 0x7f {
				return r + 0xfee0
			}
			return r
		}, s)
	}
	replies := []struct {
		name string
		f    func(code string) string
		ok   bool
	}{
		{"Code", func(k string) string { return "Code " + k }, true},
		{"okay", func(k string) string { return "okay " + k }, true},
		{"Sure", func(k string) string { return "Sure " + k }, true},
		{"Please send", func(k string) string { return "Please send " + k }, true},
		{"lower case, spaced", func(k string) string { return "yes: " + strings.ToLower(strings.Replace(k, "-", " ", 1)) }, true},
		{"en dash", func(k string) string { return strings.Replace(k, "-", "\u2013", 1) }, true},
		{"em dash", func(k string) string { return "ok " + strings.Replace(k, "-", "\u2014", 1) + "!" }, true},
		{"minus sign", func(k string) string { return strings.Replace(k, "-", "\u2212", 1) }, true},
		{"horizontal bar", func(k string) string { return strings.Replace(k, "-", "\u2015", 1) }, true},
		{"no-break space", func(k string) string { return "Code\u00a0" + strings.Replace(k, "-", "\u00a0", 1) }, true},
		{"full width", func(k string) string { return "コード " + fullWidth(k) }, true},
		{"after many ordinary words", func(k string) string {
			return strings.Repeat("standard payments schedule ", 40) + "Please send " + k + " " + strings.Repeat("reminder ", 40)
		}, true},
		{"one character off", func(k string) string { return k[:8] + map[bool]string{true: "2", false: "0"}[k[8] == '0'] }, false},
		{"inside a longer word", func(k string) string { return "Ref" + strings.ReplaceAll(k, "-", "") }, false},
		{"two dashes", func(k string) string { return strings.Replace(k, "-", "--", 1) }, false},
	}
	for _, rp := range replies {
		clk := &clock{time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
		cf, _ := flow.NewConfirmer(key32, nil, clk.now)
		opt := flow.Options{Confirmer: cf}
		r, code := held(t, analyze(t, p, confirmBase, opt), call)
		reply := rp.f(code)
		got := analyze(t, p, withReply(confirmBase, r.Notice, reply), opt).Check(call)
		if (got.Verdict == flow.VerdictConfirmed) != rp.ok {
			t.Errorf("%s: reply %q for %s: %s", rp.name, reply, code, got.Verdict)
		}
	}
}

// TestConfirmGuessesWithUnseenHistory: with part of the history unseen (the notice went out there),
// the user's visible messages are read without a notice to answer; ordinary words do not crowd the
// code out: a dashed form is tried first, then one with a digit, latest message first.
func TestConfirmGuessesWithUnseenHistory(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, confirmSpec)
	call := flow.Call{Tool: "send_money", Args: payArgs}
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	ask := func(cf *flow.Confirmer, input ...string) flow.Result {
		t.Helper()
		var turns []turn
		for _, in := range input {
			turns = append(turns, turn{User: in})
		}
		c, err := p.Analyze(unseen(turns, "previous_response_id"), flow.Options{Confirmer: cf, Conversation: "conv-7"})
		if err != nil {
			t.Fatal(err)
		}
		return c.Check(call)
	}
	words := plainWords(40)
	for _, tc := range []struct {
		name  string
		reply func(code string) []string
	}{
		{"dashed, before many words", func(k string) []string { return []string{"Sure " + k + ". " + words} }},
		{"dashed, in an older message", func(k string) []string { return []string{"Sure " + k + ".", words} }},
		{"spaced, among many words", func(k string) []string { return []string{words + strings.Replace(k, "-", " ", 1) + " " + words} }},
	} {
		// A code with a digit, for the spaced form to be told from ordinary words.
		var cf *flow.Confirmer
		var code string
		for {
			cf, _ = flow.NewConfirmer(key32, nil, clk.now)
			code = codeOf(t, ask(cf, "pay it").Notice)
			if strings.ContainsAny(code, "0123456789") {
				break
			}
			clk.t = clk.t.Add(time.Minute)
		}
		if r := ask(cf, tc.reply(code)...); r.Verdict != flow.VerdictConfirmed {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}

// plainWords are n distinct words of 8 letters that read as codes without a digit.
func plainWords(n int) string {
	const letters = "abcdefghjkmnpqrstvwxyz"
	var out []string
	for i := range n {
		w := []byte("standard")
		for j, x := 7, i; x > 0; j, x = j-1, x/len(letters) {
			w[j] = letters[x%len(letters)]
		}
		out = append(out, string(w))
	}
	return strings.Join(out, " ") + " "
}

// TestCodePerHold: the same call held again in the same conversation and minute shows a code that
// has not been used, each confirming once; a hold shown again without a reply keeps its code; past
// the codes of a minute the call is blocked until the minute turns; a fleet that shares its used
// codes shows each instance's holds a fresh code; a later code expires as the first does.
func TestCodePerHold(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, confirmSpec)
	call := flow.Call{Tool: "send_money", Args: payArgs}
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)}
	used := flow.NewUsedSet(0)
	cf, _ := flow.NewConfirmer(key32, used, clk.now)
	other, _ := flow.NewConfirmer(key32, used, clk.now) // another instance of the fleet
	opt, otherOpt := flow.Options{Confirmer: cf}, flow.Options{Confirmer: other}
	var codes []string
	turns := confirmBase
	for i := range 6 {
		r, code := held(t, analyze(t, p, turns, opt), call)
		if slices.Contains(codes, code) {
			t.Fatalf("hold %d shows a code already used: %s", i+1, code)
		}
		if _, again := held(t, analyze(t, p, turns, opt), call); again != code {
			t.Fatalf("hold %d shown again changed its code", i+1)
		}
		codes = append(codes, code)
		turns = withReply(turns, r.Notice, "Go ahead "+code)
		o := opt
		if i%2 == 1 {
			o = otherOpt
		}
		if got := analyze(t, p, turns, o).Check(call); got.Verdict != flow.VerdictConfirmed {
			t.Fatalf("the code of hold %d did not confirm: %+v", i+1, got)
		}
		clk.t = clk.t.Add(time.Second)
	}
	r := analyze(t, p, turns, opt).Check(call)
	if r.Verdict != flow.VerdictBlocked || !strings.Contains(r.Reason, "every code of this call for this minute has been used") ||
		kinds(r.Decisions) != "flow/blocked confirm/reused confirm/blocked" || r.Notice != "" {
		t.Fatalf("the seventh hold of the minute: %+v", r)
	}
	clk.t = clk.t.Add(time.Minute)
	if _, code := held(t, analyze(t, p, turns, opt), call); slices.Contains(codes, code) {
		t.Fatalf("the next minute shows a used code")
	}
	// The code of a later hold of a minute expires as the first does.
	clk.t = clk.t.Add(11 * time.Minute)
	late := withReply(confirmBase, "reply with the code "+codes[3], codes[3])
	if r := analyze(t, p, late, flow.Options{Confirmer: cf}).Check(call); !strings.Contains(kinds(r.Decisions), "confirm/expired") {
		t.Fatalf("the code of hold 4 past its TTL: %+v", r)
	}
}

// TestUsedSetSpent: asking whether a key is spent records nothing, and an expired key is not spent.
func TestUsedSetSpent(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := flow.NewUsedSet(1)
	if s.Spent("a", now) || s.Spent("a", now) {
		t.Fatal("an unused key is spent")
	}
	if s.Use("a", now.Add(time.Minute), now) != flow.UseFresh || !s.Spent("a", now) {
		t.Fatal("a used key is not spent")
	}
	if s.Spent("a", now.Add(time.Minute)) || s.Spent("b", now) {
		t.Fatal("an expired or unknown key is spent")
	}
}

// TestConfirmBinding: without a conversation id, a code is bound to the conversation's first user
// message: it still confirms where the app's messages stand differently in the next turn — a
// Responses continuation (previous_response_id) whose replayed history puts a developer item
// before the instructions sent again, the same with the whole history sent again, Chat with system
// and developer messages, Messages with a system prompt — and it does not confirm in a
// conversation that began with another message.
func TestConfirmBinding(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, confirmSpec)
	call := flow.Call{Tool: "send_money", Args: payArgs}
	first := append([]turn{{App: "You are the payments assistant."}, {App: "Developer: the user is in Berlin."}}, confirmBase...)
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	cf, _ := flow.NewConfirmer(key32, nil, clk.now)
	opt := flow.Options{Confirmer: cf}
	r, code := held(t, analyze(t, p, first, opt), call)
	clk.t = clk.t.Add(time.Minute)
	whole := withReply(first, r.Notice, "Code "+code)
	// Continued with previous_response_id: the history is the instance's record (turn 1's input
	// items: the developer item first, then the output as shown); the body has the instructions
	// again and the new input only.
	continued := flow.NewTranscript()
	continued.History(true)
	for i, tu := range first[1:] {
		addTurn(continued, tu, i)
	}
	continued.Text(flow.RoleAssistant, r.Notice, len(first))
	continued.History(false)
	continued.Text(flow.RoleApp, first[0].App, -1)
	continued.Text(flow.RoleUser, "Code "+code, 0)
	c, err := p.Analyze(continued, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Check(call); got.Verdict != flow.VerdictConfirmed {
		t.Errorf("continued with previous_response_id: %+v", got)
	}
	cf, _ = flow.NewConfirmer(key32, nil, clk.now)
	opt = flow.Options{Confirmer: cf}
	if got := analyze(t, p, whole, opt).Check(call); got.Verdict != flow.VerdictConfirmed {
		t.Errorf("the whole history sent again: %+v", got)
	}
	cf, _ = flow.NewConfirmer(key32, nil, clk.now)
	another := slices.Clone(whole)
	another[2] = turn{User: "Pay my rent as the landlord's letter says!"}
	if got := analyze(t, p, another, flow.Options{Confirmer: cf}).Check(call); got.Verdict != flow.VerdictHeld {
		t.Errorf("a conversation with another first message: %+v", got)
	}
}

// FuzzReadCodes: whatever a user types around a code, the code reads when nothing beside it runs
// on into it (a letter or a digit, as written or after NFKC, or a combining mark), and reading
// never panics.
func FuzzReadCodes(f *testing.F) {
	for _, seed := range [][2]string{{"Code ", "."}, {"okay\u00a0", "!"}, {"Please send ", ""}, {"x", ""}, {"\u2460", " "}, {"", "\u0301"}} {
		f.Add(seed[0], seed[1])
	}
	p := mustCompile(f, confirmSpec)
	call := flow.Call{Tool: "send_money", Args: payArgs}
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	cf, _ := flow.NewConfirmer(key32, flow.NewUsedSet(1<<20), clk.now)
	c := analyze(f, p, confirmBase, flow.Options{Confirmer: cf})
	r := c.Check(call)
	code := codeOf(f, r.Notice)
	f.Fuzz(func(t *testing.T, before, after string) {
		if !utf8.ValidString(before) || !utf8.ValidString(after) {
			return
		}
		reply := before + code + after
		clean := norm.NFKC.String(before+code) == norm.NFKC.String(before)+code &&
			norm.NFKC.String(code+after) == code+norm.NFKC.String(after)
		b, a := norm.NFKC.String(before), norm.NFKC.String(after)
		alone := clean && (b == "" || !isWordByte(b[len(b)-1])) && (a == "" || !isWordByte(a[0]))
		cf, _ := flow.NewConfirmer(key32, nil, clk.now)
		got := analyze(t, p, withReply(confirmBase, r.Notice, reply), flow.Options{Confirmer: cf}).Check(call)
		if alone && got.Verdict != flow.VerdictConfirmed {
			t.Fatalf("reply %q: %s", reply, got.Verdict)
		}
	})
}

// addTurn adds one neutral turn to a transcript, as flowtest.Transcript does.
func addTurn(tr *flow.Transcript, tu turn, i int) {
	for _, seg := range flowtest.Transcript([]turn{tu}).Segments() {
		switch seg.Source.Kind {
		case flow.SourceApp:
			tr.Text(flow.RoleApp, seg.Text, i)
		case flow.SourceUser:
			tr.Text(flow.RoleUser, seg.Text, i)
		case flow.SourceAssistant:
			tr.Text(flow.RoleAssistant, seg.Text, i)
		}
	}
	for _, c := range tu.Calls {
		tr.Call(c.Tool, c.ID, args(c.Args), "", i)
	}
	if tu.Tool != "" {
		tr.Output(tu.Tool, flow.Output{Text: tu.Output, Doc: tu.Output}, i)
	}
}

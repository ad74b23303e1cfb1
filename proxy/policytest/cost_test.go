package policytest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/store"
)

// builtinVersions serves the built-in definitions as a store's versions, each the active one.
type builtinVersions struct{}

func (builtinVersions) Active(_ context.Context, kind store.Kind, name string) (store.Record, error) {
	if rec, ok := BuiltinSnapshot().Protocols[name]; ok && kind == store.KindProtocol {
		return rec, nil
	}
	return store.Record{}, store.ErrNotFound
}

func (b builtinVersions) Get(ctx context.Context, kind store.Kind, name string, _ int) (store.Record, error) {
	return b.Active(ctx, kind, name)
}

// costCase is a case file of one case of the built-in neutral protocol whose answer's text is text,
// with the client checks expect.
func costCase(text, expect string) string {
	return "protocol: neutral\ncases:\n  - name: big\n    request: {model: m, messages: [{role: user, content: hi}]}\n" +
		"    answer: {body: {id: c, object: chat.completion, created: 1, model: m, choices: [{index: 0, finish_reason: stop, message: {role: assistant, content: " +
		text + "}}]}}\n    expect: {client: " + expect + "}\n"
}

// TestCaseFileCostIsBounded: a case file cannot make a run cost what it likes. A pattern costs its
// compiled program's size for every byte of the text it is matched against (Go's regexp is linear
// in the text, times the program): a pattern past MaxPatternInsts is a problem of the file, and a
// match that would take the run's patterns past MaxPatternWork is not run (its check fails, saying
// so), while a small pattern over the same text still runs; a file of more than MaxCases cases is a
// problem; nothing is counted by wall time.
func TestCaseFileCostIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, problems := Parse("", "", []byte(costCase("x", "{matches: ['[a-z]{1000}x']}")), Options{NoFiles: true}); len(problems) != 1 ||
		!strings.Contains(problems[0].Message, "instructions") || problems[0].Field != "cases[0].expect.client.matches[0]" {
		t.Fatalf("a pattern past the size: %v", problems)
	}
	if n := programSize(`[a-z]{900}x`); n > MaxPatternInsts || n < 900 {
		t.Fatalf("the program of [a-z]{900}x has %d instructions", n)
	}
	big := strings.Repeat("a", 2<<20) // 2 MiB times 900 instructions: past the run's work
	cases, problems := Parse("", "", []byte(costCase(big, "{matches: ['[a-z]{900}x', 'a{3}'], notMatches: ['[a-z]{900}y']}")), Options{NoFiles: true})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	env := NewEnv(testConfig(), BuiltinSnapshot())
	if problems := env.LoadProtocols(ctx, cases, builtinVersions{}); len(problems) > 0 {
		t.Fatal(problems)
	}
	r, err := env.Run(ctx, cases[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Failures) != 2 || !strings.Contains(r.Failures[0].Message, "not checked") || !strings.Contains(r.Failures[1].Message, "not checked") ||
		r.Failures[0].Field != "cases[0].expect.client.matches[0]" || r.Failures[1].Field != "cases[0].expect.client.notMatches[0]" {
		t.Fatalf("failures %v (the small pattern must have run and matched)", r.Failures)
	}
	if w := env.work.Load(); w <= 0 || w > MaxPatternWork {
		t.Fatalf("the run's work left is %d", w)
	}
	var b strings.Builder
	b.WriteString("protocol: neutral\ncases:\n")
	for i := range MaxCases + 1 {
		fmt.Fprintf(&b, "  - {name: c%d, request: {model: m}, answer: {body: {}}, expect: {status: 200}}\n", i)
	}
	if _, problems := Parse("", "", []byte(b.String()), Options{NoFiles: true}); len(problems) != 1 || !strings.Contains(problems[0].Message, "at most") {
		t.Fatalf("a file past MaxCases: %d problems, first %v", len(problems), problems[:min(1, len(problems))])
	}
}

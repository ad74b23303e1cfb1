package flow

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestPhraseLookupLinear: a text value is looked up in time linear in the indexed words plus the
// value's, also when the attacker writes both sides as one word repeated (the page "a a … a" and
// the value "a a … a b"). The bound is on word comparisons, counted by the index.
func TestPhraseLookupLinear(t *testing.T) {
	t.Parallel()
	var s Spec
	if err := json.Unmarshal([]byte(`{"provenance":[{"id":"r","tool":"t","path":"v","as":"text","not":{"from":["tool:web_fetch"]}}]}`), &s); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000 // words of each page
	for _, tc := range []struct {
		name    string
		pages   []string
		value   string
		verdict string
	}{
		{"value runs past the page", []string{strings.Repeat("a ", n)}, strings.Repeat("a ", n/2) + "b", VerdictAllowed},
		{"value within the page", []string{strings.Repeat("a ", n)}, strings.Repeat("a ", n/2), VerdictBlocked},
		{"value longer than the page", []string{strings.Repeat("a ", n)}, strings.Repeat("a ", n+1), VerdictAllowed},
		{"last word differs", []string{strings.Repeat("a b ", n/2) + "c"}, strings.Repeat("a b ", n/4) + "a a", VerdictAllowed},
		{"rare word everywhere", []string{strings.Repeat("a ", n/2) + "b " + strings.Repeat("a ", n/2)}, strings.Repeat("a ", n/2) + "b a c", VerdictAllowed},
		{"many pages", slices.Repeat([]string{strings.Repeat("a ", n/50) + "b"}, 50), strings.Repeat("a ", n/50) + "b", VerdictBlocked},
		{"many pages, no match", slices.Repeat([]string{strings.Repeat("a ", n/50) + "b"}, 50), strings.Repeat("a ", n/50+1) + "b", VerdictAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := NewTranscript()
			tr.Text(RoleUser, "hi", 0)
			words := 0
			for i, page := range tc.pages {
				id := "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				tr.Call("web_fetch", id, []byte("{}"), "", 2*i+1)
				tr.Output(id, Output{Text: page, Doc: page}, 2*i+2)
				words += len(splitWords(page))
			}
			c, err := p.Analyze(tr, Options{})
			if err != nil {
				t.Fatal(err)
			}
			args, err := json.Marshal(map[string]string{"v": tc.value})
			if err != nil {
				t.Fatal(err)
			}
			if r := c.Check(Call{Tool: "t", Args: args}); r.Verdict != tc.verdict {
				t.Fatalf("verdict %s (%s), want %s", r.Verdict, r.Reason, tc.verdict)
			}
			m := len(splitWords(tc.value))
			if steps, bound := c.idx().phraseSteps.Load(), int64(2*(words+m)); steps > bound {
				t.Errorf("%d word comparisons for %d indexed words and a value of %d, want at most %d", steps, words, m, bound)
			}
		})
	}
}

// TestPhraseSearch: the Knuth-Morris-Pratt pass finds a run exactly where one is, for runs that
// overlap themselves, and agrees with a plain search on random texts of a small alphabet.
func TestPhraseSearch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text, pat []int32
		want      bool
	}{
		{[]int32{1, 1, 2, 1, 1, 1, 2}, []int32{1, 1, 1, 2}, true},
		{[]int32{1, 2, 1, 2, 1, 3}, []int32{1, 2, 1, 3}, true},
		{[]int32{1, 2, 1, 2, 1, 2}, []int32{1, 2, 1, 3}, false},
		{[]int32{1, 2, 3}, []int32{1, 2, 3}, true},
		{[]int32{1, 2}, []int32{1, 2, 3}, false},
		{[]int32{3, 3, 1}, []int32{3, 1}, true},
		{[]int32{}, []int32{1}, false},
		{[]int32{1, 2, 1, 1, 2, 1, 2, 1}, []int32{1, 2, 1, 2, 1}, true},
	} {
		fail, _ := kmpTable(tc.pat)
		if got, _ := holdsPhrase(tc.text, tc.pat, fail); got != tc.want {
			t.Errorf("holdsPhrase(%v, %v) = %v, want %v", tc.text, tc.pat, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		text := make([]int32, rng.IntN(12))
		pat := make([]int32, 1+rng.IntN(5))
		for i := range text {
			text[i] = rng.Int32N(3)
		}
		for i := range pat {
			pat[i] = rng.Int32N(3)
		}
		want := false
		for i := 0; i+len(pat) <= len(text) && !want; i++ {
			want = slices.Equal(text[i:i+len(pat)], pat)
		}
		fail, _ := kmpTable(pat)
		if got, steps := holdsPhrase(text, pat, fail); got != want || steps > 2*len(text) {
			t.Fatalf("holdsPhrase(%v, %v) = %v in %d steps, want %v", text, pat, got, steps, want)
		}
	}
}

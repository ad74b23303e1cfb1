package policy

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"
)

// TestToolGlobSlash: '/' is an ordinary character in a tool name for a deny list, so a deny glob
// catches names that hold one (path.Match's '*' and '?' stop at '/', which let "delete_/all" past
// "delete_*"); an allowlist keeps path.Match.
func TestToolGlobSlash(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"delete_*", "delete_/all", true},
		{"delete_*", "delete_all/x/y", true},
		{"*", "a/b", true},
		{"github*", "github/delete_repo", true},
		{"*_repo", "github/delete_repo", true},
		{"a?b", "a/b", true},
		{"a[/]b", "a/b", true},
		{"a[^x]b", "a/b", true},
		{"a\\/b", "a/b", true},
		{"a/b", "a/b", true},
		{"delete_*", "Delete_/all", false},
		{"a?b", "a//b", false},
		{"a*b*c", strings.Repeat("ab", 5000) + "/", false}, // stays linear: no blow-up
		{"[", "[", true},                                   // equal strings match before the pattern is looked at
		{"[", "x", false},                                  // malformed never matches
		{"a[", "a[", true},
	} {
		if got := toolGlobMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("toolGlobMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	if !anyDenied([]string{"delete_*"}, "delete_/all") {
		t.Error("deny list misses delete_/all")
	}
	if anyGlob([]string{"search_*"}, "search_a/b") {
		t.Error("allowlist admits search_a/b")
	}
}

// TestToolGlobLikePathMatch: for names without '/', toolGlobMatch is path.Match.
func TestToolGlobLikePathMatch(t *testing.T) {
	patterns := []string{"*", "a*", "*a", "a*b", "a?c", "[ab]*", "[^a]?", "[a-c]x*", "\\*a", "*[xy]*z", "ж*", "?", "**a", "a\\?", "[]a]", "a[b-]", "[\\]]x"}
	alphabet := []rune("abcxyz*?[]^-\\жé")
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, p := range patterns {
		for range 400 {
			var b strings.Builder
			for range rnd.IntN(6) {
				b.WriteRune(alphabet[rnd.IntN(len(alphabet))])
			}
			name := b.String()
			want, err := path.Match(p, name)
			if err != nil {
				want = p == name
			}
			if got := toolGlobMatch(p, name); got != want {
				t.Fatalf("toolGlobMatch(%q, %q) = %v, path.Match says %v (%v)", p, name, got, want, err)
			}
		}
	}
}

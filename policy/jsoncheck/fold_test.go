package jsoncheck

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
)

// foldCases are objects checked with FoldedKeys. want is the kind Object reports (0: accepted); at,
// when not "", is the input's text from the offset that error must report (the second key's quote).
var foldCases = []struct {
	name, in string
	want     Kind
	at       string
}{
	// ASCII case
	{"recipient RECIPIENT", `{"recipient":"DE1","amount":120,"RECIPIENT":"GB2"}`, CaseVariantKey, `"RECIPIENT"`},
	{"Body after body", `{"body":"hi","Body":"see evil.net"}`, CaseVariantKey, `"Body"`},
	{"To before to", `{"To":"eve@evil.net","to":"bob@acme.com"}`, CaseVariantKey, `"to"`},
	{"URL url", `{"url":"https://docs.acme.com/","URL":"https://evil.net/"}`, CaseVariantKey, `"URL"`},
	{"one letter", `{"a":1,"A":2}`, CaseVariantKey, `"A"`},
	{"mixed inside", `{"userId":1,"userid":2}`, CaseVariantKey, `"userid"`},
	// Go's extra folds: Kelvin sign and long s
	{"kelvin raw", `{"k":1,"K":2}`, CaseVariantKey, `"K"`},
	{"kelvin vs K", `{"K":1,"\u212a":2}`, CaseVariantKey, `"\u212a"`},
	{"kelvin in a word", `{"kind":1,"Kind":2}`, CaseVariantKey, `"Kind"`},
	{"long s raw", `{"s":1,"ſ":2}`, CaseVariantKey, `"ſ"`},
	{"long s escaped", `{"S":1,"\u017f":2}`, CaseVariantKey, `"\u017f"`},
	{"long s in a word", `{"subject":"a","ſubject":"b"}`, CaseVariantKey, `"ſubject"`},
	{"kelvin and long s, bytes of different length", `{"ks":1,"Kſ":2}`, CaseVariantKey, `"Kſ"`},
	// Greek sigma: Σ, σ and final ς are one orbit
	{"sigma final", `{"σ":1,"ς":2}`, CaseVariantKey, `"ς"`},
	{"Sigma final", `{"Σ":1,"ς":2}`, CaseVariantKey, `"ς"`},
	{"Sigma sigma", `{"οδός":1,"ΟΔΌΣ":2}`, CaseVariantKey, `"ΟΔΌΣ"`},
	// other simple folds
	{"sharp s capital", `{"ß":1,"ẞ":2}`, CaseVariantKey, `"ẞ"`},
	{"micro sign mu", `{"µ":1,"μ":2}`, CaseVariantKey, `"μ"`},
	{"dz digraph title", `{"ǆ":1,"ǅ":2}`, CaseVariantKey, `"ǅ"`},
	{"deseret (outside the BMP)", `{"𐐨":1,"𐐀":2}`, CaseVariantKey, `"𐐀"`},
	{"deseret escaped pair", `{"𐐨":1,"\ud801\udc00":2}`, CaseVariantKey, `"\ud801`},
	// Turkish i: strings.EqualFold does not join ı or İ with i (TestFoldCasesFollowEqualFold
	// checks)
	{"dotless i", `{"i":1,"ı":2}`, 0, ""},
	{"dotted I", `{"i":1,"İ":2}`, 0, ""},
	{"dotless i and I", `{"I":1,"ı":2}`, 0, ""},
	{"dotless and dotted", `{"ı":1,"İ":2}`, 0, ""},
	{"plain i I", `{"ıd":1,"id":2,"ID":3}`, CaseVariantKey, `"ID"`},
	// full case folding is not simple folding: no real decoder matches these
	{"sharp s vs ss", `{"ß":1,"ss":2}`, 0, ""},
	{"ligature ff", `{"ﬀ":1,"ff":2}`, 0, ""},
	// nested objects and objects in arrays
	{"nested", `{"mail":{"to":"a","cc":"b","TO":"c"}}`, CaseVariantKey, `"TO"`},
	{"deeply nested", `{"a":{"b":{"c":{"x":1,"X":2}}}}`, CaseVariantKey, `"X"`},
	{"in an array", `{"items":[{"id":1},{"name":"a","Name":"b"}]}`, CaseVariantKey, `"Name"`},
	{"in an array of arrays", `{"m":[[{"k":1,"K":2}]]}`, CaseVariantKey, `"K"`},
	{"same key in sibling objects", `{"a":{"x":1},"b":{"X":1},"c":[{"x":1},{"X":2}]}`, 0, ""},
	{"key and a case variant one level down", `{"to":{"TO":1}}`, 0, ""},
	// escapes are decoded before folding
	{"escaped upper", `{"recipient":"DE1","\u0052ECIPIENT":"GB2"}`, CaseVariantKey, `"\u0052`},
	{"escaped lower first", `{"\u0072ecipient":"DE1","RECIPIENT":"GB2"}`, CaseVariantKey, `"RECIPIENT"`},
	{"all escaped", `{"\u0074\u006f":1,"\u0054\u004F":2}`, CaseVariantKey, `"\u0054`},
	{"escaped kelvin", `{"\u006b":1,"\u212A":2}`, CaseVariantKey, `"\u212A"`},
	// exact duplicates stay duplicates
	{"exact duplicate", `{"a":1,"a":2}`, DuplicateKey, `"a":2`},
	{"escaped duplicate", `{"path":"/ok","p\u0061th":"/etc"}`, DuplicateKey, `"p\u0061th"`},
	{"variant after an exact duplicate", `{"a":1,"a":2,"A":3}`, DuplicateKey, `"a":2`},
	{"duplicate after a variant", `{"a":1,"A":2,"a":3}`, CaseVariantKey, `"A"`},
	// keys that differ by more than case
	{"prefix", `{"to":1,"too":2,"t":3}`, 0, ""},
	{"letters swapped", `{"ab":1,"ba":2}`, 0, ""},
	{"digit vs letter", `{"a1":1,"A2":2}`, 0, ""},
	{"punctuation is not a letter", `{"@":1,"` + "`" + `":2,"[":3,"{":4}`, 0, ""},
	{"underscore and dash are kept", `{"to_addr":1,"toaddr":2,"to-addr":3,"TOADDR_":4}`, 0, ""},
	{"empty key and one key", `{"":1,"a":2}`, 0, ""},
	{"typical arguments", `{"query":"refund policy","limit":5,"filters":{"lang":"en","tags":["billing"]}}`, 0, ""},
	// the hash-set path (more than smallKeys keys)
	{"variant after 16 keys", strings.Replace(manyKeys(20, -1, false), `"end"`, `"K3"`, 1), CaseVariantKey, `"K3"`},
	{"kelvin variant after 16 keys", strings.Replace(manyKeys(20, -1, false), `"end"`, `"\u212a19"`, 1), CaseVariantKey, `"\u212a19"`},
	{"variant of the 17th key", strings.Replace(manyKeys(17, -1, false), `"end"`, `"K16"`, 1), CaseVariantKey, `"K16"`},
	{"variant in 2000 keys", strings.Replace(manyKeys(2000, -1, false), `"end"`, `"\u004b1999"`, 1), CaseVariantKey, `"\u004b1999"`},
	{"duplicate in 2000 keys", manyKeys(2000, 1999, true), DuplicateKey, `"\u006b1999"`},
	{"2000 distinct keys", manyKeys(2000, -1, false), 0, ""},
	{"300 escaped distinct keys", escapedKeys(300), 0, ""},
}

func TestFoldedKeys(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			off := -1
			if c.at != "" {
				if off = strings.Index(c.in, c.at); off < 0 || strings.Count(c.in, c.at) != 1 {
					t.Fatalf("%q is not once in the input", c.at)
				}
			}
			assertKind(t, "Object", Object(in, Limits{FoldedKeys: true}), c.want, off)
			assertKind(t, "Value", Value(in, Limits{FoldedKeys: true}), c.want, off)
			var m Members
			assertKind(t, "ObjectMembers", ObjectMembers(in, Limits{FoldedKeys: true}, "a", &m), c.want, off)
			// Without the option only exact duplicates are refused: request bodies keep their rule.
			exact := c.want
			if exact == CaseVariantKey {
				exact = 0
			}
			if c.name == "duplicate after a variant" {
				exact = DuplicateKey
			}
			assertKind(t, "Object without FoldedKeys", Object(in, Limits{}), exact, -1)
		})
	}
}

// TestFoldCasesFollowEqualFold holds the table to strings.EqualFold: a case is refused as a case
// variant exactly when some object of it holds two different keys that EqualFold joins.
func TestFoldCasesFollowEqualFold(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		dup, folded, err := keyOracle([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		switch {
		case c.want == CaseVariantKey && !folded:
			t.Errorf("%s: refused as a case variant, but EqualFold joins no two keys", c.name)
		case c.want == 0 && (folded || dup):
			t.Errorf("%s: accepted, but the oracle finds dup=%v folded=%v", c.name, dup, folded)
		}
	}
	for _, p := range [][2]string{{"i", "ı"}, {"i", "İ"}, {"I", "ı"}, {"ı", "İ"}, {"ß", "ss"}} {
		if strings.EqualFold(p[0], p[1]) {
			t.Errorf("EqualFold(%q, %q) is true: the table's Turkish and full-folding rows are wrong", p[0], p[1])
		}
	}
}

// TestFoldRuneIsEqualFold checks, for every rune, that foldRune joins exactly what
// strings.EqualFold joins: each rune of an orbit folds to the same rune, and runes of different
// orbits never do (the folded rune is itself a member of the orbit).
func TestFoldRuneIsEqualFold(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= unicode.MaxRune; r++ {
		f := foldRune(r)
		if f > r || !strings.EqualFold(string(r), string(f)) {
			t.Fatalf("foldRune(%U) = %U, not the smallest member of its orbit", r, f)
		}
		if s := unicode.SimpleFold(r); foldRune(s) != f {
			t.Fatalf("foldRune(%U) = %U but foldRune(%U) = %U", r, f, s, foldRune(s))
		}
	}
	for x := rune(0); x < 0x80; x++ {
		for y := rune(0); y < 0x80; y++ {
			if x != y && sameFold(x, y) != strings.EqualFold(string(x), string(y)) {
				t.Fatalf("sameFold(%q, %q) = %v", x, y, sameFold(x, y))
			}
		}
	}
}

// TestFoldedKeysAgainstOracle checks both key-set paths with FoldedKeys against keyOracle on random
// objects whose keys are drawn from letters of one orbit (a, A; k, K, K; s, S, ſ; σ, ς, Σ; i, I,
// ı, İ), written raw or escaped, nested and in arrays.
func TestFoldedKeysAgainstOracle(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 3000; iter++ {
		in := []byte(randomFoldObject(r, 1+r.IntN(40), 0))
		dup, folded, err := keyOracle(in)
		if err != nil {
			t.Fatalf("%v: %s", err, in)
		}
		got := Object(in, Limits{FoldedKeys: true})
		switch {
		case got == nil && (dup || folded):
			t.Fatalf("accepted, but the oracle finds dup=%v folded=%v: %s", dup, folded, in)
		case got != nil && !dup && !folded:
			t.Fatalf("refused (%v), but the oracle finds no clash: %s", got, in)
		case errors.Is(got, CaseVariantKey) && !folded, errors.Is(got, DuplicateKey) && !dup:
			t.Fatalf("%v, but the oracle finds dup=%v folded=%v: %s", got, dup, folded, in)
		}
		if exact := Object(in, Limits{}); (exact == nil) == dup {
			t.Fatalf("without FoldedKeys: %v, oracle dup=%v: %s", exact, dup, in)
		}
	}
}

// foldAlphabet are letters with case variants under simple folding, and some without.
var foldAlphabet = []rune("aAkK\u212AsS\u017FσςΣiIıİßẞx1_")

// randomFoldObject returns an object of n members whose keys are one to three letters of
// foldAlphabet, each written raw or as a \u escape; some values are objects or arrays of objects.
func randomFoldObject(r *rand.Rand, n, depth int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 1 + r.IntN(3); j > 0; j-- {
			c := foldAlphabet[r.IntN(len(foldAlphabet))]
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteRune(c)
			}
		}
		b.WriteString(`":`)
		switch k := r.IntN(10); {
		case depth < 3 && k == 0:
			b.WriteString(randomFoldObject(r, 1+r.IntN(5), depth+1))
		case depth < 3 && k == 1:
			b.WriteString("[" + randomFoldObject(r, 1+r.IntN(5), depth+1) + ",1]")
		default:
			fmt.Fprintf(&b, "%d", i)
		}
	}
	b.WriteByte('}')
	return b.String()
}

package vet

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// TestWalkAgreesWithEncodingJSON holds Walk to the readers of a tool in Go: on random arguments
// that vetting accepts and random paths of one or two keys, with letters of one case orbit each (k,
// K and the Kelvin sign; s, S and long s; σ, ς and Σ; i, I, ı and İ), Walk gives the value gjson
// finds at the exact keys; where there is none, it reports the value missing and then gives what
// encoding/json, decoding into a struct with a field tagged with each key of the path, puts in the
// field; where that is nothing too, it reports the value missing only.
func TestWalkAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	folded := 0
	for iter := 0; iter < 8000; iter++ {
		doc := randomArgs(r, 0)
		if jsoncheck.Object([]byte(doc), jsoncheck.Limits{FoldedKeys: true}) != nil {
			continue
		}
		keys := []string{randomKey(r)}
		if r.IntN(2) == 0 {
			keys = append(keys, randomKey(r))
		}
		escaped := make([]string, len(keys))
		for i, k := range keys {
			escaped[i] = gjson.Escape(k)
		}
		path := strings.Join(escaped, ".")
		var want []string
		exact := gjson.Get(doc, path)
		goRaw, goFound := decodePath([]byte(doc), keys)
		switch {
		case exact.Exists():
			if !goFound || string(goRaw) != exact.Raw {
				t.Fatalf("%s at %q: gjson %s, encoding/json %s", doc, path, exact.Raw, goRaw)
			}
			want = []string{exact.Raw}
		case goFound:
			want = []string{"-", string(goRaw)}
			folded++
		default:
			want = []string{"-"}
		}
		var got []string
		Walk(gjson.Parse(doc), path, func(v gjson.Result, found bool) bool {
			if found {
				got = append(got, v.Raw)
			} else {
				got = append(got, "-")
			}
			return true
		})
		if !slices.Equal(got, want) {
			t.Fatalf("Walk(%s, %q) visits %q, want %q", doc, path, got, want)
		}
	}
	if folded < 200 {
		t.Fatalf("only %d paths found in another case: the generator tests too little", folded)
	}
}

// walkAlphabet are letters of a few case orbits.
var walkAlphabet = []rune("kK\u212AsS\u017FσςΣiIıİ")

func randomKey(r *rand.Rand) string {
	var b strings.Builder
	for j := 1 + r.IntN(3)/2; j > 0; j-- {
		b.WriteRune(walkAlphabet[r.IntN(len(walkAlphabet))])
	}
	return b.String()
}

// randomArgs is an object of up to four members with keys of randomKey, written raw or escaped, and
// values that are numbers or (above depth 1) objects like it.
func randomArgs(r *rand.Rand, depth int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := r.IntN(5); i > 0; i-- {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		k := randomKey(r)
		if r.IntN(4) == 0 {
			k = strconv.QuoteToASCII(k) // non-ASCII letters as \u escapes
		} else {
			k = strconv.Quote(k)
		}
		b.WriteString(k + ":")
		if depth < 1 && r.IntN(2) == 0 {
			b.WriteString(randomArgs(r, depth+1))
		} else {
			fmt.Fprintf(&b, "%d", r.IntN(1000))
		}
	}
	b.WriteByte('}')
	return b.String()
}

// decodePath reads keys from doc as a Go tool does: encoding/json decodes each level into a struct
// with one json.RawMessage field tagged with the key. found is false where a level is not an object
// or the field stays empty.
func decodePath(doc []byte, keys []string) (raw json.RawMessage, found bool) {
	raw = doc
	for _, k := range keys {
		if len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[json.RawMessage](), Tag: reflect.StructTag(`json:` + strconv.Quote(k))}})
		p := reflect.New(typ)
		if err := json.Unmarshal(raw, p.Interface()); err != nil {
			return nil, false
		}
		if raw = p.Elem().Field(0).Interface().(json.RawMessage); raw == nil {
			return nil, false
		}
	}
	return raw, true
}

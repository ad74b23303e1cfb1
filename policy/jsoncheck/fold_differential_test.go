package jsoncheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/tidwall/gjson"
)

// The readers of a tool call's arguments disagree on keys that differ only in letter case:
// promptgate reads a value with gjson at the exact key, a tool in Go decodes the arguments with
// encoding/json into a struct, which gives a field the last key that matches its name
// case-insensitively. The tests below prove against both readers that where Object with FoldedKeys
// accepts an object, the two read the same value at every key of every object, and that where they
// would disagree, Object refuses.

// FuzzFoldedKeys checks Object with FoldedKeys against two oracles. strings.EqualFold on every pair
// of keys of every object: an object is refused as CaseVariantKey only when two of its keys differ
// and EqualFold joins them, and never accepted when they exist. encoding/json decoding into
// structs: on an accepted object, each key's field gets exactly the value gjson reads at the key.
func FuzzFoldedKeys(f *testing.F) {
	for _, c := range foldCases {
		f.Add([]byte(c.in))
	}
	for _, c := range checkCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Object(b, Limits{FoldedKeys: true})
		exact := Object(b, Limits{})
		if errors.Is(exact, CaseVariantKey) {
			t.Fatalf("CaseVariantKey without FoldedKeys: %q", b)
		}
		if err == nil && exact != nil {
			t.Fatalf("accepted with FoldedKeys, refused without (%v): %q", exact, b)
		}
		if !json.Valid(b) {
			if err == nil {
				t.Fatalf("accepted what json.Valid refuses: %q", b)
			}
			return
		}
		dup, folded, oerr := keyOracle(b)
		if oerr != nil {
			t.Fatalf("oracle failed on json.Valid input %q: %v", b, oerr)
		}
		switch {
		case err == nil && (dup || folded):
			t.Fatalf("accepted, but dup=%v folded=%v: %q", dup, folded, b)
		case errors.Is(err, CaseVariantKey) && !folded:
			t.Fatalf("CaseVariantKey, but EqualFold joins no two different keys: %q", b)
		case errors.Is(err, DuplicateKey) && !dup:
			t.Fatalf("DuplicateKey, but no key is repeated: %q", b)
		}
		if err == nil {
			if where := disagreement(b); where != "" {
				t.Fatalf("accepted, but encoding/json and gjson disagree %s: %q", where, b)
			}
		}
	})
}

// TestFoldedKeysAgreeWithDecoders runs the decoders' check on every accepted case and on random
// objects rich in case variants; on every refused case variant of the table it shows the readers do
// disagree, so that refusing is what keeps them from it.
func TestFoldedKeysAgreeWithDecoders(t *testing.T) {
	t.Parallel()
	for _, c := range foldCases {
		where := disagreement([]byte(c.in))
		switch {
		case c.want == 0 && where != "":
			t.Errorf("%s: accepted, but encoding/json and gjson disagree %s", c.name, where)
		case c.want == CaseVariantKey && where == "":
			t.Errorf("%s: refused, but encoding/json and gjson agree on every key", c.name)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	accepted := 0
	for iter := 0; iter < 3000; iter++ {
		in := []byte(randomFoldObject(r, 1+r.IntN(6), 0))
		if Object(in, Limits{FoldedKeys: true}) != nil {
			continue
		}
		accepted++
		if where := disagreement(in); where != "" {
			t.Fatalf("accepted, but encoding/json and gjson disagree %s: %s", where, in)
		}
	}
	if accepted < 300 {
		t.Fatalf("only %d of 3000 random objects accepted: the generator tests too little", accepted)
	}
}

// disagreement walks every object of b (a valid JSON value without duplicate keys) and returns
// where a Go program that decodes it with encoding/json reads another value than gjson reads at the
// same key, or "" when it never does. At each object it decodes into three shapes: a map
// (case-sensitive), one struct whose fields are tagged with all the object's keys, and, per key, a
// struct with that one field (a tool that knows one spelling of a name). In objects of more than
// maxOneFieldKeys keys, only the keys that strings.EqualFold joins with another get a struct of
// their own: only another key can give a one-field struct another value.
func disagreement(b []byte) string {
	v := bytes.TrimSpace(b)
	switch {
	case len(v) > 0 && v[0] == '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return "(array does not decode: " + err.Error() + ")"
		}
		g := gjson.ParseBytes(v).Array()
		if len(g) != len(elems) {
			return "on the array's length"
		}
		for i, e := range elems {
			if string(e) != g[i].Raw {
				return "at element " + strconv.Itoa(i)
			}
			if where := disagreement(e); where != "" {
				return "in element " + strconv.Itoa(i) + " " + where
			}
		}
		return ""
	case len(v) == 0 || v[0] != '{':
		return ""
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		return "(object does not decode: " + err.Error() + ")"
	}
	var keys []string
	for k := range m {
		if tagName(k) {
			keys = append(keys, k)
		}
	}
	all := decodeStruct(v, keys)
	for i, k := range keys {
		want := gjson.GetBytes(v, gjson.Escape(k))
		one := all[i : i+1]
		if len(keys) <= maxOneFieldKeys || hasFoldPartner(keys, i) {
			one = decodeStruct(v, []string{k})
		}
		if !want.Exists() || string(m[k]) != want.Raw || string(all[i]) != want.Raw || string(one[0]) != want.Raw {
			return fmt.Sprintf("at key %q: gjson %s, map %s, struct %s, one-field struct %s", k, want.Raw, m[k], all[i], one[0])
		}
	}
	for k, e := range m {
		if where := disagreement(e); where != "" {
			return fmt.Sprintf("under key %q %s", k, where)
		}
	}
	return ""
}

// hasFoldPartner reports whether strings.EqualFold joins keys[i] with another of keys.
func hasFoldPartner(keys []string, i int) bool {
	for j, k := range keys {
		if j != i && strings.EqualFold(k, keys[i]) {
			return true
		}
	}
	return false
}

// maxOneFieldKeys bounds the objects whose every key disagreement decodes on its own.
const maxOneFieldKeys = 64

// decodeStruct decodes obj with encoding/json into a struct made for it, with one json.RawMessage
// field per key, tagged with the key, and returns the fields' values in the order of keys.
func decodeStruct(obj []byte, keys []string) []json.RawMessage {
	fields := make([]reflect.StructField, len(keys))
	for i, k := range keys {
		fields[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: reflect.TypeFor[json.RawMessage](),
			Tag:  reflect.StructTag(`json:` + strconv.Quote(k)),
		}
	}
	p := reflect.New(reflect.StructOf(fields))
	if err := json.Unmarshal(obj, p.Interface()); err != nil {
		panic(fmt.Sprintf("decode into struct: %v", err))
	}
	out := make([]json.RawMessage, len(keys))
	for i := range keys {
		out[i] = p.Elem().Field(i).Interface().(json.RawMessage)
	}
	return out
}

// tagName reports whether encoding/json takes k as a field name from a struct tag (its isValidTag);
// other keys cannot be the name of a field, and "-" means no field.
func tagName(k string) bool {
	if k == "" || k == "-" {
		return false
	}
	for _, c := range k {
		if !strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c) && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
}

// keyOracle walks b (json.Valid) with encoding/json's tokenizer and reports whether some object
// holds one key twice, and whether some object holds two different keys that strings.EqualFold
// joins; it compares every pair of keys of each object.
func keyOracle(b []byte) (dup, folded bool, err error) {
	type frame struct {
		obj, expectKey bool
		keys           []string
	}
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].expectKey = true
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return dup, folded, nil
		}
		if err != nil {
			return dup, folded, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if n := len(stack); n > 0 && stack[n-1].obj {
					stack[n-1].expectKey = false
				}
				stack = append(stack, &frame{obj: t == '{', expectKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		default:
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].expectKey {
				k := t.(string)
				for _, o := range stack[n-1].keys {
					dup = dup || o == k
					folded = folded || o != k && strings.EqualFold(o, k)
				}
				stack[n-1].keys = append(stack[n-1].keys, k)
				stack[n-1].expectKey = false
				continue
			}
			valueDone()
		}
	}
}

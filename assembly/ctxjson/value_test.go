package ctxjson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t testing.TB, s string) *Value {
	t.Helper()
	v, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return v
}

func TestParseEncodeRoundTrip(t *testing.T) {
	for _, in := range []string{
		`null`, `true`, `false`, `0`, `-0`, `1.5e-7`, `-12E+3`, `""`, `"x"`,
		`[]`, `{}`, `[1,"a",null,[true,{}]]`,
		`{"z":1,"a":2,"m":{"y":[],"b":{}}}`,              // order kept, not sorted
		`[1,{"k":[2,{"m":3},"x"],"n":4},5,[6,{"o":{}}]]`, // containers nested after other members
		`{"s":"<b>&amp;</b> / \\ \" é 日本 😀"}`,
	} {
		if got := string(Encode(mustParse(t, in))); got != in {
			t.Errorf("Encode(Parse(%s)) = %s", in, got)
		}
		if got, want := Size(mustParse(t, in)), len([]rune(in)); got != want {
			t.Errorf("Size(%s) = %d, want %d", in, got, want)
		}
	}
	// Whitespace and escapes are normalised.
	got := string(Encode(mustParse(t, " { \"a\" : [ 1 , \"\\u0041\\/\\b\\f\\n\\r\\t\" ] } ")))
	if want := `{"a":[1,"A/\u0008\u000c\n\r\t"]}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestParsedTreeChanges: a parsed tree's values, keys and items share allocations; changing one
// container (Set, Append, at every depth) leaves every other as it was, and the input may change
// after Parse.
func TestParsedTreeChanges(t *testing.T) {
	raw := []byte(`{"a":[1,"x",{"k":"v"}],"b":[2,3],"c":{"d":"e","f":[4]},"g":"h\u00e9"}`)
	v := mustParse(t, string(raw))
	a, _ := lookup(v, "a")
	a.Append(Int(9))
	inner := a.items[2]
	inner.Set("k", String("w")).Set("k2", Null())
	c, _ := lookup(v, "c")
	c.Set("z", Bool(true))
	f, _ := lookup(c, "f")
	f.Append(String("5"))
	v.Set("new", Int(1)).Set("b", Object())
	for i := range raw {
		raw[i] = 'X'
	}
	want := `{"a":[1,"x",{"k":"w","k2":null},9],"b":{},"c":{"d":"e","f":[4,"5"],"z":true},"g":"hé","new":1}`
	if got := string(Encode(v)); got != want {
		t.Errorf("after changes:\n got %s\nwant %s", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	deep := strings.Repeat("[", MaxParseDepth+1) + strings.Repeat("]", MaxParseDepth+1)
	for _, in := range []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `-`, `+1`, `.5`, `1e`, `NaN`,
		`tru`, `nul`, `"abc`, `"\x"`, `"\u12"`, "\"a\nb\"", `{"a":1}x`, `1 2`, `{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`, `[1 2]`, deep, "\xef\xbb\xbf{}",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":0,"k11":1,"k12":2,"k13":3,"k14":4,"k15":5,"k16":6,"k5":7}`,
	} {
		if v, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%.40q) = %s, want error", in, Encode(v))
		} else if !strings.HasPrefix(err.Error(), "ctxjson: parse: ") {
			t.Errorf("error %q lacks the prefix", err)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("[", MaxParseDepth) + strings.Repeat("]", MaxParseDepth))); err != nil {
		t.Errorf("depth MaxParseDepth: %v", err)
	}
}

func TestParseLenientUTF8(t *testing.T) {
	// Lone surrogates and invalid bytes decode as encoding/json decodes them.
	for _, in := range []string{
		`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud800\ud800\udc00"`, "\"a\xffb\"", "\"\xed\xa0\x80\"",
		`"\ud83d\ude00"`,
	} {
		var want any
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(Encode(mustParse(t, in)), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestBuilders(t *testing.T) {
	n, err := Number("-1.25e3")
	if err != nil {
		t.Fatal(err)
	}
	o := Object().
		Set("b", String("x")).
		Set("a", Array(Int(1), Null(), Bool(true), n)).
		Set("b", Bool(false)). // replaces in place
		Set("nil", nil)
	o.Get("a").Append(Object())
	if got, want := string(Encode(o)), `{"b":false,"a":[1,null,true,-1.25e3,{}],"nil":null}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if o.Kind() != KindObject || o.Len() != 3 || o.Key(1) != "a" || o.Index(1).Index(3).Text() != "-1.25e3" ||
		!o.Get("a").Index(2).Bool() || o.Get("missing") != nil || o.Index(9) != nil {
		t.Error("accessors disagree with the built value")
	}
	var keys []string
	for k := range o.Fields() {
		keys = append(keys, k)
	}
	var elems int
	for range o.Get("a").Elems() {
		elems++
	}
	if !reflect.DeepEqual(keys, []string{"b", "a", "nil"}) || elems != 5 {
		t.Errorf("iterators: %v %d", keys, elems)
	}
	for _, bad := range []string{"", "01", "1.", "NaN", "Infinity", "0x10", " 1", "1e", "--1"} {
		if _, err := Number(bad); err == nil {
			t.Errorf("Number(%q) accepted", bad)
		}
	}
	var nilv *Value
	if nilv.Kind() != KindNull || nilv.Len() != 0 || string(Encode(nilv)) != "null" || Size(nilv) != 4 {
		t.Error("nil value is not null")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Set on an array did not panic")
			}
		}()
		Array().Set("a", nil)
	}()
}

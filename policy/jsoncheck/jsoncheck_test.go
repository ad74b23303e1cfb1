package jsoncheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

type checkCase struct {
	name   string
	in     string
	object Kind // 0: Object accepts it
	value  Kind // 0: Value accepts it
	offset int  // expected offset of the Object error, -1: not checked
}

func nest(open, close string, n int) string {
	return strings.Repeat(open, n) + strings.Repeat(close, n)
}

// deepObj returns n objects nested in each other: {"a":{"a":...{}...}}.
func deepObj(n int) string {
	return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
}

// manyKeys returns an object with n distinct keys k0..k(n-1) and, if dup >= 0, a last key
// repeating k<dup> (escaped as \u006b... when esc).
func manyKeys(n, dup int, esc bool) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	if dup >= 0 {
		if esc {
			fmt.Fprintf(&b, `"\u006b%d":0,`, dup)
		} else {
			fmt.Fprintf(&b, `"k%d":0,`, dup)
		}
	}
	b.WriteString(`"end":true}`)
	return b.String()
}

// escapedKeys returns an object with n distinct keys, each written with a \u escape.
func escapedKeys(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"\u%04x%d":%d`, 'a'+i%26, i, i)
	}
	b.WriteByte('}')
	return b.String()
}

var checkCases = []checkCase{
	// good objects
	{"empty object", `{}`, 0, 0, -1},
	{"whitespace around", " \t\r\n{ \"a\" : 1 , \"b\":[ ] }\n ", 0, 0, -1},
	{"all scalars", `{"s":"x","n":-1.5e+10,"z":0,"f":0.25,"E":1E-3,"t":true,"F":false,"nul":null}`, 0, 0, -1},
	{"nested", `{"a":{"b":{"c":[1,[2,{"d":[]}]]}}}`, 0, 0, -1},
	{"simple escapes", `{"q":"\" \\ \/ \b \f \n \r \t"}`, 0, 0, -1},
	{"unicode escapes", `{"u":"\u0000\u001f\u00e9\u20AC\uFFFF"}`, 0, 0, -1},
	{"surrogate pair", `{"e":"\ud83d\ude00","E":"\uD83D\uDE00"}`, 0, 0, -1},
	{"raw utf8", `{"ü":"héllo wörld — 日本語 😀"}`, 0, 0, -1},
	{"raw U+FFFD", "{\"r\":\"\xef\xbf\xbd\"}", 0, 0, -1},
	{"DEL raw allowed", "{\"d\":\"\x7f\"}", 0, 0, -1},
	{"same key different objects", `{"a":{"a":1},"b":{"a":2}}`, 0, 0, -1},
	{"keys differing by escape value", `{"a":1,"\u0062":2}`, 0, 0, -1},
	{"keys prefix of each other", `{"ab":1,"a":2,"abc":3}`, 0, 0, -1},
	{"escaped key vs longer raw", `{"\u0061":1,"ab":2}`, 0, 0, -1},
	{"16 keys", manyKeys(15, -1, false), 0, 0, -1},
	{"17 keys", manyKeys(16, -1, false), 0, 0, -1},
	{"2000 keys", manyKeys(2000, -1, false), 0, 0, -1},
	{"depth 64", deepObj(64), 0, 0, -1},
	{"array depth 64 inside object", `{"a":` + nest("[", "]", 63) + `}`, 0, 0, -1},

	// not objects
	{"top-level array", `[1,2]`, NotObject, 0, 0},
	{"top-level string", ` "x"`, NotObject, 0, 1},
	{"top-level number", `12`, NotObject, 0, 0},
	{"top-level negative", `-1`, NotObject, 0, 0},
	{"top-level true", `true`, NotObject, 0, 0},
	{"top-level false", `false`, NotObject, 0, 0},
	{"top-level null", `null`, NotObject, 0, 0},
	{"top-level bad array", `[1,`, NotObject, Syntax, 0},

	// syntax
	{"empty input", ``, Syntax, Syntax, 0},
	{"only whitespace", "  \n", Syntax, Syntax, 3},
	{"garbage", `x`, Syntax, Syntax, 0},
	{"unclosed object", `{"a":1`, Syntax, Syntax, 6},
	{"unclosed string", `{"a":"x`, Syntax, Syntax, 5},
	{"missing colon", `{"a" 1}`, Syntax, Syntax, 5},
	{"missing value", `{"a":}`, Syntax, Syntax, 5},
	{"trailing comma object", `{"a":1,}`, Syntax, Syntax, 7},
	{"trailing comma array", `{"a":[1,]}`, Syntax, Syntax, 8},
	{"leading comma", `{,"a":1}`, Syntax, Syntax, 1},
	{"unquoted key", `{a:1}`, Syntax, Syntax, 1},
	{"single quotes", `{'a':1}`, Syntax, Syntax, 1},
	{"NaN", `{"a":NaN}`, Syntax, Syntax, 5},
	{"Infinity", `{"a":Infinity}`, Syntax, Syntax, 5},
	{"leading zero", `{"a":01}`, Syntax, Syntax, 6},
	{"leading zero negative", `{"a":-01}`, Syntax, Syntax, 7},
	{"plus sign", `{"a":+1}`, Syntax, Syntax, 5},
	{"bare minus", `{"a":-}`, Syntax, Syntax, 5},
	{"dot without digits", `{"a":1.}`, Syntax, Syntax, 5},
	{"leading dot", `{"a":.5}`, Syntax, Syntax, 5},
	{"empty exponent", `{"a":1e}`, Syntax, Syntax, 5},
	{"exponent sign only", `{"a":1e+}`, Syntax, Syntax, 5},
	{"hex number", `{"a":0x1}`, Syntax, Syntax, 6},
	{"bad literal", `{"a":tru}`, Syntax, Syntax, 5},
	{"capital literal", `{"a":True}`, Syntax, Syntax, 5},
	{"raw newline in string", "{\"a\":\"x\ny\"}", Syntax, Syntax, 7},
	{"raw tab in string", "{\"a\":\"\t\"}", Syntax, Syntax, 6},
	{"raw NUL in string", "{\"a\":\"\x00\"}", Syntax, Syntax, 6},
	{"raw control in key", "{\"\x1f\":1}", Syntax, Syntax, 2},
	{"bad escape", `{"a":"\x"}`, Syntax, Syntax, 6},
	{"escape at end", `{"a":"\`, Syntax, Syntax, 6},
	{"short unicode escape", `{"a":"\u12"}`, Syntax, Syntax, 6},
	{"non-hex unicode escape", `{"a":"\u12G4"}`, Syntax, Syntax, 6},
	{"trailing garbage", `{"a":1} x`, Syntax, Syntax, 8},
	{"two objects", `{}{}`, Syntax, Syntax, 2},
	{"trailing comma top", `{},`, Syntax, Syntax, 2},
	{"comment", `{"a":1 /* c */}`, Syntax, Syntax, 7},
	{"BOM", "\xef\xbb\xbf{}", Syntax, Syntax, 0},
	{"BOM after space", " \xef\xbb\xbf{}", Syntax, Syntax, 1},
	{"NUL after object", "{}\x00", Syntax, Syntax, 2},
	{"form feed whitespace", "\f{}", Syntax, Syntax, 0},
	{"NBSP whitespace", "\u00a0{}", Syntax, Syntax, 0},
	{"array missing comma", `{"a":[1 2]}`, Syntax, Syntax, 8},
	{"colon in array", `{"a":[1:2]}`, Syntax, Syntax, 7},

	// invalid UTF-8
	{"invalid byte in string", "{\"a\":\"\xff\"}", InvalidUTF8, InvalidUTF8, 6},
	{"invalid byte in key", "{\"\xc3\":1}", InvalidUTF8, InvalidUTF8, 2},
	{"truncated sequence", "{\"a\":\"\xe2\x82\"}", InvalidUTF8, InvalidUTF8, 6},
	{"overlong slash", "{\"a\":\"\xc0\xaf\"}", InvalidUTF8, InvalidUTF8, 6},
	{"overlong 3-byte NUL", "{\"a\":\"\xe0\x80\x80\"}", InvalidUTF8, InvalidUTF8, 6},
	{"overlong 4-byte", "{\"a\":\"\xf0\x82\x82\xac\"}", InvalidUTF8, InvalidUTF8, 6},
	{"utf8 encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", InvalidUTF8, InvalidUTF8, 6},
	{"above U+10FFFF", "{\"a\":\"\xf4\x90\x80\x80\"}", InvalidUTF8, InvalidUTF8, 6},
	{"continuation byte alone", "{\"a\":\"x\x80\"}", InvalidUTF8, InvalidUTF8, 7},
	{"invalid byte outside string", "{\"a\":\xff}", InvalidUTF8, InvalidUTF8, 5},
	{"invalid byte top level", "\xfe", InvalidUTF8, InvalidUTF8, 0},
	{"lone high surrogate", `{"a":"\ud800"}`, InvalidUTF8, InvalidUTF8, 6},
	{"lone high surrogate then text", `{"a":"\ud800abcdef"}`, InvalidUTF8, InvalidUTF8, 6},
	{"lone low surrogate", `{"a":"\udc00"}`, InvalidUTF8, InvalidUTF8, 6},
	{"high high", `{"a":"\ud800\ud800"}`, InvalidUTF8, InvalidUTF8, 6},
	{"high then BMP escape", `{"a":"\ud800\u0041"}`, InvalidUTF8, InvalidUTF8, 6},
	{"reversed pair", `{"a":"\ude00\ud83d"}`, InvalidUTF8, InvalidUTF8, 6},
	{"lone surrogate in key", `{"\udfff":1}`, InvalidUTF8, InvalidUTF8, 2},

	// duplicates
	{"dup simple", `{"a":1,"a":2}`, DuplicateKey, DuplicateKey, 7},
	{"dup escaped", `{"a":1,"\u0061":2}`, DuplicateKey, DuplicateKey, 7},
	{"dup both escaped differently", `{"\u00e9":1,"\u00E9":2}`, DuplicateKey, DuplicateKey, 12},
	{"dup raw vs escaped utf8", `{"é":1,"\u00e9":2}`, DuplicateKey, DuplicateKey, 8},
	{"dup surrogate pair vs raw", `{"😀":1,"\ud83d\ude00":2}`, DuplicateKey, DuplicateKey, 10},
	{"dup simple escape", `{"\/":1,"/":2}`, DuplicateKey, DuplicateKey, 8},
	{"dup nested", `{"x":{"b":1,"c":{"d":1,"d":2}}}`, DuplicateKey, DuplicateKey, 23},
	{"dup in array element", `{"x":[{"a":1},{"a":1,"a":2}]}`, DuplicateKey, DuplicateKey, 21},
	{"dup empty key", `{"":1,"":2}`, DuplicateKey, DuplicateKey, 6},
	{"dup after 16 keys", manyKeys(20, 3, false), DuplicateKey, DuplicateKey, -1},
	{"dup escaped after 16 keys", manyKeys(20, 18, true), DuplicateKey, DuplicateKey, -1},
	{"dup of 16th key as 17th", manyKeys(16, 15, false), DuplicateKey, DuplicateKey, -1},
	{"dup of 17th key", manyKeys(17, 16, false), DuplicateKey, DuplicateKey, -1},
	{"dup in 2000 keys", manyKeys(2000, 1999, true), DuplicateKey, DuplicateKey, -1},
	{"escaped distinct keys", escapedKeys(300), 0, 0, -1},
	{"big objects side by side", `{"a":` + manyKeys(100, -1, false) + `,"b":` + manyKeys(100, -1, false) + `,"c":[` + manyKeys(50, -1, true) + `,` + manyKeys(50, -1, false) + `]}`, 0, 0, -1},
	{"big object inside big object", strings.Replace(manyKeys(40, -1, false), `"k7":7`, `"k7":`+manyKeys(40, -1, false), 1), 0, 0, -1},
	{"dup after nested big object", strings.Replace(manyKeys(40, 39, false), `"k7":7`, `"k7":`+manyKeys(40, -1, false), 1), DuplicateKey, DuplicateKey, -1},
	{"dup in second big object", `{"a":` + manyKeys(100, -1, false) + `,"b":` + manyKeys(100, 50, true) + `}`, DuplicateKey, DuplicateKey, -1},

	// depth
	{"depth 65 objects", deepObj(65), TooDeep, TooDeep, 320},
	{"depth 65 arrays", `{"a":` + nest("[", "]", 64) + `}`, TooDeep, TooDeep, 68},
	{"depth 65 array top", nest("[", "]", 65), NotObject, TooDeep, 0},
	{"depth 1000", nest("[", "]", 1000), NotObject, TooDeep, 0},
}

func TestCheck(t *testing.T) {
	for _, c := range checkCases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			assertKind(t, "Object", Object(in, Limits{}), c.object, c.offset)
			off := -1
			if c.object == c.value {
				off = c.offset
			}
			assertKind(t, "Value", Value(in, Limits{}), c.value, off)
			// json.Valid must agree wherever the difference is not one of our extra rules.
			if c.value == 0 && !json.Valid(in) {
				t.Errorf("Value accepts what json.Valid refuses")
			}
			if c.value == Syntax && json.Valid(in) {
				t.Errorf("Value reports a syntax error json.Valid does not see")
			}
			if !json.Valid(in) && c.value != Syntax && c.value != InvalidUTF8 {
				t.Errorf("json.Valid refuses it but Value reports %v", c.value)
			}
		})
	}
}

func assertKind(t *testing.T, fn string, err error, want Kind, off int) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", fn, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s: accepted, want %v", fn, want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %T is not *Error", fn, err)
	}
	if e.Kind != want || !errors.Is(err, want) {
		t.Fatalf("%s: got %v (%v), want kind %v", fn, e.Kind, err, want)
	}
	for _, k := range []Kind{Syntax, InvalidUTF8, DuplicateKey, TooDeep, NotObject, CaseVariantKey} {
		if k != want && errors.Is(err, k) {
			t.Errorf("%s: errors.Is(err, %v) is true for a %v error", fn, k, want)
		}
	}
	if off >= 0 && e.Offset != off {
		t.Errorf("%s: offset %d, want %d (%v)", fn, e.Offset, off, err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "jsoncheck: ") || strings.ContainsAny(msg, "\n") {
		t.Errorf("%s: bad message %q", fn, msg)
	}
}

func TestDepthLimit(t *testing.T) {
	for _, max := range []int{1, 2, 10, 64, 200} {
		at := nest("[", "]", max)
		over := nest("[", "]", max+1)
		if err := Value([]byte(at), Limits{MaxDepth: max}); err != nil {
			t.Errorf("depth %d at limit %d: %v", max, max, err)
		}
		if err := Value([]byte(over), Limits{MaxDepth: max}); !errors.Is(err, TooDeep) {
			t.Errorf("depth %d at limit %d: %v, want TooDeep", max+1, max, err)
		}
		obj := strings.Repeat(`{"k":`, max-1) + "{}" + strings.Repeat("}", max-1)
		if err := Object([]byte(obj), Limits{MaxDepth: max}); err != nil {
			t.Errorf("object depth %d at limit %d: %v", max, max, err)
		}
	}
	if err := Value([]byte("1"), Limits{MaxDepth: 1}); err != nil {
		t.Errorf("scalar is depth 0: %v", err)
	}
	if err := Value([]byte(nest("[", "]", 64)), Limits{MaxDepth: -5}); err != nil {
		t.Errorf("negative limit means default: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := Object([]byte(`{"a":1,"b":2,"\u0061":2}`), Limits{})
	if got, want := err.Error(), `jsoncheck: duplicate key at offset 13`; got != want {
		t.Errorf("got %q, want %q: Error never quotes the input", got, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Key != "a" {
		t.Errorf("Key = %q", e.Key)
	}
	if got, want := e.QuotedError(), `jsoncheck: duplicate key "a" at offset 13`; got != want {
		t.Errorf("QuotedError %q, want %q", got, want)
	}
	err = Object([]byte(`{"a":1,}`), Limits{})
	if got, want := err.Error(), `jsoncheck: syntax error at offset 7: unexpected '}' looking for an object key`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	long := strings.Repeat("é", 100)
	err = Object([]byte(`{"`+long+`":1,"`+long+`":2}`), Limits{})
	e = new(Error)
	if !errors.As(err, &e) || e.Key != long {
		t.Errorf("Key must hold the whole key")
	}
	if msg := e.QuotedError(); len(msg) > 150 || !strings.Contains(msg, "…") {
		t.Errorf("long key not shortened: %q", msg)
	}
	err = Value([]byte(nest("[", "]", 3)), Limits{MaxDepth: 2})
	if got, want := err.Error(), `jsoncheck: nesting too deep at offset 2: more than 2 levels`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	err = Object([]byte("\xef\xbb\xbf{}"), Limits{})
	if !strings.Contains(err.Error(), "byte order mark") {
		t.Errorf("BOM message: %q", err)
	}
}

// TestSpecial8 checks the word-at-a-time test against the byte-wise rule for every byte value in
// every lane, next to benign neighbours.
func TestSpecial8(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x20 || c >= 0x80 || c == '"' || c == '\\'
		for lane := 0; lane < 8; lane++ {
			for _, fill := range []byte{'a', ' ', '~', '!', '[', ']'} {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[lane] = byte(c)
				x := uint64(0)
				for i := 7; i >= 0; i-- {
					x = x<<8 | uint64(b[i])
				}
				if got := special8(x); got != want {
					t.Fatalf("byte %#x lane %d fill %q: special8=%v want %v", c, lane, fill, got, want)
				}
			}
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	for _, body := range [][]byte{chatRequest(2 << 10), chatRequest(40 << 10), []byte(toolArgs)} {
		for _, l := range []Limits{{}, {FoldedKeys: true}} {
			if err := Object(body, l); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(20, func() { _ = Object(body, l) }); n != 0 {
				t.Errorf("%d-byte body, %+v: %v allocs per run, want 0", len(body), l, n)
			}
		}
	}
}

// TestLargeObjectsAgainstOracle checks the hash-set path (objects with more than smallKeys keys)
// against encoding/json on random objects whose keys collide now and then and are written with
// and without escapes.
func TestLargeObjectsAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + r.IntN(120)
		var b strings.Builder
		b.WriteByte('{')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('"')
			for _, c := range fmt.Sprintf("k%d", r.IntN(4*n)) {
				switch r.IntN(4) {
				case 0:
					fmt.Fprintf(&b, `\u%04x`, c)
				case 1:
					fmt.Fprintf(&b, `\u%04X`, c)
				default:
					b.WriteRune(c)
				}
			}
			b.WriteString(`":0`)
		}
		b.WriteByte('}')
		in := []byte(b.String())
		dup, _, _, err := oracle(in)
		if err != nil {
			t.Fatal(err)
		}
		got := Object(in, Limits{})
		if dup != errors.Is(got, DuplicateKey) || (!dup && got != nil) {
			t.Fatalf("oracle dup=%v, Object: %v\n%s", dup, got, in)
		}
	}
}

package ctxjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzBuild feeds Build random sources (the fuzzer's bytes as JSON where they parse, else as one
// string source), random budgets and a random max, and checks every invariant of the line.
func FuzzBuild(f *testing.F) {
	f.Add([]byte(`{"request":{"user":"u","attachments":[{"name":"a","text":"hello\nworld"}]},"memory":{"facts":["x"]}}`), uint16(80), `{"request.attachments":0.5}`, "tech")
	f.Add([]byte(`{"a":"\n=== SYSTEM CORE ===\n","b":[1,2,3,"\u2028"]}`), uint16(40), `{"a":5}`, "p\u0085")
	f.Add([]byte("\"\xff\xfe raw \u2029 bytes\""), uint16(0), ``, "")
	f.Add([]byte(`[1,[2,[3,[4]]],{"k":{"k":{"k":"vvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}}]`), uint16(10), `{"request.2.k":0.1,"request.1":0}`, "x")
	for _, c := range []struct {
		json, budgets string
		max           uint16
	}{
		{`{"request":{"note":"abcdefghijklmnopqrstuvwxyz"}}`, `{"request.note":10}`, 500},
		{`{"request":{"list":["aaaa","bbbb","cccc","dddd"]}}`, `{"request.list":20}`, 500},
		{`{"request":{"s":"é\n😀\u2028xyz"}}`, `{"request.s":12}`, 500},
		{`{"request":{"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","b":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","c":"c","d":"d"}}`, `{"request":40}`, 500},
		{`{"request":{"a":1},"memory":{"n":12345678901234567890}}`, `{"memory":10}`, 500},
		{`{"request":{"text":"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"}}`, ``, 31},
	} {
		f.Add([]byte(c.json), c.max, c.budgets, "tech")
	}
	f.Fuzz(func(t *testing.T, data []byte, m uint16, budgets, protocol string) {
		max := MinLine + int(m)%4974
		var sources []Source
		if v, err := Parse(data); err != nil {
			sources = []Source{{Name: "request", Value: String(string(data))}}
		} else if v.Kind() == KindObject {
			for k, e := range v.Fields() {
				sources = append(sources, Source{Name: k, Value: e})
			}
		} else {
			sources = []Source{{Name: "request", Value: v}}
		}
		b, _ := ParseBudgets(budgets, max)
		meta := Meta{Protocol: protocol, Skipped: []Skip{{Source: "plugin", Reason: protocol}}}
		line, truncated, _ := checkBuild(t, meta, sources, max, b)
		// The same tree built without the sizes Parse measured: each string measured by Build.
		plain := make([]Source, len(sources))
		for i, s := range sources {
			plain[i] = Source{Name: s.Name, Value: unmeasured(s.Value)}
		}
		if line2, truncated2 := Build(meta, plain, max, b); !bytes.Equal(line, line2) || truncated != truncated2 {
			t.Fatalf("the sizes Parse measured change the line:\n parsed   %s\n measured %s", line, line2)
		}
	})
}

// unmeasured returns a copy of v made with the constructors, so that no string carries the size
// Parse measured.
func unmeasured(v *Value) *Value {
	switch v.Kind() {
	case KindString:
		return String(v.Text())
	case KindArray:
		a := Array()
		for _, e := range v.Elems() {
			a.Append(unmeasured(e))
		}
		return a
	case KindObject:
		o := Object()
		for k, e := range v.Fields() {
			o.Set(k, unmeasured(e))
		}
		return o
	}
	return v
}

// checkMeasured fails unless every string of v that Parse measured has the size strSize gives.
func checkMeasured(t *testing.T, v *Value) {
	t.Helper()
	switch v.Kind() {
	case KindString:
		if want := strSize(v.text); v.size != want {
			t.Fatalf("Parse measured %q as %d characters, strSize says %d", v.text, v.size, want)
		}
	case KindArray, KindObject:
		for _, e := range v.items {
			checkMeasured(t, e)
		}
	}
}

// FuzzEncode checks that Encode(Parse(x)) is valid, safe JSON that decodes to the same value as x.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{
		`null`, `{"a":[1,2.5e-3,"x\n\u2028\u0085",true,false,null,{}]}`, `"\ud800\udc00\ud800"`, "\"\xff\xc0\xaf\"",
		`{"z":1,"a":{"y":[],"b":"\u202e\u200b\ufeff"}}`, `[-0,1E+2,0.1]`, `"<&>/\\\""`, `{"a":1,"a":2}`,
		"\"\U000E0041\U000E0100\u00ad\"", `[[[[[[[[[[]]]]]]]]]]`,
		`"\/\b\f\n\r\t\"\\\u0000\u007f\u00e9\ud83d\ude00\u2028\udb40\udc41\u0041\ud800x"`, "\"a\xe2\\u0041\x80\xa8\x7f\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, x []byte) {
		v, err := Parse(x)
		valid := json.Valid(x)
		if err != nil {
			if valid && !strings.Contains(err.Error(), "duplicate key") && !strings.Contains(err.Error(), "nesting deeper") {
				t.Fatalf("Parse refused valid JSON %q: %v", x, err)
			}
			return
		}
		if !valid {
			t.Fatalf("Parse accepted invalid JSON %q", x)
		}
		checkMeasured(t, v)
		enc := Encode(v)
		assertSafeLine(t, enc)
		if n := utf8.RuneCount(enc); Size(v) != n {
			t.Fatalf("Size %d, encoding has %d characters: %q", Size(v), n, enc)
		}
		want, err := decode(x)
		if err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", x, err)
		}
		got, err := decode(enc)
		if err != nil {
			t.Fatalf("encoding/json cannot decode the encoding %q: %v", enc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("value changed:\n in  %q\n out %q", x, enc)
		}
		v2, err := Parse(enc)
		if err != nil || !bytes.Equal(Encode(v2), enc) {
			t.Fatalf("encoding is not stable: %q: %v", enc, err)
		}
	})
}

func decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

package assembly

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

func TestApply(t *testing.T) {
	t.Parallel()
	set := func(k, v string) MemberEdit { return MemberEdit{Key: k, Raw: []byte(v)} }
	del := func(k string) MemberEdit { return MemberEdit{Key: k, Delete: true} }
	for _, tc := range []struct {
		body  string
		edits []MemberEdit
		want  string
	}{
		{`{"a":1,"b":2,"c":3}`, []MemberEdit{set("b", `[9]`)}, `{"a":1,"b":[9],"c":3}`},
		{`{"a":1,"b":2,"c":3}`, []MemberEdit{del("b")}, `{"a":1,"c":3}`},
		{`{"a":1,"b":2,"c":3}`, []MemberEdit{del("a")}, `{"b":2,"c":3}`},
		{`{"a":1,"b":2,"c":3}`, []MemberEdit{del("c")}, `{"a":1,"b":2}`},
		{`{"a":1,"b":2,"c":3}`, []MemberEdit{del("a"), del("b"), del("c")}, `{}`},
		{`{"a":1}`, []MemberEdit{del("a"), set("z", `"new"`)}, `{"z":"new"}`},
		{`{"a":1}`, []MemberEdit{set("z", `true`)}, `{"a":1,"z":true}`},
		{`{}`, []MemberEdit{set("z", `1`), set("y", `2`)}, `{"z":1,"y":2}`},
		{` { } `, []MemberEdit{set("z", `1`)}, ` {"z":1 } `},
		{"{\n  \"a\": 1,\n  \"b\": {\"x\": [1, 2]},\n  \"c\": \"s\"\n}\n", []MemberEdit{del("b"), set("c", `"t"`)},
			"{\n  \"a\": 1,\n  \"c\": \"t\"\n}\n"},
		{`{"a":1,"b":2}`, []MemberEdit{del("nope"), set("b", `3`), set("b", `4`)}, `{"a":1,"b":3}`},
		{`{"a":1,"promptgate":{"context":{"big":"x"}},"b":2}`, []MemberEdit{del("promptgate"), {Key: "a", Write: func(d []byte) []byte { return append(d, `[1,2]`...) }}},
			`{"a":[1,2],"b":2}`},
		{`{"k\u0065y":1,"b":2}`, []MemberEdit{set("key", `5`)}, `{"k\u0065y":5,"b":2}`},
	} {
		out, err := NewBody([]byte(tc.body)).Apply(tc.edits)
		if err != nil || string(out) != tc.want {
			t.Errorf("%s %v:\n got %s (%v)\nwant %s", tc.body, tc.edits, out, err, tc.want)
		}
	}
	if _, err := NewBody([]byte(`not json`)).Apply(nil); err == nil {
		t.Error("a body that could not be walked was edited")
	}
}

// FuzzApply: for any object and any edits, the result is one valid JSON object whose members are
// the body's, in order, with each edited one replaced or gone, the new ones last, and every member
// not edited byte for byte as it was.
func FuzzApply(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[2,3],"c":{"d":4}}`, "{\n \"a\" : 1 ,\n \"b\":2\n}", `{}`, `{"promptgate":{},"messages":[]}`} {
		f.Add(s, "b", "a", "z", `[true]`)
	}
	f.Fuzz(func(t *testing.T, body, setKey, delKey, newKey, value string) {
		if jsoncheck.Object([]byte(body), jsoncheck.Limits{}) != nil || !json.Valid([]byte(value)) || strings.TrimSpace(value) == "" ||
			!utf8.ValidString(setKey) || !utf8.ValidString(delKey) || !utf8.ValidString(newKey) {
			return // the keys of a rewrite are the surface's own names
		}
		value = strings.TrimSpace(value)
		b := NewBody([]byte(body))
		edits := []MemberEdit{{Key: setKey, Raw: []byte(value)}, {Key: delKey, Delete: true}, {Key: newKey, Raw: []byte(`"n"`)}}
		out, err := b.Apply(edits)
		if err != nil {
			t.Fatal(err)
		}
		if jsoncheck.Object(out, jsoncheck.Limits{MaxDepth: 1000}) != nil {
			t.Fatalf("%s -> %s: not one valid object", body, out)
		}
		got := gjson.ParseBytes(out)
		var want []string
		for _, m := range b.top {
			switch m.key {
			case setKey:
				want = append(want, m.key+"="+value)
			case delKey:
			case newKey:
				want = append(want, m.key+"="+`"n"`)
			default:
				want = append(want, m.key+"="+m.val.Raw)
			}
		}
		has := func(k string) bool { return NewBody([]byte(body)).Get(k).Exists() }
		if !has(setKey) {
			want = append(want, setKey+"="+value)
		}
		if !has(newKey) && newKey != setKey && newKey != delKey {
			want = append(want, newKey+"="+`"n"`)
		}
		var members []string
		got.ForEach(func(k, v gjson.Result) bool {
			members = append(members, k.Str+"="+v.Raw)
			return true
		})
		if strings.Join(members, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("%s -> %s\n got %q\nwant %q", body, out, members, want)
		}
	})
}

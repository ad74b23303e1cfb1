package assembly

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// walked is a JSON value read by EachMember and EachElement all the way down, each member with its
// key, in the form gjsonWalked gives it.
func walked(t *testing.T, s string, i int) (string, int) {
	var out []byte
	end := -1
	switch s[i] {
	case '{':
		out = append(out, '{')
		end = EachMember(s, i, func(k string, v int) int {
			inner, e := walked(t, s, v)
			out = append(out, k...)
			out = append(out, '=')
			out = append(out, inner...)
			out = append(out, ';')
			return e
		})
	case '[':
		out = append(out, '[')
		end = EachElement(s, i, func(v int) int {
			inner, e := walked(t, s, v)
			out = append(out, inner...)
			out = append(out, ';')
			return e
		})
	default:
		end = ValueEnd(s, i)
		if end < 0 {
			return "", -1
		}
		v := gjson.Parse(s[i:end])
		return v.Type.String() + ":" + v.Raw + ":" + v.Str, end
	}
	if end >= 0 && !gjson.Valid(s[i:end]) {
		t.Fatalf("the walk of %s ended at %d, after no whole value", s, end)
	}
	return string(out), end
}

// gjsonWalked is walked's form of a value as gjson's ForEach gives its members.
func gjsonWalked(v gjson.Result) string {
	var out []byte
	switch {
	case v.IsObject():
		out = append(out, '{')
		v.ForEach(func(k, val gjson.Result) bool {
			out = append(out, k.Str...)
			out = append(out, '=')
			out = append(out, gjsonWalked(val)...)
			out = append(out, ';')
			return true
		})
	case v.IsArray():
		out = append(out, '[')
		v.ForEach(func(_, val gjson.Result) bool {
			out = append(out, gjsonWalked(val)...)
			out = append(out, ';')
			return true
		})
	default:
		return v.Type.String() + ":" + v.Raw + ":" + v.Str
	}
	return string(out)
}

// FuzzEachMember checks that EachMember and EachElement read any valid JSON value (duplicate keys
// included) as gjson's ForEach does, all the way down: the same keys, unescaped, in order, and the
// same values, and that they end where the value ends.
func FuzzEachMember(f *testing.F) {
	for _, s := range bodySeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"tools":[{"type":"function","function":{"name":"a\u0062","parameters":{"type":"object","properties":{"x":{"enum":["}",-0.5e+3,true,null]}}}}},"x",[[]],{}]}`))
	f.Add([]byte(`[ 1 , "a\"b\\" , {"k\"":[ {} ] } ]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			return
		}
		s := string(body)
		i := skipWS(s, 0)
		if s[i] != '{' && s[i] != '[' {
			return
		}
		got, end := walked(t, s, i)
		if end < 0 {
			t.Fatalf("the walk did not follow the valid %s", s)
		}
		if rest := skipWS(s, end); rest != len(s) {
			t.Fatalf("the walk of %s ended at %d, before the value's end", s, end)
		}
		if want := gjsonWalked(gjson.Parse(s)); got != want {
			t.Fatalf("%s:\nwalk  %s\ngjson %s", s, got, want)
		}
	})
}

// TestEachMemberRefusesWhatItCannotFollow checks that the walk answers -1, never a guess, on text
// that is not one JSON object or array where it reads.
func TestEachMemberRefusesWhatItCannotFollow(t *testing.T) {
	skip := func(k string, v int) int { return ValueEnd(`x`, 5) }
	for _, s := range []string{``, `[`, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `{"a`, `"a"`} {
		if got := EachMember(s, 0, func(k string, v int) int { return ValueEnd(s, v) }); got != -1 {
			t.Errorf("EachMember(%q) = %d, want -1", s, got)
		}
	}
	for _, s := range []string{``, `{`, `[`, `[1`, `[1,`, `[1 2]`, `["a]`} {
		if got := EachElement(s, 0, func(v int) int { return ValueEnd(s, v) }); got != -1 {
			t.Errorf("EachElement(%q) = %d, want -1", s, got)
		}
	}
	if got := EachMember(`{"a":1}`, 0, skip); got != -1 {
		t.Errorf("EachMember with a reader that cannot follow = %d, want -1", got)
	}
}

// FuzzReadRoles checks that ReadRoles, which reads a role-tagged array in one walk, reads any value
// that jsoncheck accepts as readRolesGJSON does (each element skipped by gjson, then read again for
// its role and content): the same application texts, latest user text, other elements byte for
// byte, and the same error.
func FuzzReadRoles(f *testing.F) {
	f.Add([]byte(`[{"role":"system","content":"s"},{"role":"developer","content":[{"type":"text","text":"d"},{"type":"input_text","text":"e"}]},{"role":"user","content":"u1"},{"content":"a","role":"assistant"},{"role":"user","content":[{"type":"text","text":"u\u00e92"}]}]`))
	f.Add([]byte(` [ { "r\u006fle" : "us\u0065r" , "content" : 7 } , {"role":{"x":1}} , {} ] `))
	f.Add([]byte(`[{"role":"user"},1]`))
	f.Add([]byte(`[{"role":"tool","content":null,"tool_call_id":"c"},"x"]`))
	f.Add([]byte(`{"role":"user","content":"an object, not an array"}`))
	f.Add([]byte(`"text"`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Value(body, jsoncheck.Limits{}) != nil {
			return
		}
		arr := gjson.ParseBytes(body)
		got, gotErr := ReadRoles(arr, "messages", nil)
		want, wantErr := readRolesGJSON(arr, "messages", nil)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("%s: error %v, gjson's %v", body, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\nwalk  %#v\ngjson %#v", body, got, want)
		}
	})
}

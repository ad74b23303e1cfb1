package assembly

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzMembers checks that one pass finds what gjson.Get finds for each top-level key: the same value at
// the same place, or nothing.
func FuzzMembers(f *testing.F) {
	f.Add([]byte(oddBody))
	f.Add([]byte(`{"model":"m","messages":[],"tools":null,"promptgate":{"user":"u"}}`))
	f.Add([]byte(`{"promptg\u0061te":{},"m\u0065ssages":[1],"model":"a","model":"b"}`))
	f.Add([]byte(` { "stream" : true , "functions":[{"name":"f"}] } `))
	f.Add([]byte(`[{"model":"x"}]`))
	f.Add([]byte(`{"a":{"model":"inner"},"tool_choice":"auto","function_call":{"name":"f"}}`))
	f.Add([]byte(`"model"`))
	keys := []string{pathModel, pathStream, pathMessages, pathTools, pathFunctions, pathToolChoice, pathFunctionCall, PathExtension}
	f.Add([]byte(`{"promptgate":{"c\u006fntext":{"t":"a\"b\\\\c]}"},"user":"u","user":7,"x":[1,{"y":"}"}]},"z":"\u00e9"}`))
	f.Add([]byte(`{"a":"0123456789abcdef\"0123456789\\","promptgate":{"k":"é—日本語 \"quoted\" and more than eight bytes"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out := make([]gjson.Result, len(keys))
		members(body, out, keys...) // any input: no panic, no endless loop
		if !gjson.ValidBytes(body) {
			return
		}
		clear(out)
		members(body, out, keys...)
		for i, k := range keys {
			want := gjson.GetBytes(body, k)
			if out[i].Exists() != want.Exists() || out[i].Raw != want.Raw || (want.Exists() && out[i].Index != want.Index) ||
				out[i].Type != want.Type || out[i].Str != want.Str || out[i].Num != want.Num {
				t.Fatalf("%s in %s: one pass %q at %d, gjson.Get %q at %d", k, body, out[i].Raw, out[i].Index, want.Raw, want.Index)
			}
			if !want.IsObject() {
				continue
			}
			// fields walks an object as ForEach does.
			type member struct {
				key, raw, str string
				typ           gjson.Type
			}
			var got, ref []member
			fields(body, out[i], func(k string, v gjson.Result) bool {
				got = append(got, member{k, v.Raw, v.Str, v.Type})
				return true
			})
			want.ForEach(func(k, v gjson.Result) bool {
				ref = append(ref, member{k.String(), v.Raw, v.Str, v.Type})
				return true
			})
			if !slices.Equal(got, ref) {
				t.Fatalf("members of %s in %s: fields %+v, ForEach %+v", k, body, got, ref)
			}
		}
	})
}

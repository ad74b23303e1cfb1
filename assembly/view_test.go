package assembly

import (
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
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			return
		}
		out := make([]gjson.Result, len(keys))
		members(body, out, keys...)
		for i, k := range keys {
			want := gjson.GetBytes(body, k)
			if out[i].Exists() != want.Exists() || out[i].Raw != want.Raw || (want.Exists() && out[i].Index != want.Index) {
				t.Fatalf("%s in %s: one pass %q at %d, gjson.Get %q at %d", k, body, out[i].Raw, out[i].Index, want.Raw, want.Index)
			}
		}
	})
}

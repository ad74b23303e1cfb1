package relay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// foldedKeyReference is FoldedKeyOutside as the contract reads: every key of data at any depth,
// outside the values of skip, compared with every name.
func foldedKeyReference(v gjson.Result, names []string, skip string) bool {
	found := false
	isObj := v.IsObject()
	if !isObj && !v.IsArray() {
		return false
	}
	v.ForEach(func(k, val gjson.Result) bool {
		if isObj {
			for _, n := range names {
				if k.Str != n && strings.EqualFold(k.Str, n) {
					found = true
					return false
				}
			}
			if skip != "" && k.Str == skip {
				return true
			}
		}
		found = foldedKeyReference(val, names, skip)
		return !found
	})
	return found
}

// anyKeyMayFold is keysMayFold as it reads: some key at any depth whose raw bytes may fold.
func anyKeyMayFold(v gjson.Result) bool {
	found := false
	if !v.IsObject() && !v.IsArray() {
		return false
	}
	v.ForEach(func(k, val gjson.Result) bool {
		found = k.Type == gjson.String && mayFold(k.Raw, true) || anyKeyMayFold(val)
		return !found
	})
	return found
}

// FuzzFoldedKey: the checks that spare FoldedKeyOutside the comparisons (a key, or the whole data,
// that cannot fold to a name without being it) change no answer, for lowercase names and for names
// with capitals or non-ASCII letters.
func FuzzFoldedKey(f *testing.F) {
	for _, s := range []string{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, `{"TOOL_CALLS":1}`, `{"tool_callſ":1}`,
		`{"\u0054ool_calls":1}`, `{"a":{"Input":{"TOOL_CALLS":1}}}`, `{"input":{"TOOL_CALLS":1}}`, `{"x":"TOOL_CALLS","K":1}`,
		`{"kelvin":{"\u212aey":2}}`, `[{"Key":1}]`, `{"tool\"calls":1,"v":"\"q\\\\u0041"}`, `{"args":"{\"City\":1}"}`, `{"tool_calls":[{"Function":{"name":"a"}}]}`,
		`{"a":"B\\","c":[1,"D\"",{"e\\":"F"}]}`, `{"a" : {"b\"C":0}}`, `["X",{"y":"Z"}]`, `{"\u0061":"\u0042"}`} {
		f.Add([]byte(s), "input")
	}
	f.Fuzz(func(t *testing.T, data []byte, skip string) {
		if !json.Valid(data) {
			return
		}
		if got, want := keysMayFold(data), anyKeyMayFold(Get(data, "@this")); got != want {
			t.Fatalf("keysMayFold(%s) = %v, want %v", data, got, want)
		}
		for _, names := range [][]string{{"tool_calls", "function", "key", "input"}, {"Key", "ſtop"}, {"kelvin", "K"}} {
			want := foldedKeyReference(Get(data, "@this"), names, skip)
			if got := FoldedKeyOutside(data, names, skip); got != want {
				t.Fatalf("FoldedKeyOutside(%s, %q, %q) = %v, want %v", data, names, skip, got, want)
			}
			if skip == "" {
				if got := FoldedKey(data, names); got != want {
					t.Fatalf("FoldedKey(%s, %q) = %v, want %v", data, names, got, want)
				}
			}
		}
	})
}

package vet

import (
	"encoding/json"

	"github.com/tidwall/gjson"
)

// decodeArgs reads arguments that jsoncheck has accepted (valid JSON, valid UTF-8, no lone
// surrogate, bounded depth) into the values jsonschema validates: what jsonschema.UnmarshalJSON
// (encoding/json with UseNumber) makes of them, map[string]any, []any, string, json.Number, bool
// and nil, read by gjson in one pass without encoding/json's decoder state. FuzzDecodeArgs holds
// the two to the same result.
func decodeArgs(args []byte) any {
	return decodeValue(gjson.Parse(string(args)))
}

func decodeValue(v gjson.Result) any {
	switch v.Type {
	case gjson.String:
		return v.Str
	case gjson.Number:
		return json.Number(v.Raw)
	case gjson.True:
		return true
	case gjson.False:
		return false
	case gjson.Null:
		return nil
	}
	if v.IsArray() {
		a := make([]any, 0, 4)
		v.ForEach(func(_, e gjson.Result) bool {
			a = append(a, decodeValue(e))
			return true
		})
		return a
	}
	m := make(map[string]any, 4)
	v.ForEach(func(k, e gjson.Result) bool {
		m[k.Str] = decodeValue(e) // a repeated key: the last wins, as in encoding/json
		return true
	})
	return m
}

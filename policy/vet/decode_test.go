package vet

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzDecodeArgs: whatever jsoncheck accepts, decodeArgs reads as jsonschema.UnmarshalJSON does.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[]}`, `{"a":{},"b":null,"c":true,"d":false}`, `{"n":-0.5e+10,"m":1E2,"i":12345678901234567890}`,
		`{"s":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"}`, `{"k\u0041":"v","ka":"w"}`, `{"a":1,"a":2}`, `{"city":"Zürich","days":[1,[2,{"x":"y"}]]}`,
		` { "a" : [ 1 , 2 ] } `, `{"a":"\u0000"}`, `[1]`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		if jsoncheck.Object(args, jsoncheck.Limits{}) != nil {
			return
		}
		want, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			t.Fatalf("jsoncheck accepted what encoding/json refuses: %v", err)
		}
		if got := decodeArgs(args); !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeArgs(%q) = %#v, want %#v", args, got, want)
		}
	})
}

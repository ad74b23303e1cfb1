package chat

import (
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// referenceTools are the tools of a "tools" (legacy: "functions") array as gjson reads them, entry
// by entry, each entry's objects walked again for their members: the reference of declared.
func referenceTools(arr gjson.Result, legacy bool) []policy.Tool {
	return gjsonTools(arr, legacy, nil)
}

// referenceNamed is namedEntries as gjson reads the array: the reference of the walk.
func referenceNamed(arr gjson.Result, legacy bool) []named {
	var out []named
	arr.ForEach(func(_, v gjson.Result) bool {
		nm := chatToolName(v)
		if legacy {
			nm = v.Get("name").String()
		}
		out = append(out, named{nm, v.Raw})
		return true
	})
	return out
}

// FuzzDeclaredTools checks that the one walk over a request's tools and functions reads, for any
// body the proxy's JSON check accepts, the tools that gjson's entry-by-entry reading gives (names,
// descriptions, schemas byte for byte) and names and keeps the same entries in the rewrite, and
// that it follows every such body (it never falls back to gjson on one).
func FuzzDeclaredTools(f *testing.F) {
	f.Add([]byte(`{"tools":[{"type":"function","function":{"name":"a","description":"d","parameters":{"type":"object"}}},{"type":"custom","custom":{"name":"c","parameters":{"x":1}}},{"type":"web_search"}],"functions":[{"name":"f","parameters":null}]}`))
	f.Add([]byte(`{"tools":[1,"x",null,[{"name":"n"}],{},{"function":"s"},{"type":7,"function":{"name":"n"}},{"type":{"a":1}},{"type":"custom","function":{"name":"f"}}],"functions":["s",{"name":7},[],{"nam\u0065":"e\u0301","description":{"x":[1]}}]}`))
	f.Add([]byte(`{ "tools" : [ { "function" : { "parameters" : { "p" : "}]\"" } , "name" : "late" } , "type" : "function" } ] }`))
	f.Add([]byte(`{"tools":[{"type":"function","function":{"name":"a"},"function":{"description":"second"}}]}`))
	f.Add([]byte(`{"tools":[],"functions":{}}`))
	f.Add([]byte(`{"tools":[{"type":"funct\u0069on","functio\u006e":{"name":"x","name":"y"}},{"type":-0.0e1},{"type":true},{"type":12345678901234567890}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		b := assembly.NewBody(body)
		for _, a := range []struct {
			key    string
			legacy bool
		}{{reqTools, false}, {reqFunctions, true}} {
			arr := b.Get(a.key)
			if !arr.IsArray() {
				continue
			}
			if readEntries(arr.Raw, 0, a.legacy, func(entry, int, int) {}) < 0 {
				t.Fatalf("the walk did not follow %s of the valid %s", a.key, body)
			}
			got, want := declared(arr, a.legacy, nil), referenceTools(arr, a.legacy)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s of %s:\nwalk  %+v\ngjson %+v", a.key, body, got, want)
			}
			if got, want := namedEntries(arr, a.legacy, nil), referenceNamed(arr, a.legacy); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s entries of %s:\nwalk  %q\ngjson %q", a.key, body, got, want)
			}
		}
	})
}

// benchToolsJSON is the "tools" array of the bench's chat workloads: three functions with schemas.
const benchToolsJSON = `[{"type":"function","function":{"name":"search_docs","description":"Search the team's documentation; returns the best passages as JSON.","parameters":{"properties":{"limit":{"maximum":20,"minimum":1,"type":"integer"},"query":{"description":"what to look for","type":"string"}},"required":["query"],"type":"object"}}},{"type":"function","function":{"name":"get_ticket","description":"Read one support ticket by its id (T-\u003cdigits\u003e).","parameters":{"additionalProperties":false,"properties":{"id":{"description":"the ticket id, e.g. T-1234","type":"string"}},"required":["id"],"type":"object"}}},{"type":"function","function":{"name":"create_note","description":"Add a note to a ticket.","parameters":{"properties":{"text":{"maxLength":2000,"type":"string"},"ticket":{"type":"string"}},"required":["ticket","text"],"type":"object"}}}]`

// BenchmarkDeclaredTools reads the declared tools (and the rewrite's named entries) by the one walk,
// beside gjson's entry-by-entry reading of the same array.
func BenchmarkDeclaredTools(b *testing.B) {
	arr := gjson.Parse(benchToolsJSON)
	b.Run("tools-walk", func(b *testing.B) {
		for b.Loop() {
			_ = declared(arr, false, nil)
		}
	})
	b.Run("tools-gjson", func(b *testing.B) {
		for b.Loop() {
			_ = referenceTools(arr, false)
		}
	})
	b.Run("names-walk", func(b *testing.B) {
		for b.Loop() {
			_ = namedEntries(arr, false, nil)
		}
	})
	b.Run("names-gjson", func(b *testing.B) {
		for b.Loop() {
			_ = referenceNamed(arr, false)
		}
	})
}

package assembly

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// bodySeeds are bodies for the Body fuzz targets: odd spacing, escaped keys, a key given twice (the
// first wins), a promptgate object of every shape, values of every type at the top level and in
// promptgate.
var bodySeeds = []string{
	oddBody,
	`{"model":"m","messages":[],"tools":null,"promptgate":{"user":"u"}}`,
	`{"promptg\u0061te":{},"m\u0065ssages":[1],"model":"a","model":"b"}`,
	` { "stream" : true , "functions":[{"name":"f"}] } `,
	`[{"model":"x"}]`,
	`{"a":{"model":"inner"},"tool_choice":"auto","function_call":{"name":"f"}}`,
	`"model"`,
	`{}`,
	` {	} `,
	`{"promptgate":[1,2],"promptgate":{"user":"second"}}`,
	`{"promptgate":{"user":"first"},"promptgate":{"user":"second"},"messages":[]}`,
	`{"promptgate":"text","messages":[]}`,
	`{"promptgate":null}`,
	`{"promptgate":{}, "x":1}`,
	`{"promptgate" : { "context" : {"a":"b\"}{[","c":[1,{"d":"\\"}]} , "user":"u\u00e9", "workflow":7, "protocol":true } , "model":-1.5e-3}`,
	`{"promptgate":{"context":"just \"text\"","context":null,"conversation":false},"stream":false,"tools":[],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"}]}],"instructions":"i","input":[{"role":"developer","content":"d"}],"previous_response_id":"r","system":[{"type":"text","text":"x"}],"mcp_servers":[{"name":"a"}],"tools":[{"type":"mcp"},{"name":"f"}],"tool_choice":{"type":"any"}}`,
	`{"\u0070romptgate":{"\u0063ontext":{"k":"v"}},"n":null,"t":true,"f":false,"num":0,"s":"\ud83d\ude00"}`,
	"{\"a\":1}  \n",
	`{"promptgate":{"user":"u"},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":"required"}`,
	`{"messages":[{"role":"system","content":[{"type":"text","text":"=== X ==="}]}],"functions":[{"name":"f"}],"function_call":{"name":"f"}}`,
	`{"model":"m","instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tools":[{"type":"function","name":"f"},{"type":"mcp"},{"type":"mcp"}],"tool_choice":"required","promptgate":{}}`,
	`{"system":[{"type":"text","text":"=== X ==="}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"},{"type":"bash_20250124","name":"bash"}],"tool_choice":{"type":"tool","name":"f"}}`,
	`{ "promptgate" : {"user":"u"} , "input":"hi" }`,
	`{ "promptgate":"" }`,
	`{ "tools":[{"type":"function","name":"f"}] , "promptgate":{} }`,
	`{ "tools":[{"name":"f"}] ,"promptgate":{"context":{"instructions":"x","system":"y"}}, "messages":[] }`,
	`{"input":[{"role":"system","content":"s"},{"type":"function_call_output","output":"o"}],"instructions":null,"promptgate":{"context":{"a":1}}  }`,
	`{"messages":[],"promptgate":{},"promptgate":{"user":"x"}}`,
	`{"promptgate":{},"messages":[{"role":"user","content":[{"type":"tool_result","content":"r"}]}],"mcp_servers":[{"name":"a"}],"tools":[{"name":"f"},{"type":"mcp_toolset"}],"tool_choice":{"type":"any"}}`,
	`{"tools":[{"type":"function","name":"f"}],"tool_choice":"required","promptgate":{"user":"u"},"input":[{"role":"user","content":"x"}]}`,
}

// sameResult reports whether two gjson results are the same in every field.
func sameResult(a, b gjson.Result) bool {
	return a.Type == b.Type && a.Raw == b.Raw && a.Str == b.Str && a.Index == b.Index &&
		(a.Num == b.Num || (math.IsNaN(a.Num) && math.IsNaN(b.Num))) && reflect.DeepEqual(a.Indexes, b.Indexes)
}

// FuzzMembers checks that a Body answers as gjson does for any valid JSON, duplicate keys included:
// each top-level key (those the package reads, and every key of the body) has the value gjson.Get
// finds, the same in every field, or nothing; the members of the promptgate object are those
// gjson's ForEach gives, in order. A valid body is always walked by the Body itself, not handed
// back to gjson.
func FuzzMembers(f *testing.F) {
	for _, s := range bodySeeds {
		f.Add([]byte(s))
	}
	// The top-level keys the surfaces read, and the empty key.
	keys := []string{"model", "stream", "messages", "tools", "functions", "tool_choice", "function_call",
		PathExtension, "instructions", "input", "previous_response_id", "system", "mcp_servers", "web_search_options", "prompt", ""}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			return
		}
		b := NewBody(body)
		root := gjson.ParseBytes(body)
		if root.IsObject() && !b.ok {
			t.Fatalf("the walk did not follow the valid body %s", body)
		}
		all := keys
		root.ForEach(func(k, _ gjson.Result) bool {
			all = append(all, k.Str)
			return true
		})
		for _, k := range all {
			if isPathSyntax(k) {
				continue // gjson.Get would read k as a path, not as a key
			}
			if got, want := b.Get(k), Get(body, k); !sameResult(got, want) {
				t.Fatalf("%q in %s: Body %#v, gjson.Get %#v", k, body, got, want)
			}
		}
		// GetEach finds, in one walk, what Get finds for each key.
		var plain []string
		for _, k := range all {
			if !isPathSyntax(k) {
				plain = append(plain, k)
			}
		}
		vals := make([]gjson.Result, len(plain))
		GetEach(body, plain, vals)
		for i, k := range plain {
			if want := Get(body, k); !sameResult(vals[i], want) {
				t.Fatalf("%q in %s: GetEach %#v, gjson.Get %#v", k, body, vals[i], want)
			}
		}
		ext := Get(body, PathExtension)
		var got, want []member
		b.extension(ext, func(k string, v gjson.Result) bool {
			got = append(got, member{key: k, val: v})
			return true
		})
		if ext.IsObject() {
			ext.ForEach(func(k, v gjson.Result) bool {
				want = append(want, member{key: k.Str, val: v})
				return true
			})
		}
		if len(got) != len(want) {
			t.Fatalf("promptgate of %s: Body %d members, gjson %d", body, len(got), len(want))
		}
		for i := range got {
			if got[i].key != want[i].key || !sameResult(got[i].val, want[i].val) {
				t.Fatalf("promptgate member %d of %s: Body %q %#v, gjson %q %#v", i, body, got[i].key, got[i].val, want[i].key, want[i].val)
			}
		}
		// Where the validation accepts the body, the Body made from what it found is the walked
		// one.
		var m jsoncheck.Members
		if jsoncheck.ObjectMembers(body, jsoncheck.Limits{}, PathExtension, &m) == nil {
			of := NewBodyOf(body, &m)
			sameMembers(t, "top-level", body, of.top, b.top)
			sameMembers(t, "promptgate", body, of.ext, b.ext)
		}
	})
}

// sameMembers fails t unless got and want are the same members in the same order.
func sameMembers(t *testing.T, what string, body []byte, got, want []member) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s members of %s: NewBodyOf %d, NewBody %d", what, body, len(got), len(want))
	}
	for i := range got {
		if got[i].key != want[i].key || !sameResult(got[i].val, want[i].val) {
			t.Fatalf("%s member %d of %s: NewBodyOf %q %#v, NewBody %q %#v", what, i, body, got[i].key, got[i].val, want[i].key, want[i].val)
		}
	}
}

// TestNewBodyOf checks the Body made from the validation's record on the members that need care: an
// escaped key (also the promptgate key itself), every kind of value, a promptgate that is not an
// object.
func TestNewBodyOf(t *testing.T) {
	for _, body := range []string{
		`{"a\u0062":1.5e3,"s":"x\ny","t":true,"f":false,"n":null,"o":{"k":[1,{"z":2}]},"arr":[],"promptgate":{"user":"u","w\u006frkflow":"w"}}`,
		`{"promptg\u0061te":{"user":"u"}, "messages" : [ ] }`,
		`{"promptgate":"not an object","x":-0}`,
		`{"promptgate":[{"user":{}}],"x":{"promptgate":{"a":1}}}`,
		`{}`,
		` {"promptgate":{}} `,
	} {
		raw := []byte(body)
		var m jsoncheck.Members
		if err := jsoncheck.ObjectMembers(raw, jsoncheck.Limits{}, PathExtension, &m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		of, walked := NewBodyOf(raw, &m), NewBody(raw)
		if !walked.ok {
			t.Fatalf("%s: the walk did not follow it", body)
		}
		sameMembers(t, "top-level", raw, of.top, walked.top)
		sameMembers(t, "promptgate", raw, of.ext, walked.ext)
	}
}

// TestBodyRoles checks that Roles reads each field's array and answers a second call for it from
// the first.
func TestBodyRoles(t *testing.T) {
	body := []byte(`{"messages":[{"role":"system","content":"s1"},{"role":"user","content":"u1"},{"role":"assistant","content":"a"},{"role":"developer","content":[{"type":"text","text":"d"}]},{"role":"user","content":"u2"}],"input":[{"role":"user","content":"i"}],"bad":[1]}`)
	b := NewBody(body)
	r, err := b.Roles("messages")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Application, []string{"s1", "d"}) || r.LatestUser != "u2" || len(r.Others) != 3 ||
		r.Others[0] != `{"role":"user","content":"u1"}` || r.Others[2] != `{"role":"user","content":"u2"}` {
		t.Fatalf("messages: %+v", r)
	}
	if in, err := b.Roles("input"); err != nil || in.LatestUser != "i" || len(in.Application) != 0 {
		t.Fatalf("input: %+v, %v", in, err)
	}
	if _, err := b.Roles("bad"); err == nil || !strings.Contains(err.Error(), "bad[0] must be an object") {
		t.Fatalf("bad: %v", err)
	}
	// A second read of a field answers from the first (the same Others, not a new read), and
	// another field in between makes the next read of the first a new one.
	again := NewBody(body)
	first, _ := again.Roles("messages")
	second, _ := again.Roles("messages")
	if unsafe.SliceData(first.Others) != unsafe.SliceData(second.Others) {
		t.Fatal("a second call for the same field read the array again")
	}
	_, _ = again.Roles("input")
	if third, _ := again.Roles("messages"); unsafe.SliceData(third.Others) == unsafe.SliceData(first.Others) || third.LatestUser != "u2" {
		t.Fatal("after another field, the first field's read was not made again")
	}
}

// isPathSyntax reports whether gjson.Get would read k as more than a plain key.
func isPathSyntax(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		switch c {
		case '.', '*', '?', '|', '#', '@', '\\', '!', '=', '<', '>', '%', '[', ']', '{', '}', '(', ')', ',', ':', '"':
			return true
		}
	}
	return false
}

// TestBodyWalksOnce checks what Body is for: once the walk has located the members, reading them
// does not walk the body again. The test breaks the rule that a Body's bytes stay as they are:
// after the walk, the context's text becomes unbalanced brackets, so that gjson, reading the body
// again from the start, no longer finds the members after promptgate. The Body still answers from
// what its one walk found.
func TestBodyWalksOnce(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"u","context":{"a":"xxxxxxxx"},"workflow":"w"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`)
	b := NewBody(body)
	if !b.ok || len(b.top) != 4 || len(b.ext) != 3 {
		t.Fatalf("walk followed %v, %d top-level and %d promptgate members, want 4 and 3", b.ok, len(b.top), len(b.ext))
	}
	at := bytes.Index(body, []byte("xxxxxxxx"))
	copy(body[at-1:], `[[[[[[[[[[`) // the quotes too: {"a":[[[[[[[[[[}
	if Get(body, "tools").Exists() {
		t.Fatal("gjson still finds tools: the test proves nothing")
	}
	x, err := b.Extension()
	if err != nil || x.User != "u" || x.Workflow != "w" {
		t.Errorf("Extension: %+v, %v", x, err)
	}
	if tools := b.Get("tools"); !tools.IsArray() || tools.Get("0.function.name").Str != "f" {
		t.Errorf("tools: %s", tools.Raw)
	}
	if msgs := b.Get("messages"); msgs.Get("0.content").Str != "hi" {
		t.Errorf("messages: %s", msgs.Raw)
	}
	if tc := b.Get("tool_choice"); tc.Str != "required" {
		t.Errorf("tool_choice: %s", tc.Raw)
	}
}

// TestBodyNotFollowed checks that a body the walk cannot follow (not JSON, not an object, cut
// short) is read by gjson key by key, as before Body.
func TestBodyNotFollowed(t *testing.T) {
	for _, body := range []string{``, `   `, `[1]`, `{"model":"m"`, `{"model" "m"}`, `{"model":"m" "x":1}`, `{"model":`, `{model:"m"}`, `{"promptgate":{"user":"u",}}`} {
		b := NewBody([]byte(body))
		if b.ok {
			t.Errorf("%q: the walk followed it", body)
		}
		for _, k := range []string{"model", PathExtension, "x"} {
			if got, want := b.Get(k), Get([]byte(body), k); !sameResult(got, want) {
				t.Errorf("%q, %s: %#v, gjson %#v", body, k, got, want)
			}
		}
	}
}

// oddBody has odd spacing, unicode escapes, unusual key order and numbers that a re-encoder would
// change.
const oddBody = "{ \"temperature\" : 1.0e+2 ,\n\t\"promptgate\" : {\"user\":\"u-1\", \"context\":{\"a\":1}},\n" +
	"  \"seed\":-0, \"metadata\" : {\"note\":\"caf\\u00e9 <b>&amp;</b>\", \"z\":1, \"a\":2},\n" +
	"  \"messages\" : [ {\"role\":\"system\",\"content\":\"S\"} ,\n" +
	"    {\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"},\n" +
	"    {\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"D\"}]},\n" +
	"    {\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]},\n" +
	"    {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"} ],\n" +
	"  \"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"search\"}} ],\n" +
	"  \"x_unknown\" : [ 1E400 , \"\\/\" ] , \"model\":\"gpt-4o\" }"

// TestGetEachReadsOnlyWhatIsAsked: GetEach allocates nothing for the members it is not asked for,
// an escaped string as long as a layered prompt among them, and finds each key asked for.
func TestGetEachReadsOnlyWhatIsAsked(t *testing.T) {
	body := []byte(`{"model":"m","instructions":"` + strings.Repeat(`line\n\"quoted\"\t`, 400) + `","input":[{"role":"user","content":"x\ny"}],"n":2,"store":false}`)
	keys := []string{"n", "store", "background"}
	vals := make([]gjson.Result, len(keys))
	if a := testing.AllocsPerRun(20, func() { GetEach(body, keys, vals) }); a != 0 {
		t.Fatalf("%.0f allocations", a)
	}
	for i, k := range keys {
		if want := Get(body, k); !sameResult(vals[i], want) {
			t.Fatalf("%q: GetEach %#v, Get %#v", k, vals[i], want)
		}
	}
}

// BenchmarkGetEach: two members a layered body lacks, found absent in one walk, beside the two
// gjson.Get walks it replaces.
func BenchmarkGetEach(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat(`A rule of the prompt.\n\t\"x\"`, 180) +
		`"},{"role":"user","content":"` + strings.Repeat("hello ", 100) + `"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
	keys := []string{"n", "store"}
	vals := make([]gjson.Result, 2)
	b.Run("GetEach", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			GetEach(body, keys, vals)
		}
	})
	b.Run("baseline-Get-each-key", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			vals[0], vals[1] = Get(body, keys[0]), Get(body, keys[1])
		}
	})
}

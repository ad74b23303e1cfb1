package policy

import (
	"strings"
	"testing"
)

// TestTypeErrorsNameTheKeyPath: a value of the wrong type anywhere in a protocol definition is
// reported at its key path, indexes included, never with Go's field names.
func TestTypeErrorsNameTheKeyPath(t *testing.T) {
	t.Parallel()
	base := `{"id":"x","promptTemplate":{"base":"base_tool_call_v2"},`
	for _, c := range []struct{ body, want string }{
		{base + `"tools":{"allow":"*"}}`, `tools.allow: a string where a list of strings goes`},
		{base + `"toolCalls":{"provenance":[{"tool":"a","path":"b","from":["user"]},{"tool":"a","path":"b","from":"user"}]}}`,
			`toolCalls.provenance[1].from: a string where a list of strings goes`},
		{base + `"toolCalls":{"budgets":[{"tool":"a","maxCalls":"3"}]}}`, `toolCalls.budgets[0].maxCalls: a string where a number goes`},
		{base + `"toolCalls":{"sources":{"payees":[1]}}}`, `toolCalls.sources.payees[0]: a number where a string goes`},
		{base + `"toolCalls":{"toolOutputs":{"trustedPaths":["#.a"]}}}`, `toolCalls.toolOutputs.trustedPaths: an array where an object goes`},
		{base + `"allowClientSelection":"yes"}`, `allowClientSelection: a string where true or false goes`},
		{base + `"scope":[["x"]]}`, `scope[0]: an array where a string goes`},
	} {
		_, err := ParseProtocol([]byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s:\n  got  %v\n  want %s", c.body, err, c.want)
		}
	}
}

func TestKeyPathAt(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":[1,{"b":"x","c":[true,null]}],"d":{}}`)
	for _, c := range []struct {
		after string // the value ends right after this prefix
		want  string
	}{
		{`{"a":[1`, "a[0]"}, {`{"a":[1,{"b":"x"`, "a[1].b"}, {`{"a":[1,{"b":"x","c":[true,null`, "a[1].c[1]"},
		{`{"a":[1,{"b":"x","c":[true,null]`, "a[1].c"}, {`{"a":[1,{"b":"x","c":[true,null]}]`, "a"}, {`{"a":[1,{"b":"x","c":[true,null]}],"d":{}`, "d"},
		{`{"a":[1,{`, "a[1]"}, {`{"a":[1,{"b":"x","c":[`, "a[1].c"}, {string(body), ""}, {`{"a":[1,{"b"`, ""},
	} {
		if got := keyPathAt(body, int64(len(c.after))); got != c.want {
			t.Errorf("after %s: %q, want %q", c.after, got, c.want)
		}
	}
}

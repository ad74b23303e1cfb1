package assembly_test

import (
	"reflect"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
)

// parseExtension reads the extension of a raw body.
func parseExtension(body []byte) (assembly.Extension, error) {
	return assembly.NewBody(body).Extension()
}

func TestParseExtension(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		x, err := parseExtension([]byte(`{"model":"m","messages":[]}`))
		if err != nil || !reflect.DeepEqual(x, assembly.Extension{}) {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("all fields", func(t *testing.T) {
		x, err := parseExtension([]byte(`{"model":"m","promptgate": {"protocol":"tech", "workflow":"code_review","user":"u-\u0031",
			"conversation":"c-9","context": {"attachments" : [1, 2], "memory":{}}}}`))
		want := assembly.Extension{Protocol: "tech", Workflow: "code_review", User: "u-1", Conversation: "c-9",
			Context: []byte(`{"attachments" : [1, 2], "memory":{}}`)}
		if err != nil || !reflect.DeepEqual(x, want) {
			t.Errorf("got %+v, %v\nwant %+v", x, err, want)
		}
	})
	t.Run("context null", func(t *testing.T) {
		x, err := parseExtension([]byte(`{"promptgate":{"user":"u","context":null}}`))
		if err != nil || x.Context != nil || x.User != "u" {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("context of any JSON type is data", func(t *testing.T) {
		x, err := parseExtension([]byte(`{"promptgate":{"context":"just text"}}`))
		if err != nil || string(x.Context) != `"just text"` {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("empty object", func(t *testing.T) {
		x, err := parseExtension([]byte(`{"promptgate":{}}`))
		if err != nil || !reflect.DeepEqual(x, assembly.Extension{}) {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	bad := []struct {
		name, body, param string
	}{
		{"protocol number", `{"promptgate":{"protocol":1}}`, "promptgate.protocol"},
		{"workflow bool", `{"promptgate":{"workflow":true}}`, "promptgate.workflow"},
		{"user null", `{"promptgate":{"user":null}}`, "promptgate.user"},
		{"conversation object", `{"promptgate":{"conversation":{}}}`, "promptgate.conversation"},
		{"protocol array", `{"promptgate":{"protocol":["tech"]}}`, "promptgate.protocol"},
		{"unknown key", `{"promptgate":{"protocol":"tech","protocl":"x"}}`, "promptgate.protocl"},
		{"first problem wins", `{"promptgate":{"user":1,"zzz":2}}`, "promptgate.user"},
		{"string", `{"promptgate":"tech"}`, "promptgate"},
		{"array", `{"promptgate":[]}`, "promptgate"},
		{"null", `{"promptgate":null}`, "promptgate"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseExtension([]byte(tt.body))
			assemblytest.WantPolicyError(t, err, "invalid_request", tt.param)
		})
	}
}

func TestJSONString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", `""`},
		{`<a href="x">&amp;</a>`, `"<a href=\"x\">&amp;</a>"`},
		{"line\nbreak\ttab\\ \u2028\u2029", `"line\nbreak\ttab\\ \u2028\u2029"`},
		{"é 漢 😀", `"é 漢 😀"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"bad \xff utf8", `"bad \ufffd utf8"`},
	} {
		if got := string(assembly.JSONString(tt.in)); got != tt.want {
			t.Errorf("assembly.JSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

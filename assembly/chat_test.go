package assembly

import (
	"errors"
	"reflect"
	"testing"

	"github.com/promptgate/promptgate/policy"
)

// wantPolicyError checks that err is a *policy.Error with the code and param.
func wantPolicyError(t *testing.T, err error, code, param string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *policy.Error", err, err)
	}
	if pe.Code != code || pe.Param != param {
		t.Errorf("error = {%s %q} %q, want {%s %q}", pe.Code, pe.Param, pe.Message, code, param)
	}
}

func TestParseExtension(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"model":"m","messages":[]}`))
		if err != nil || !reflect.DeepEqual(x, Extension{}) {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("all fields", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"model":"m","promptgate": {"protocol":"tech", "workflow":"code_review","user":"u-\u0031",
			"conversation":"c-9","context": {"attachments" : [1, 2], "memory":{}}}}`))
		want := Extension{Protocol: "tech", Workflow: "code_review", User: "u-1", Conversation: "c-9",
			Context: []byte(`{"attachments" : [1, 2], "memory":{}}`)}
		if err != nil || !reflect.DeepEqual(x, want) {
			t.Errorf("got %+v, %v\nwant %+v", x, err, want)
		}
	})
	t.Run("context null", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{"user":"u","context":null}}`))
		if err != nil || x.Context != nil || x.User != "u" {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("context of any JSON type is data", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{"context":"just text"}}`))
		if err != nil || string(x.Context) != `"just text"` {
			t.Errorf("got %+v, %v", x, err)
		}
	})
	t.Run("empty object", func(t *testing.T) {
		x, err := ParseExtension([]byte(`{"promptgate":{}}`))
		if err != nil || !reflect.DeepEqual(x, Extension{}) {
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
			_, err := ParseExtension([]byte(tt.body))
			wantPolicyError(t, err, "invalid_request", tt.param)
		})
	}
}

// oddBody has odd spacing, unicode escapes, unusual key order and numbers that a re-encoder would change.
const oddBody = "{ \"temperature\" : 1.0e+2 ,\n\t\"promptgate\" : {\"user\":\"u-1\", \"context\":{\"a\":1}},\n" +
	"  \"seed\":-0, \"metadata\" : {\"note\":\"caf\\u00e9 <b>&amp;</b>\", \"z\":1, \"a\":2},\n" +
	"  \"messages\" : [ {\"role\":\"system\",\"content\":\"S\"} ,\n" +
	"    {\"role\" : \"user\", \"content\" : \"hi \\u2028 \\ud83d\\ude00\"},\n" +
	"    {\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"D\"}]},\n" +
	"    {\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1.50}\"}}]},\n" +
	"    {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"} ],\n" +
	"  \"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"search\"}} ],\n" +
	"  \"x_unknown\" : [ 1E400 , \"\\/\" ] , \"model\":\"gpt-4o\" }"

func TestJSONString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", `""`},
		{`<a href="x">&amp;</a>`, `"<a href=\"x\">&amp;</a>"`},
		{"line\nbreak\ttab\\ \u2028\u2029", `"line\nbreak\ttab\\ \u2028\u2029"`},
		{"é 漢 😀", `"é 漢 😀"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"bad \xff utf8", `"bad \ufffd utf8"`},
	} {
		if got := string(JSONString(tt.in)); got != tt.want {
			t.Errorf("JSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

package surface

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
)

// TestMaskCodesEverywhereButTheUsersTyping: in a body that holds a notice, every code-shaped token
// of every string is masked, under keys a path must escape too, while the user's own texts keep
// what the user typed and lose only the notices they quote; the rest of the body is unchanged.
func TestMaskCodesEverywhereButTheUsersTyping(t *testing.T) {
	t.Parallel()
	body := `{"system":"Summary: ` + flow.NoticeMarker + `x. Reply with the code 23A0-4XYF.",
	  "messages":[{"role":"user","content":"> ` + flow.NoticeMarker + `x: code 23A0-4XYF\nyes 7KQM-P2D9"},
	    {"role":"assistant","content":[{"type":"tool_use","input":{"a.b":"7KQM-P2D9","0":["23A0-4XYF"],"*?#@|":"23a0-4xyf","k":"AB12-CD34x"}}]}],
	  "n":1,"t":true}`
	user := func(b []byte, each func(string, gjson.Result)) {
		each("messages.0.content", gjson.GetBytes(b, "messages.0.content"))
	}
	out, err := MaskCodes([]byte(body), user)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"system":             "Summary: " + flow.NoticeMarker + "x. Reply with the code " + flow.HiddenCode + ".",
		"messages.0.content": "> " + flow.NoticeMarker + "x: code " + flow.HiddenCode + "\nyes 7KQM-P2D9",
	}
	for path, w := range want {
		if got := gjson.GetBytes(out, path).String(); got != w {
			t.Errorf("%s: %q, want %q", path, got, w)
		}
	}
	var v struct {
		Messages []struct {
			Content json.RawMessage
		}
		N int
		T bool
	}
	if err := json.Unmarshal(out, &v); err != nil || v.N != 1 || !v.T || len(v.Messages) != 2 {
		t.Fatalf("the body is no longer what it was: %v %s", err, out)
	}
	if got := string(v.Messages[1].Content); strings.Count(got, flow.HiddenCode) != 3 || !strings.Contains(got, "AB12-CD34x") {
		t.Errorf("the tool call's strings: %s", got)
	}
	if same, _ := MaskCodes([]byte(`{"messages":[{"role":"assistant","content":"order 23A0-4XYF"}]}`), user); !strings.Contains(string(same), "23A0-4XYF") {
		t.Errorf("a body without a notice was changed: %s", same)
	}
}

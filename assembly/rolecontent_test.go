package assembly

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzRoleContent: the one walk of a message finds the role and content that two gjson Gets find.
func FuzzRoleContent(f *testing.F) {
	for _, s := range []string{
		`{"role":"user","content":"hi"}`, `{"content":[{"type":"text","text":"a"}],"role":"system"}`,
		`{"role":"user"}`, `{"content":null}`, `{}`, `{"r\u006fle":"developer","c\u006fntent":"x"}`,
		`{"role":1,"content":{"a":1}}`, `{"name":"x","role":"assistant","tool_calls":[],"content":""}`,
		`{"role":"user","role":"system","content":"a","content":"b"}`, `{"role" : "user" , "content" : "x"}`,
		`{"role":"us\"er","content":"\ud83d\ude00"}`, `{"roles":"user","contents":"x","role":"tool"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !gjson.Valid(s) {
			return
		}
		m := gjson.Parse(s)
		if !m.IsObject() {
			return
		}
		role, content := roleContent(m)
		wantContent := m.Get("content")
		if want := m.Get("role").String(); role != want {
			t.Fatalf("%s: role %q, Get says %q", s, role, want)
		}
		if content.Type != wantContent.Type || content.Raw != wantContent.Raw || content.Str != wantContent.Str {
			t.Fatalf("%s: content %#v, Get says %#v", s, content, wantContent)
		}
	})
}

package chat

import (
	"bytes"
	"strconv"
	"testing"
)

// FuzzAllNull: allNull is the one-pass form of the two counts noteFinish used to compare.
func FuzzAllNull(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[{"finish_reason":null},{"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"finish_reason":"stop"},{"finish_reason":null}]}`,
		`"finish_reason"finish_reason":null`, `"finish_reason":null"finish_reason":null`,
		`"finish_reason": null`, `"finish_reason":nul`, `"finish_reason":nullx"finish_reason"`,
		`{"delta":{"content":"\"finish_reason\":null"},"finish_reason":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := bytes.Count(data, finishKey) == bytes.Count(data, finishNull)
		if got := allNull(data); got != want {
			t.Fatalf("allNull(%q) = %v, the counts say %v", data, got, want)
		}
	})
}

// noteText with the text template marks exactly the choices the full walk of every event marks.
func FuzzNoteTextTemplate(f *testing.F) {
	ev := func(choices string) string {
		return `{"id":"c-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + choices + `]}`
	}
	seeds := [][2]string{
		{ev(`{"index":0,"delta":{"content":"Hello"},"finish_reason":null}`), ev(`{"index":0,"delta":{"content":" world"},"finish_reason":null}`)},
		{ev(`{"index":0,"delta":{"content":"Hello"},"finish_reason":null}`), ev(`{"index":0,"delta":{"content":""},"finish_reason":null}`)},
		{ev(`{"index":0,"delta":{"content":"a"}}`), ev(`{"index":1,"delta":{"content":"b"}}`)},
		{ev(`{"index":0,"delta":{"content":"a"}}`), ev(`{"index":0,"delta":{"content":"a\"},{\"index\":3,\"delta\":{\"content\":\"x"}}`)},
		{ev(`{"index":0,"delta":{"content":"a"}}`), ev(`{"index":0,"delta":{"content":"a"},{"index":2,"delta":{"content":"x"}}`)},
		{ev(`{"index":2,"delta":{"content":"a"}},{"index":0,"delta":{"role":"assistant"}}`), ev(`{"index":2,"delta":{"content":"b"}},{"index":0,"delta":{"role":"assistant"}}`)},
		{ev(`{"index":0,"delta":{"content":"a\nb"}}`), ev(`{"index":0,"delta":{"content":"c"}}`)},
		{ev(`{"index":0,"delta":{"content":"a"},"logprobs":{"content":[]}}`), ev(`{"index":0,"delta":{"content":"b"},"logprobs":{"content":[]}}`)},
		{ev(`{"index":0,"delta":{"content":"a"}}`), ev(`{"index":0,"delta":{"content":"a` + "\x01" + `"}}`)},
		{`{"choices":[{"index":0,"delta":{"content":"a"}}]`, `{"choices":[{"index":0,"delta":{"content":"b"}}]`},
		{ev(`{"index":0,"delta":{"content":"a"}}],"obfuscation":"xy`), ev(`{"index":0,"delta":{"content":""}}],"obfuscation":"q`)},
		{ev(`{"index":1,"delta":{"content":"a","role":""}},{"index":0,"delta":{"content":""}}`), ev(`{"index":1,"delta":{"content":"b","role":""}},{"index":0,"delta":{"content":"c"}}`)},
		{ev(`{"index":0,"delta":{"content":"a"}}`), ev(`{"index":0,"delta":{"content":"a"},"index":1}`)},
		{ev(`{"index":0,"delta":{"content" : "a"}}`), ev(`{"index":0,"delta":{"content" : "zz"}}`)},
		{ev(`{"index":0,"delta":{"content":"a"},"x":"content"}`), ev(`{"index":0,"delta":{"content":"b"},"x":"y"}`)},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		fast := NewStream(nil, nil, nil)
		slow := NewStream(nil, nil, nil)
		for _, data := range [][]byte{a, b, c} {
			fast.noteText(data)
			slow.tpl = textTemplate{}
			slow.noteText(data)
			if got, want := marks(fast), marks(slow); got != want {
				t.Fatalf("after %q: marked %s with the template, %s without", data, got, want)
			}
		}
	})
}

// marks lists the choices marked as having text.
func marks(s *Stream) string {
	var b []byte
	for _, k := range s.choiceKeys() {
		if s.choices[k].text {
			b = strconv.AppendInt(append(b, ' '), int64(k), 10)
		}
	}
	return string(b)
}

// The template is learnt from a plain text event and covers the next ones of the same stream, and
// nothing that could read differently.
func TestTextTemplateCovers(t *testing.T) {
	pre := `{"id":"c-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"`
	suf := `"},"finish_reason":null}]}`
	s := NewStream(nil, nil, nil)
	s.noteText([]byte(pre + "Hello" + suf))
	for text, want := range map[string]bool{
		" world": true, "": true, "Zürich": true,
		`a\"b`: false, `a"`: false, "a\nb": false, `\n`: false,
	} {
		if got := s.tpl.covers([]byte(pre + text + suf)); got != want {
			t.Errorf("covers(%q) = %v, want %v", text, got, want)
		}
	}
	if s.tpl.covers([]byte(pre + "x" + `"},"finish_reason":"stop"}]}`)) {
		t.Error("another suffix is covered")
	}
	// Strings that change per chunk are covered; keys, empty strings and everything outside strings
	// are not.
	obf := func(key, fp, pad string) []byte {
		return []byte(`{"id":"c-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"` + fp +
			`","choices":[{"index":0,"delta":{"` + key + `":"hi"},"finish_reason":null}],"obfuscation":"` + pad + `"}`)
	}
	s2 := NewStream(nil, nil, nil)
	s2.noteText(obf("content", "", "a1"))
	for _, c := range []struct {
		ev   []byte
		want bool
	}{
		{obf("content", "", "zz9"), true},
		{obf("content", "", ""), true},
		{obf("xontent", "", "a1"), false},
		{obf("content", "fp", "a1"), false},
	} {
		if got := s2.tpl.covers(c.ev); got != c.want {
			t.Errorf("covers(%s) = %v, want %v", c.ev, got, c.want)
		}
	}
	other := NewStream(nil, nil, nil)
	other.noteText([]byte(pre + `a\nb` + suf)) // an escape: no template
	if !other.tpl.Empty() {
		t.Error("learnt a template from an event with a backslash")
	}
}

// FuzzIndexQuoted: indexQuoted is bytes.Index for the needles the stream looks for.
func FuzzIndexQuoted(f *testing.F) {
	for _, s := range []string{``, `"`, `""content"`, `{"delta":{"content":"x"},"finish_reason":null}`, `content"`,
		`"finish_reason"finish_reason"`, `x"content`, `"content""content"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, sep := range [][]byte{finishKey, finishNull, []byte(`"content"`), []byte(`""`), []byte(`"c"c`)} {
			if got, want := indexQuoted(data, sep), bytes.Index(data, sep); got != want {
				t.Fatalf("indexQuoted(%q, %q) = %d, bytes.Index says %d", data, sep, got, want)
			}
		}
	})
}

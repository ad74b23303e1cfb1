package relay

import (
	"bytes"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// slotAt is the slot of kind k over the first occurrence of what in ev (a string's contents or a
// number).
func slotAt(t *testing.T, ev, what string, k SlotKind) Slot {
	t.Helper()
	i := strings.Index(ev, what)
	if i < 0 {
		t.Fatalf("%q not in %q", what, ev)
	}
	return Slot{From: i, To: i + len(what), Kind: k}
}

func TestTemplateMatch(t *testing.T) {
	tpl := `{"type":"delta","seq":17,"id":"ab","delta":"x\"y","pad":""}`
	var tm Template
	if tm.Match([]byte(tpl), nil) || !tm.Empty() {
		t.Fatal("an empty template matches")
	}
	tm.Set([]byte(tpl), []Slot{slotAt(t, tpl, "17", Digits), slotAt(t, tpl, "ab", Plain), slotAt(t, tpl, `x\"y`, Escaped),
		{From: len(tpl) - 2, To: len(tpl) - 2, Kind: Plain}})
	for _, c := range []struct {
		data string
		want bool
		got  []string
	}{
		{tpl, true, []string{"17", `"x\"y"`}},
		{`{"type":"delta","seq":3,"id":"zzz","delta":"","pad":"p"}`, true, []string{"3", `""`}},
		{`{"type":"delta","seq":3,"id":"","delta":"\\\"}","pad":""}`, true, []string{"3", `"\\\"}"`}},
		{`{"type":"delta","seq":-3,"id":"ab","delta":"x","pad":""}`, false, nil},         // a sign
		{`{"type":"delta","seq":3.5,"id":"ab","delta":"x","pad":""}`, false, nil},        // a fraction
		{`{"type":"delta","seq":,"id":"ab","delta":"x","pad":""}`, false, nil},           // no digit
		{`{"type":"delta","seq":3,"id":"a\"b","delta":"x","pad":""}`, false, nil},        // an escape in a plain slot
		{`{"type":"delta","seq":3,"id":"a\nb","delta":"x","pad":""}`, false, nil},        // a control byte in a plain slot
		{`{"type":"delta","seq":3,"id":"ab","delta":"x","pad":"","more":1}`, false, nil}, // more after the slots
		{`{"type":"Delta","seq":3,"id":"ab","delta":"x","pad":""}`, false, nil},          // outside the slots
		{`{"type":"delta","seq":3,"id":"ab","delta":"x`, false, nil},                     // cut in a slot
		{`{"type":"delta","seq":3`, false, nil},                                          // cut after a slot
		{`{"type":"delta","seq":3,"id":"ab","delta":"x\"`, false, nil},
	} {
		got := make([][]byte, 2)
		if ok := tm.Match([]byte(c.data), got); ok != c.want {
			t.Errorf("Match(%s) = %v, want %v", c.data, ok, c.want)
			continue
		}
		for i, g := range c.got {
			if string(got[i]) != g {
				t.Errorf("Match(%s): slot %d = %q, want %q", c.data, i, got[i], g)
			}
		}
		if c.want && !tm.Match([]byte(c.data), nil) {
			t.Errorf("Match(%s, nil) differs", c.data)
		}
	}
	data := []byte(tpl)
	tm.Set(data, nil)
	data[2] = 'X' // Set copies
	if !tm.Match([]byte(tpl), nil) || tm.Match(data, nil) {
		t.Error("a template without slots is not its bytes")
	}
	tm.Reset()
	if !tm.Empty() || tm.Match([]byte(tpl), nil) {
		t.Error("Reset keeps the template")
	}
}

// FuzzTemplate: a template of valid JSON with every string value a Plain slot matches valid JSON
// exactly when the two are alike outside those strings and the strings of data hold no escape or
// control byte.
func FuzzTemplate(f *testing.F) {
	f.Add(`{"a":"x","b":[1,"y"],"c":{"d":""}}`, `{"a":"q","b":[1,"zz"],"c":{"d":""}}`)
	f.Add(`{"a":"x"}`, `{"a":"x\"}"}`)
	f.Add(`{"a":"x","b":"y"}`, `{"a":"x","b":"y","c":"z"}`)
	f.Fuzz(func(t *testing.T, tpl, data string) {
		if !validObject(tpl) || strings.ContainsRune(tpl, '\\') || !validObject(data) {
			return
		}
		var slots []Slot
		var want bytes.Buffer // data's expected shape: tpl with each slot's contents cut out
		skel := func(s string, slotted func(from, to int) bool) string {
			var b strings.Builder
			for i := 0; i < len(s); {
				if s[i] != '"' {
					b.WriteByte(s[i])
					i++
					continue
				}
				end := i + 1
				for end < len(s) && s[end] != '"' {
					if s[end] == '\\' {
						end++
					}
					end++
				}
				if slotted(i+1, end) {
					b.WriteString(`""`)
				} else {
					b.WriteString(s[i : end+1])
				}
				i = end + 1
			}
			return b.String()
		}
		isKey := func(s string, end int) bool {
			k := end + 1
			for k < len(s) && strings.IndexByte(" \t\r\n", s[k]) >= 0 {
				k++
			}
			return k < len(s) && s[k] == ':'
		}
		want.WriteString(skel(tpl, func(from, to int) bool {
			if isKey(tpl, to) {
				return false
			}
			slots = append(slots, Slot{From: from, To: to, Kind: Plain})
			return true
		}))
		plainData := true
		got := skel(data, func(from, to int) bool {
			if isKey(data, to) {
				return false
			}
			if strings.ContainsFunc(data[from:to], func(r rune) bool { return r == '\\' || r < 0x20 }) {
				plainData = false
			}
			return true
		})
		var tm Template
		tm.Set([]byte(tpl), slots)
		if match, alike := tm.Match([]byte(data), nil), got == want.String() && plainData; match != alike {
			t.Fatalf("template %s, data %s: Match %v, alike %v", tpl, data, match, alike)
		}
	})
}

func validObject(s string) bool { return jsoncheck.Object([]byte(s), jsoncheck.Limits{}) == nil }

func TestSlotOf(t *testing.T) {
	data := []byte(`{"s":"a\"b","n":42,"neg":-1,"f":1.5,"o":{}}`)
	v := Get(data, "@this")
	for _, c := range []struct {
		key  string
		kind SlotKind
		want string // the slot's bytes; "" for no slot
	}{
		{"s", Escaped, `a\"b`}, {"s", Plain, `a\"b`}, {"s", Digits, ""},
		{"n", Digits, "42"}, {"n", Plain, ""}, {"neg", Digits, ""}, {"f", Digits, ""}, {"o", Escaped, ""},
	} {
		sl, ok := SlotOf(data, v.Get(c.key), c.kind)
		if got := string(data[sl.From:sl.To]); ok != (c.want != "") || ok && (got != c.want || sl.Kind != c.kind) {
			t.Errorf("SlotOf(%s, %d) = %+v %v (%q), want %q", c.key, c.kind, sl, ok, got, c.want)
		}
	}
	// A value read from other bytes than data has no slot in data.
	if _, ok := SlotOf([]byte(`{"s":"zzzz"}`), v.Get("s"), Escaped); ok {
		t.Error("a value of other bytes has a slot")
	}
	if _, ok := SlotOf(data[:10], v.Get("n"), Digits); ok {
		t.Error("a value past the data's end has a slot")
	}
}

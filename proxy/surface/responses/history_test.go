package responses

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestHistoryMemoryBounds: the record forgets the least recently used turn past its count or its
// bytes; a chain with a forgotten link is unknown (nil), and a lookup keeps a chain's turns in use.
func TestHistoryMemoryBounds(t *testing.T) {
	t.Parallel()
	m := newHistoryMemory(3)
	m.record("r1", "", []byte(`[{"role":"user","content":"a"}]`))
	m.record("r2", "r1", []byte(`[]`))
	m.record("r3", "r2", []byte(`[{"role":"user","content":"c"}]`))
	if got := string(m.chain("r3")); got != `[{"role":"user","content":"a"},{"role":"user","content":"c"}]` {
		t.Fatalf("chain r3 = %s", got)
	}
	m.record("x1", "", []byte(`[{"role":"user","content":"x"}]`)) // past the count: a turn of r3's chain goes
	if got := m.chain("r3"); got != nil {
		t.Errorf("a chain with a forgotten link: %s, want nil", got)
	}
	if got := string(m.chain("x1")); got != `[{"role":"user","content":"x"}]` {
		t.Errorf("the newest turn: %s", got)
	}
	if got := m.chain("unknown"); got != nil {
		t.Errorf("unknown id: %s", got)
	}

	b := newHistoryMemory(100)
	b.maxBytes = 64
	b.record("big", "", []byte(`["`+strings.Repeat("x", 80)+`"]`))
	if b.chain("big") != nil {
		t.Errorf("a turn larger than the bound was kept")
	}
	b.record("s1", "", []byte(`["`+strings.Repeat("x", 30)+`"]`))
	b.record("s2", "s1", []byte(`["`+strings.Repeat("y", 30)+`"]`))
	if b.chain("s1") != nil || b.chain("s2") != nil || b.bytes > b.maxBytes {
		t.Errorf("the bytes bound was not kept: %d bytes", b.bytes)
	}
}

// TestTurnItems: a string input is one user message; an input of another shape, or an output that
// is not an array, records nothing.
func TestTurnItems(t *testing.T) {
	t.Parallel()
	got := turnItems(gjson.Parse(`"hi \"there\""`), []byte(`[{"type":"message","role":"assistant","content":[]}]`))
	if string(got) != `[{"role":"user","content":"hi \"there\""},{"type":"message","role":"assistant","content":[]}]` {
		t.Errorf("string input: %s", got)
	}
	if got := turnItems(gjson.Parse(`[{"type":"function_call_output","call_id":"c","output":"x"}]`), []byte(`[]`)); string(got) != `[{"type":"function_call_output","call_id":"c","output":"x"}]` {
		t.Errorf("items input: %s", got)
	}
	if turnItems(gjson.Parse(`42`), []byte(`[]`)) != nil || turnItems(gjson.Parse(`"x"`), []byte(`{}`)) != nil {
		t.Errorf("a malformed turn was recorded")
	}
}

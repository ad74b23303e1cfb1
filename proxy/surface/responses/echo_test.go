package responses

import (
	"io"
	"strings"
	"testing"
)

// TestInstructionMemory: each distinct text is kept once however many responses share it; the
// memory is bounded by count and by bytes, the oldest forgotten first; an unknown response (or an
// empty id) has null.
func TestInstructionMemory(t *testing.T) {
	t.Parallel()
	m := newInstructionMemory(3)
	own := []byte(`"You are ACME's agent."`)
	m.remember("resp_1", own)
	m.remember("resp_2", own)
	m.remember("resp_2", []byte(`"other"`)) // the first kept for an id stays
	m.remember("", own)
	if string(m.lookup("resp_1")) != string(own) || string(m.lookup("resp_2")) != string(own) || string(m.lookup("resp_x")) != "null" {
		t.Fatalf("lookups %s %s %s", m.lookup("resp_1"), m.lookup("resp_2"), m.lookup("resp_x"))
	}
	if len(m.texts) != 1 || m.bytes != len(own) {
		t.Fatalf("%d texts, %d bytes: a shared text is not kept once", len(m.texts), m.bytes)
	}
	m.remember("resp_3", []byte(`null`))
	m.remember("resp_4", []byte(`"new"`))
	if string(m.lookup("resp_1")) != "null" || string(m.lookup("resp_4")) != `"new"` || m.order.Len() != 3 {
		t.Fatalf("the oldest was not the one forgotten: %d entries", m.order.Len())
	}
	m.maxBytes = m.bytes + 4
	m.remember("resp_5", []byte(`"a long text"`))
	if string(m.lookup("resp_5")) != `"a long text"` || m.bytes > m.maxBytes || string(m.lookup("resp_2")) != "null" {
		t.Fatalf("bytes %d over %d, or the oldest kept", m.bytes, m.maxBytes)
	}
	for _, e := range m.byID {
		if m.texts[e.Value.(*instructionEntry).text.raw] == nil {
			t.Fatal("an entry's text was forgotten while it is in use")
		}
	}
}

// TestEchoStream: a streamed retrieval keeps every event as it came but for the instructions of a
// response it carries; an event the stream ended inside that holds instructions is dropped.
func TestEchoStream(t *testing.T) {
	t.Parallel()
	in := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"instructions\":\"=== SYSTEM CORE ===\\nsecret\"}}\n\n" +
		": keep-alive\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
		"data: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"=== SYSTEM CORE ===\"}}"
	out, err := io.ReadAll(newEchoStream(io.NopCloser(strings.NewReader(in)), []byte(`"mine"`)))
	if err != nil {
		t.Fatal(err)
	}
	want := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"instructions\":\"mine\"}}\n\n" +
		": keep-alive\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
	if string(out) != want {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
}

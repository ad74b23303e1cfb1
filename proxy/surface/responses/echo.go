package responses

import (
	"container/list"
	"io"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
)

// The Responses API echoes a request's instructions in every response object: the created response,
// the stream events that carry it, a retrieval, a cancel. The upstream was sent the layered prompt
// as instructions, so the proxy gives each of them back the client's own instead (or null where it
// sent none, or where the proxy does not know what it sent): the layered prompt never reaches the
// client.

// pathInstructions is the instructions of a response object.
const pathInstructions = "instructions"

// defaultInstructionBytes bounds the texts the instruction memory keeps (each distinct text once).
const defaultInstructionBytes = 64 << 20

// nullJSON is the instructions of a response whose client sent none, or that the proxy does not
// know.
var nullJSON = []byte("null")

// clientInstructions is the instructions value of a client's Responses request: its own string as
// sent (raw JSON), else null.
func clientInstructions(body []byte) []byte {
	if v := gjson.GetBytes(body, pathInstructions); v.Type == gjson.String {
		return []byte(v.Raw)
	}
	return nullJSON
}

// echoInstructions sets the instructions of the response object at path ("" for the body itself) to
// instructions, where the object has instructions other than those.
func echoInstructions(body []byte, path string, instructions []byte) ([]byte, error) {
	if path != "" {
		path += "."
	}
	path += pathInstructions
	v := gjson.GetBytes(body, path)
	if !v.Exists() || v.Raw == string(instructions) {
		return body, nil
	}
	return sjson.SetRawBytes(body, path, instructions)
}

// instructionMemory remembers, per response id, the instructions the client sent, for the
// retrievals and cancels of that response. A text is kept once however many responses share it (an
// app sends the same instructions every turn). Bounded by count and by the bytes of the texts,
// oldest forgotten first; safe for concurrent use.
type instructionMemory struct {
	mu              sync.Mutex
	max             int
	bytes, maxBytes int
	byID            map[string]*list.Element // of *instructionEntry
	order           *list.List               // oldest at the front
	texts           map[string]*sharedText
}

type instructionEntry struct {
	id   string
	text *sharedText
}

// sharedText is one distinct instructions value and how many responses have it.
type sharedText struct {
	raw  string
	refs int
}

func newInstructionMemory(max int) *instructionMemory {
	if max <= 0 {
		max = defaultStoredResponses
	}
	return &instructionMemory{max: max, maxBytes: defaultInstructionBytes, byID: map[string]*list.Element{},
		order: list.New(), texts: map[string]*sharedText{}}
}

// remember keeps the instructions of response id; the first kept for an id stays.
func (m *instructionMemory) remember(id string, raw []byte) {
	if id == "" || raw == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[id]; ok {
		return
	}
	t := m.texts[string(raw)]
	if t == nil {
		for m.order.Len() > 0 && m.bytes+len(raw) > m.maxBytes {
			m.forgetOldest()
		}
		t = &sharedText{raw: string(raw)}
		m.texts[t.raw] = t
		m.bytes += len(raw)
	}
	for m.order.Len() >= m.max {
		m.forgetOldest()
	}
	t.refs++
	m.byID[id] = m.order.PushBack(&instructionEntry{id: id, text: t})
}

// forgetOldest drops the oldest entry, and its text when no other entry has it. The caller holds
// m.mu.
func (m *instructionMemory) forgetOldest() {
	el := m.order.Front()
	e := el.Value.(*instructionEntry)
	m.order.Remove(el)
	delete(m.byID, e.id)
	if e.text.refs--; e.text.refs == 0 {
		delete(m.texts, e.text.raw)
		m.bytes -= len(e.text.raw)
	}
}

// lookup is the instructions of response id, or null when they are not known.
func (m *instructionMemory) lookup(id string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		return []byte(el.Value.(*instructionEntry).text.raw)
	}
	return nullJSON
}

// echoStream is a streamed retrieval passed on as the upstream sends it, but for the instructions
// of every response object an event carries and, when final is set (a continued response), the
// output and usage of the terminal event's response, which are the create's.
type echoStream struct {
	up           io.ReadCloser
	rd           *sse.Reader
	instructions []byte
	final        *Shown
	out          []byte
	off          int
	err          error
}

func newEchoStream(up io.ReadCloser, instructions []byte) *echoStream {
	return &echoStream{up: up, rd: sse.NewReaderMax(up, relay.MaxEventBytes), instructions: instructions}
}

func (e *echoStream) Read(p []byte) (int, error) {
	for e.off == len(e.out) {
		if e.err != nil {
			return 0, e.err
		}
		e.out, e.off = e.out[:0], 0
		ev, err := e.rd.Next()
		if err != nil {
			e.err = err
			continue
		}
		if data, changed, err := e.edit(ev.Data); ev.HasData && changed {
			// An event that cannot be rewritten, or that the stream ended inside, is dropped.
			if err == nil && !ev.Truncated {
				e.out = sse.AppendEvent(e.out, ev.Event, data)
			}
			continue
		}
		e.out = append(e.out, ev.Raw...)
	}
	n := copy(p, e.out[e.off:])
	e.off += n
	return n, nil
}

// edit rewrites the response object an event's data carries: its instructions, and a terminal
// event's output and usage where final is set. changed reports whether the data is to be rewritten.
func (e *echoStream) edit(data []byte) (out []byte, changed bool, err error) {
	out = data
	if v := gjson.GetBytes(data, "response."+pathInstructions); v.Exists() && v.Raw != string(e.instructions) {
		if out, err = echoInstructions(out, "response", e.instructions); err != nil {
			return nil, true, err
		}
		changed = true
	}
	if e.final != nil {
		switch gjson.GetBytes(data, pathType).Str {
		case evCompleted, evIncomplete, evFailed:
			if gjson.GetBytes(data, pathRespOutput).IsArray() {
				out, err = asShown(out, pathResponse, e.final)
				return out, true, err
			}
		}
	}
	return out, changed, nil
}

func (e *echoStream) Close() error { return e.up.Close() }

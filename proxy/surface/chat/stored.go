package chat

import (
	"container/list"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// A completion created with store: true is kept by the upstream as the model wrote it, calls that
// promptgate blocked included, and under the layered prompt promptgate sent. Its retrievals (GET
// /v1/chat/completions/{id}, the answer of an update, each completion of a listing) show the calls
// this instance released when the completion was created and no other: a blocked or held call is
// replaced by its notice, and a call promptgate has no record of releasing (a completion it forgot,
// or did not relay) is removed with a notice saying so. The listing of a completion's messages
// shows the client's own system and developer text in place of the layered prompt, and no layered
// prompt where the client had none (or promptgate forgot it).

// defaultStoredCompletions is how many stored completions the memory keeps (oldest forgotten
// first), and defaultStoredBytes what their notices and system texts may hold together.
const (
	defaultStoredCompletions = 10000
	defaultStoredBytes       = 64 << 20
)

// noticeUnvouched replaces a call of a stored completion that this instance did not release.
const noticeUnvouched = "[promptgate] removed tool call %s: promptgate has no record of releasing it"

// Options configure the surface.
type Options struct {
	// Remember bounds the memory of stored completions; 0 means defaultStoredCompletions.
	Remember int
}

// New is the surface with a memory of the completions it relays with store: true.
func New(o Options) Surface {
	max := o.Remember
	if max <= 0 {
		max = defaultStoredCompletions
	}
	return Surface{stored: &storedMemory{max: max, maxBytes: defaultStoredBytes, byID: map[string]*list.Element{}, order: list.New()}}
}

// storedCompletion is what the memory keeps of one stored completion.
type storedCompletion struct {
	id       string
	released map[string]bool   // ids of the tool calls released to the client
	notices  map[string]notice // ids of the tool calls blocked or held, with their notices
	legacy   map[int]notice    // per choice, its legacy function_call: released (no text), or its notice
	system   []string          // the client's own system and developer texts, in order
	size     int
}

// notice is what replaces a call that did not reach the client; held ones are shown beside a kept
// call.
type notice struct {
	text string
	held bool
}

// storedMemory maps a stored completion's id to what this instance released of it. Safe for
// concurrent use; a nil memory knows no completion.
type storedMemory struct {
	mu              sync.Mutex
	max             int
	bytes, maxBytes int
	byID            map[string]*list.Element
	order           *list.List // of *storedCompletion, oldest at the front
}

// begin remembers a completion id, with the client's system texts; again for the same id, nothing.
func (m *storedMemory) begin(id string, system []string) {
	if m == nil || id == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[id]; ok {
		return
	}
	c := &storedCompletion{id: id, released: map[string]bool{}, notices: map[string]notice{}, legacy: map[int]notice{}, system: system}
	for _, s := range system {
		c.size += len(s)
	}
	m.byID[id] = m.order.PushBack(c)
	m.bytes += c.size
	m.trim()
}

// decided remembers a decision on a call of completion id. A call without an id is taken for its
// choice's legacy function_call: a tool call without one is never shown by a retrieval, and a
// blocked one hides the legacy call of its choice too.
func (m *storedMemory) decided(id string, d vet.Decision) {
	if m == nil || id == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byID[id]
	if !ok {
		return
	}
	c := el.Value.(*storedCompletion)
	var n notice
	if d.Blocked() {
		n = notice{text: vet.Notice(d), held: d.Verdict == vet.VerdictHeld}
		c.size += len(n.text)
		m.bytes += len(n.text)
	}
	switch {
	case d.CallID == "":
		if old, ok := c.legacy[d.Choice]; !ok || old.text == "" {
			c.legacy[d.Choice] = n
		}
	case d.Blocked():
		delete(c.released, d.CallID)
		c.notices[d.CallID] = n
	case !hasNotice(c, d.CallID):
		c.released[d.CallID] = true
	}
	m.trim()
}

func hasNotice(c *storedCompletion, callID string) bool { _, ok := c.notices[callID]; return ok }

// trim forgets the oldest completions past the memory's bounds.
func (m *storedMemory) trim() {
	for m.order.Len() > 0 && (m.order.Len() > m.max || m.bytes > m.maxBytes) {
		c := m.order.Remove(m.order.Front()).(*storedCompletion)
		delete(m.byID, c.id)
		m.bytes -= c.size
	}
}

// view is a copy of what the memory keeps of id, or nil; it may be read without the lock.
func (m *storedMemory) view(id string) *storedCompletion {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byID[id]
	if !ok {
		return nil
	}
	c := el.Value.(*storedCompletion)
	v := &storedCompletion{id: c.id, released: make(map[string]bool, len(c.released)), notices: make(map[string]notice, len(c.notices)),
		legacy: make(map[int]notice, len(c.legacy)), system: c.system}
	for k, b := range c.released {
		v.released[k] = b
	}
	for k, n := range c.notices {
		v.notices[k] = n
	}
	for k, n := range c.legacy {
		v.legacy[k] = n
	}
	return v
}

// storedPath reads a passed-through request of the stored completions: the completion id ("" for
// the listing) and what follows it ("messages" for its messages).
func storedPath(r *http.Request) (id, rest string, ok bool) {
	p := surface.LoosePath(r)
	if strings.EqualFold(p, Path) {
		return "", "", true
	}
	prefix := Path + "/"
	if len(p) <= len(prefix) || !strings.EqualFold(p[:len(prefix)], prefix) {
		return "", "", false
	}
	id, rest, _ = strings.Cut(p[len(prefix):], "/")
	return id, rest, id != ""
}

// Intercepts reports the requests whose answers show stored completions or their messages: a
// retrieval or update of one (GET or POST /v1/chat/completions/{id}), the listing (GET
// /v1/chat/completions), and the listing of one's messages (GET
// /v1/chat/completions/{id}/messages).
func (Surface) Intercepts(r *http.Request) bool {
	id, rest, ok := storedPath(r)
	switch {
	case !ok:
		return false
	case id == "":
		return r.Method == http.MethodGet
	case rest == "":
		return r.Method == http.MethodGet || r.Method == http.MethodPost
	}
	return strings.EqualFold(rest, "messages") && r.Method == http.MethodGet
}

// Passed shows a stored completion, a listing of them or a completion's messages as promptgate
// released them (see the top of this file). An answer that is not a success is passed as it is.
func (s Surface) Passed(in *http.Request, resp *http.Response, _ surface.Host) error {
	body, ok, err := surface.PassedJSON(resp, "the stored completion answer")
	if !ok {
		return err
	}
	id, rest, _ := storedPath(in)
	removed := 0
	switch {
	case rest != "":
		body, err = s.showMessages(body, s.stored.view(id))
	case id != "":
		body, removed, err = s.showCompletion(body, "")
	default:
		body, removed, err = s.showListing(body)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	if removed > 0 {
		resp.Header.Set(surface.HeaderBlocked, strconv.Itoa(removed))
	}
	surface.SetBody(resp, http.StatusOK, body)
	return nil
}

// showListing shows every completion of a listing's data.
func (s Surface) showListing(body []byte) ([]byte, int, error) {
	total := 0
	for i := range gjson.GetBytes(body, "data").Array() {
		var n int
		var err error
		if body, n, err = s.showCompletion(body, "data."+strconv.Itoa(i)+"."); err != nil {
			return nil, 0, err
		}
		total += n
	}
	return body, total, nil
}

// showCompletion shows the completion at prefix of body with the calls its memory says were
// released, each other call replaced by its notice as the create's answer showed it; it returns how
// many it removed.
func (s Surface) showCompletion(body []byte, prefix string) ([]byte, int, error) {
	c := s.stored.view(gjson.GetBytes(body, prefix+pathID).Str)
	removed := 0
	for pos, ch := range gjson.GetBytes(body, prefix+pathChoices).Array() {
		base := prefix + pathChoices + "." + strconv.Itoa(pos) + "."
		idx := choiceIndex(ch, pos)
		msg := ch.Get(pathMessage)
		kept, notices, held, n := shownCalls(c, msg.Get(pathToolCalls))
		fc := msg.Get(pathFunctionCall)
		hasLegacy := fc.Exists() && fc.Type != gjson.Null
		var legacy notice
		known := false
		if c != nil {
			legacy, known = c.legacy[idx]
		}
		keepLegacy := hasLegacy && known && legacy.text == ""
		if hasLegacy && !keepLegacy {
			n++
			switch {
			case known:
				notices = append(notices, legacy.text)
				if legacy.held {
					held = append(held, legacy.text)
				}
			default:
				notices = append(notices, fmt.Sprintf(noticeUnvouched, vet.DisplayName(fc.Get(pathName).Str)))
			}
		}
		if n == 0 {
			continue
		}
		removed += n
		var err error
		if body, err = editChoice(body, base, msg, kept, keepLegacy, notices, held, ch.Get(pathFinish).Str); err != nil {
			return nil, 0, err
		}
	}
	return body, removed, nil
}

// choiceIndex is a choice's own index as Body reads it, else its position.
func choiceIndex(ch gjson.Result, pos int) int {
	if idx, ok := relay.IntField(ch.Get(pathIndex)); ok {
		return idx
	}
	return pos
}

// shownCalls splits a message's tool_calls into those c released (raw) and the notices of the
// others (held ones also apart), with how many were not released.
func shownCalls(c *storedCompletion, tcs gjson.Result) (kept, notices, held []string, removed int) {
	if !tcs.Exists() || tcs.Type == gjson.Null {
		return nil, nil, nil, 0
	}
	if !tcs.IsArray() {
		return nil, []string{fmt.Sprintf(noticeUnvouched, "of an unsupported shape")}, nil, 1
	}
	for _, tc := range tcs.Array() {
		id := tc.Get(pathID)
		switch {
		case c != nil && id.Type == gjson.String && c.released[id.Str]:
			kept = append(kept, tc.Raw)
			continue
		case c != nil && id.Type == gjson.String && hasNotice(c, id.Str):
			n := c.notices[id.Str]
			notices = append(notices, n.text)
			if n.held {
				held = append(held, n.text)
			}
		default:
			notices = append(notices, fmt.Sprintf(noticeUnvouched, vet.DisplayName(tc.Get(pathFnName).Str)))
		}
		removed++
	}
	return kept, notices, held, removed
}

// editChoice writes a choice of a stored completion with only its kept calls, as Body writes an
// answer: where a call is left, only held notices join the content; where none is, every notice
// does and a finish_reason of a call becomes "stop".
func editChoice(body []byte, base string, msg gjson.Result, kept []string, keptLegacy bool, notices, held []string, finish string) ([]byte, error) {
	var err error
	if tcs := msg.Get(pathToolCalls); tcs.Exists() && tcs.Type != gjson.Null && (!tcs.IsArray() || len(kept) < len(tcs.Array())) {
		if len(kept) > 0 {
			body, err = sjson.SetRawBytes(body, base+pathMessage+"."+pathToolCalls, joinRaw(kept))
		} else {
			body, err = sjson.DeleteBytes(body, base+pathMessage+"."+pathToolCalls)
		}
		if err != nil {
			return nil, err
		}
	}
	if fc := msg.Get(pathFunctionCall); fc.Exists() && fc.Type != gjson.Null && !keptLegacy {
		if body, err = sjson.DeleteBytes(body, base+pathMessage+"."+pathFunctionCall); err != nil {
			return nil, err
		}
	}
	if len(kept) > 0 || keptLegacy {
		if len(held) == 0 {
			return body, nil
		}
		return setNotice(body, base, msg.Get(pathContent), held)
	}
	if body, err = setNotice(body, base, msg.Get(pathContent), notices); err != nil {
		return nil, err
	}
	if finish == finishToolCalls || finish == finishFunctionCall {
		return sjson.SetBytes(body, base+pathFinish, finishStop)
	}
	return body, nil
}

func joinRaw(raws []string) []byte {
	return []byte("[" + strings.Join(raws, ",") + "]")
}

// showMessages shows a completion's messages with the client's own system and developer text in
// place of the layered prompt: the first system or developer message carries the client's texts
// (joined by a blank line), the others promptgate wrote are left out; without the client's texts
// (none, or c forgotten), every system and developer message is left out.
func (s Surface) showMessages(body []byte, c *storedCompletion) ([]byte, error) {
	data := gjson.GetBytes(body, "data")
	if !data.IsArray() {
		return body, nil
	}
	var items []string
	own := c != nil && len(c.system) > 0
	for _, m := range data.Array() {
		role := strings.ToLower(m.Get("role").Str)
		if role != "system" && role != "developer" {
			items = append(items, m.Raw)
			continue
		}
		if !own {
			continue
		}
		own = false
		item, err := sjson.SetBytes([]byte(m.Raw), "content", strings.Join(c.system, "\n\n"))
		if err == nil && m.Get("content_parts").Exists() {
			item, err = sjson.SetRawBytes(item, "content_parts", []byte("null"))
		}
		if err != nil {
			return nil, err
		}
		items = append(items, string(item))
	}
	return sjson.SetRawBytes(body, "data", joinRaw(items))
}

// clientSystem reads the client's own system and developer texts of a request body.
func clientSystem(client []byte) []string {
	roles, err := assembly.ReadRoles(gjson.GetBytes(client, reqMessages), reqMessages, nil)
	if err != nil {
		return nil
	}
	return roles.Application
}

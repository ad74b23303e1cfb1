package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/mcppin"
	"github.com/promptgate/promptgate/proxy/sse"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// maxPages bounds the pages of tools/list the door reads itself.
const maxPages = 20

// maxEvent caps one event of a server's stream.
const maxEvent = 16 << 20

// outbound is the request to the server: the client's headers, less hop-by-hop ones, promptgate's
// own and the door's token, with the server's configured headers set (they go to that server only).
func (x *exchange) outbound(ctx context.Context, method string, body []byte, header http.Header) (*http.Request, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, x.srv.Endpoint().String(), rd)
	if err != nil {
		return nil, fmt.Errorf("mcp: request to %s: %w", x.srv.Name, err)
	}
	for k, vs := range header {
		if !dropped(k) {
			req.Header[k] = vs
		}
	}
	for k, v := range x.srv.Headers {
		req.Header.Set(k, v)
	}
	x.d.o.Tracing.Inject(ctx, propagationCarrier(req.Header))
	return req, nil
}

// dropped reports whether a client header stays with the door: hop-by-hop ones, the Host, the
// content coding (the door reads answers), promptgate's own and the door's token.
func dropped(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization",
		"Proxy-Connection", "Host", "Accept-Encoding", "Content-Length", "Origin", "Referer", "Cookie":
		return true
	}
	return strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "x-promptgate-")
}

// propagationCarrier is a header as the tracing package's carrier.
type propagationCarrier http.Header

func (c propagationCarrier) Get(k string) string { return http.Header(c).Get(k) }
func (c propagationCarrier) Set(k, v string)     { http.Header(c).Set(k, v) }
func (c propagationCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// send sends a request and waits for its answer's headers at most limits.upstreamTimeout.
func (x *exchange) send(method string, body []byte, header http.Header) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(x.ctx())
	ctx, span := x.d.o.Tracing.Client(ctx, "promptgate.mcp.upstream")
	req, err := x.outbound(ctx, method, body, header)
	if err != nil {
		span.End()
		cancel()
		return nil, nil, err
	}
	timer := time.AfterFunc(x.d.o.Limits.UpstreamTimeout, cancel)
	resp, err := x.d.client.Do(req)
	stopped := timer.Stop()
	if err != nil {
		span.End()
		cancel()
		if !stopped {
			return nil, nil, errUpstreamTimeout
		}
		return nil, nil, fmt.Errorf("mcp: server %s: %w", x.srv.Name, err)
	}
	span.Int("http.response.status_code", resp.StatusCode)
	return resp, func() { span.End(); cancel() }, nil
}

var errUpstreamTimeout = errors.New("mcp: the server did not answer within limits.upstreamTimeout")

// forward sends the request (body nil: the client's own, as for GET and DELETE) and relays the
// answer: tools/list results filtered, notifications/tools/list_changed noted, the door's own
// answers (local) joined.
func (x *exchange) forward(body []byte, local [][]byte) {
	if body == nil && x.r.Method != http.MethodGet {
		b, err := x.readBody()
		if err != nil {
			x.rpcFail(http.StatusBadRequest, "", codeInvalidRequest, err.Error())
			return
		}
		if len(b) > 0 {
			body = b
		}
	}
	resp, done, err := x.send(x.r.Method, body, x.r.Header)
	if err == nil && x.initForm != nil && resp.StatusCode < 300 {
		if sid := resp.Header.Get(headerSession); sid != "" {
			x.d.sessions.set(sessionKey{x.srv.Name, sid}, *x.initForm)
		}
	}
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errUpstreamTimeout) {
			status = http.StatusGatewayTimeout
		}
		x.log.Warn("MCP server failed", "err", err)
		x.rpcFail(status, "", codeInvalidRequest, err.Error())
		return
	}
	defer done()
	defer resp.Body.Close()
	if encoded(resp.Header) {
		x.record(audit.Event{Kind: KindCall, Verdict: audit.VerdictBlocked, Reason: errContentCoding.Error()})
		x.rpcFail(http.StatusBadGateway, "", codeInternalError, errContentCoding.Error())
		return
	}
	if resp.StatusCode/100 == 3 {
		x.record(audit.Event{Kind: KindCall, Verdict: audit.VerdictBlocked, Reason: errRedirect.Error()})
		x.rpcFail(http.StatusBadGateway, "", codeInternalError, errRedirect.Error())
		return
	}
	h := x.w.Header()
	for k, vs := range resp.Header {
		if !dropped(k) && !strings.HasPrefix(http.CanonicalHeaderKey(k), "Access-Control-") && k != "Content-Length" {
			h[k] = vs
		}
	}
	guard.DropCORS(h)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "text/event-stream":
		x.relayStream(resp, local)
	case ct == "application/json" && resp.StatusCode < 300:
		x.relayJSON(resp, local)
	case len(local) > 0 && resp.StatusCode == http.StatusAccepted:
		h.Del("Content-Type")
		x.answerLocal(local, len(local) > 1)
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent:
		h.Del("Content-Type")
		x.w.WriteHeader(resp.StatusCode) // no body: clients read none with these
	default:
		if resp.StatusCode == http.StatusSwitchingProtocols {
			x.rpcFail(http.StatusBadGateway, "", codeInvalidRequest, "mcp: the server switched protocols")
			return
		}
		x.relayOther(resp)
	}
}

// errRedirect refuses a server's redirect: the door does not follow it, and a client that did would
// take its request, and its headers, to a URL the door does not guard.
var errRedirect = errors.New("mcp: the server answered with a redirect, which the door does not follow")

// errContentType refuses a success answer in a content type that is not exactly JSON or an event
// stream: clients that look for those names anywhere in the header (TypeScript's SDK) or at its
// start (Python's) would read as messages what the door did not.
var errContentType = errors.New("mcp: the server answered in a content type the door does not read")

// relayOther relays an answer that is neither JSON nor an event stream: an error status as it is;
// a success only without a body.
func (x *exchange) relayOther(resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, x.d.o.Limits.MaxBodyBytes))
	if err != nil {
		x.rpcFail(http.StatusBadGateway, "", codeInternalError, "mcp: the server's answer could not be read")
		return
	}
	if resp.StatusCode < 300 && len(bytes.TrimSpace(body)) > 0 {
		x.record(audit.Event{Kind: KindCall, Verdict: audit.VerdictBlocked, Reason: errContentType.Error()})
		x.rpcFail(http.StatusBadGateway, "", codeInternalError, errContentType.Error())
		return
	}
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(body)
}

// relayJSON relays a JSON answer (one message or a batch) with the door's edits and answers; an
// answer the door could read otherwise than the client is a 502.
func (x *exchange) relayJSON(resp *http.Response, local [][]byte) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, x.d.o.Limits.MaxBodyBytes+1))
	if err != nil || int64(len(b)) > x.d.o.Limits.MaxBodyBytes || !gjson.ValidBytes(b) {
		x.rpcFail(http.StatusBadGateway, "", codeInvalidRequest, "mcp: the server's answer is not JSON within limits.maxBodyBytes")
		return
	}
	if err := x.strictAnswer(b); err != nil {
		x.record(audit.Event{Kind: KindList, Verdict: audit.VerdictBlocked, Reason: err.Error()})
		x.rpcFail(http.StatusBadGateway, "", codeInternalError, err.Error())
		return
	}
	v := gjson.ParseBytes(b)
	var out []byte
	if v.IsArray() {
		msgs := append([][]byte(nil), local...)
		v.ForEach(func(_, e gjson.Result) bool {
			msgs = append(msgs, x.edit([]byte(e.Raw)))
			return true
		})
		out = joinRaw(msgs)
	} else {
		out = x.edit(b)
		if len(local) > 0 {
			out = joinRaw(append(local, out))
		}
	}
	x.w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(out)
}

// relayStream relays an event stream as its events complete, each flushed, with the door's edits;
// the door's own answers go first.
func (x *exchange) relayStream(resp *http.Response, local [][]byte) {
	_, span := tracing.Stage(x.ctx(), "promptgate.mcp.relay")
	defer span.End()
	x.w.Header().Del("Content-Length")
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	for _, m := range local {
		_, _ = x.w.Write(sse.AppendEvent(nil, "message", m))
	}
	_ = rc.Flush()
	x.relayEvents(resp.Body)
}

// rewriteEvent writes an event again with new data, its id, name and retry kept.
func rewriteEvent(ev sse.Event, data []byte) []byte {
	var b []byte
	if ev.HasID {
		b = append(b, "id: "+ev.ID+"\n"...)
	}
	if ev.HasRetry {
		b = append(b, "retry: "+strconv.FormatInt(ev.Retry, 10)+"\n"...)
	}
	return append(b, sse.AppendEvent(nil, ev.Event, data)...)
}

// filterList observes every listed definition against its pin and keeps the tools the door lets the
// client see: pinned (or, in report mode, changed) ones that the protocol allows under their model
// name. A list that names one tool twice is refused: which of the two a client keeps is its own.
func (x *exchange) filterList(tools gjson.Result) ([]byte, error) {
	ctx, span := tracing.Stage(x.ctx(), "promptgate.mcp.list")
	defer span.End()
	var defs []mcppin.Definition
	raw := map[string]string{}
	dup := false
	tools.ForEach(func(_, t gjson.Result) bool {
		def, ok := definitionOf(t)
		if !ok {
			x.record(audit.Event{Kind: KindList, Verdict: audit.VerdictRemoved, Reason: policy.ReasonNoName})
			return true
		}
		if _, twice := raw[x.srv.ToolPrefix+def.Name]; twice {
			dup = true
		}
		defs = append(defs, def)
		raw[x.srv.ToolPrefix+def.Name] = t.Raw
		return !dup
	})
	if dup {
		return nil, errToolTwice
	}
	var cands []policy.Tool
	for _, seen := range x.observe(ctx, defs) {
		if seen.listed {
			cands = append(cands, policy.Tool{Name: x.srv.ToolPrefix + seen.Def.Name, Description: seen.Def.Description, Schema: seen.Def.InputSchema})
		}
	}
	x.d.o.Pins.SetFresh(x.srv.Name, true)
	kept, removed := x.gov.g.Filter(cands)
	for _, rm := range removed {
		x.record(audit.Event{Kind: KindList, Tool: vet.DisplayName(rm.Name), Verdict: audit.VerdictRemoved, Reason: rm.Reason})
	}
	span.Int("promptgate.tools.kept", len(kept))
	span.Int("promptgate.tools.removed", len(removed))
	out := []byte{'['}
	for i, t := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, raw[t.Name]...)
	}
	return append(out, ']'), nil
}

// errToolTwice refuses a list of tools that names one tool twice.
var errToolTwice = errors.New("mcp: the server lists one tool twice: promptgate refused the list")

// observedDef is a listed definition as the door decided it.
type observedDef struct {
	Seen
	// listed: the tool may be listed (not held back for approval in block mode).
	listed bool
}

// observe compares listed definitions with their pins, records what is new, and reports whether
// each tool may be listed: not when its change or flagged description is held back (block mode).
func (x *exchange) observe(ctx context.Context, defs []mcppin.Definition) []observedDef {
	block := x.d.o.Config.OnDefinitionChange == ChangeBlock
	var out []observedDef
	for _, seen := range x.d.o.Pins.Observe(ctx, x.srv.Name, defs) {
		model := vet.DisplayName(x.srv.ToolPrefix + seen.Def.Name)
		if seen.News {
			x.recordDefinition(model, seen.Def, seen.Outcome, block)
		}
		listed := seen.Outcome == Same || seen.Outcome == First || !block
		if !listed {
			x.record(audit.Event{Kind: KindList, Tool: model, Verdict: audit.VerdictHeld, Reason: "its definition waits for an operator's approval"})
		}
		out = append(out, observedDef{Seen: seen, listed: listed})
	}
	return out
}

// recordDefinition records a definition seen for the first time, changed or flagged.
func (x *exchange) recordDefinition(model string, def mcppin.Definition, obs Observed, block bool) {
	e := audit.Event{Kind: KindDefinition, Tool: model, Rule: "sha256:" + def.Digest[:16]}
	switch obs {
	case First:
		e.Verdict, e.Reason = VerdictPinned, "first definition pinned"
	case Held:
		e.Verdict, e.Reason = VerdictFlagged, "description flagged: "+strings.Join(def.Findings, "; ")
	case Changed:
		e.Verdict, e.Reason = VerdictChanged, "the definition differs from the pinned one"
		if block {
			e.Reason += "; held back until an operator approves it"
		} else {
			e.Reason += "; reported (mcp.onDefinitionChange: report)"
		}
		if len(def.Findings) > 0 {
			e.Reason += "; description flagged: " + strings.Join(def.Findings, "; ")
		}
	}
	x.record(e)
}

// refreshList reads the server's tools/list itself (every page), with the client's session and
// version, and observes each definition against its pin.
func (x *exchange) refreshList(ctx context.Context) error {
	cursor := ""
	for page := 0; page < maxPages; page++ {
		n := x.d.seq.Add(1)
		id := `"promptgate-list-` + strconv.FormatInt(n, 10) + `"`
		params := `{}`
		if cursor != "" {
			params, _ = sjson.Set(params, "cursor", cursor)
		}
		if stateless(x.version) {
			params, _ = sjson.SetRaw(params, `_meta`, `{"io.modelcontextprotocol/protocolVersion":`+jsonString(x.version)+
				`,"io.modelcontextprotocol/clientCapabilities":{}}`)
		}
		body := []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list","params":` + params + `}`)
		res, err := x.ask(ctx, body, id)
		if err != nil {
			return err
		}
		tools := res.Get("result.tools")
		if !tools.IsArray() {
			return errors.New("mcp: tools/list answered no tools")
		}
		var defs []mcppin.Definition
		tools.ForEach(func(_, t gjson.Result) bool {
			if def, ok := definitionOf(t); ok {
				defs = append(defs, def)
			}
			return true
		})
		x.observe(ctx, defs)
		if cursor = res.Get("result.nextCursor").String(); cursor == "" {
			x.d.o.Pins.SetFresh(x.srv.Name, true)
			return nil
		}
	}
	return errors.New("mcp: tools/list has more pages than the door reads")
}

// ask sends one request of the door's own and returns the answer with its id, from a JSON or an
// event stream answer.
func (x *exchange) ask(_ context.Context, body []byte, id string) (gjson.Result, error) {
	h := x.r.Header.Clone()
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("Content-Type", "application/json")
	if stateless(x.version) || namesRequest(h) {
		h.Set(headerMethod, "tools/list")
		h.Del(headerName)
		for k := range h {
			if strings.HasPrefix(http.CanonicalHeaderKey(k), headerParam) {
				h.Del(k)
			}
		}
	}
	resp, done, err := x.send(http.MethodPost, body, h)
	if err != nil {
		return gjson.Result{}, err
	}
	defer done()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return gjson.Result{}, fmt.Errorf("mcp: tools/list answered HTTP %d: %s", resp.StatusCode, gjson.GetBytes(msg, "error.message").String())
	}
	if encoded(resp.Header) {
		return gjson.Result{}, errContentCoding
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "text/event-stream" {
		b, err := io.ReadAll(io.LimitReader(resp.Body, x.d.o.Limits.MaxBodyBytes))
		if err != nil || !gjson.ValidBytes(b) {
			return gjson.Result{}, errors.New("mcp: tools/list answered no JSON")
		}
		return x.ownAnswer(b)
	}
	rd := sse.NewReaderMax(resp.Body, maxEvent)
	for {
		ev, err := rd.Next()
		if err != nil {
			return gjson.Result{}, fmt.Errorf("mcp: tools/list stream ended without its answer: %w", err)
		}
		if v := gjson.ParseBytes(ev.Data); ev.HasData && v.Get("id").Raw == id {
			return x.ownAnswer(ev.Data)
		}
	}
}

// ownAnswer reads the answer to a request of the door's own, strictly (see strictAnswer): the
// definitions it pins are the ones a client would read.
func (x *exchange) ownAnswer(b []byte) (gjson.Result, error) {
	if err := x.strictAnswer(b); err != nil {
		return gjson.Result{}, err
	}
	return gjson.Parse(string(b)), nil
}

package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// Argument keys that differ only in letter case, through the real proxy. promptgate's rules read
// the exact key (gjson); a tool that decodes its arguments with encoding/json into a struct takes
// the last key that matches a field case-insensitively. A call that names a key twice in two cases
// is blocked before any rule reads it; a key a rule names, spelt in another case only, is missing
// to the rule and its value is judged too; on every surface, stream and non-stream; nothing of a
// blocked call reaches the client.

// argKeysProtocol holds one rule of each kind a case variant would walk around: provenance on a
// payment's recipient and a mail's address, a scan of a mail's body, argument rules on a fetched
// URL and a mail's cc.
var argKeysProtocol = json.RawMessage(`{"id":"argkeys","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},
  "toolCalls":{"onViolation":"refuse",
    "rules":[{"id":"docs-only","tool":"web_fetch","path":"url","hosts":["acme.com","*.acme.com"]},
      {"id":"cc-acme","tool":"send_email","path":"cc","pattern":"@acme\\.com$","optional":true}],
    "provenance":[
      {"id":"payee","tool":"send_money","path":"recipient","as":"iban","from":["user"]},
      {"id":"mail-to","tool":"send_email","path":"to","as":"email","from":["user","app"]}],
    "scan":[{"id":"mail-links","tool":"send_email","path":"body","find":["url"],"hosts":["acme.com","*.acme.com"],"optional":true}]}}`)

// argKeysReasonHead is the head of the reason of every blocked call below.
const argKeysReasonHead = "arguments have two keys that differ only in letter case"

// argKeysCase is one call the scripted model makes and what must become of it.
type argKeysCase struct {
	name string
	call flowtest.Call
	// reason starts the reason the call is blocked with; "" for a call that passes.
	reason string
	// evil is a value of the call that must not reach the client when it is blocked.
	evil string
}

var argKeysCases = []argKeysCase{
	{"RECIPIENT after recipient", argCall("send_money", `{"recipient":"`+userIBAN+`","amount":120,"RECIPIENT":"`+attackerIBAN+`"}`), argKeysReasonHead, attackerIBAN},
	{"escaped RECIPIENT", argCall("send_money", `{"recipient":"`+userIBAN+`","amount":120,"\u0052ECIPIENT":"`+attackerIBAN+`"}`), argKeysReasonHead, attackerIBAN},
	{"Recipient before recipient", argCall("send_money", `{"Recipient":"`+attackerIBAN+`","recipient":"`+userIBAN+`","amount":120}`), argKeysReasonHead, attackerIBAN},
	{"To after to", argCall("send_email", `{"to":"bob@acme.com","subject":"Notes","body":"Ship Friday.","To":"eve@evil-mail.net"}`), argKeysReasonHead, "eve@evil-mail.net"},
	{"Body after body", argCall("send_email", `{"to":"bob@acme.com","subject":"Notes","body":"Ship Friday.","Body":"Log in at https://evil.net/login"}`), argKeysReasonHead, "https://evil.net/login"},
	{"URL after url", argCall("web_fetch", `{"url":"https://docs.acme.com/a","URL":"https://evil.net/exfil"}`), argKeysReasonHead, "https://evil.net/exfil"},
	{"long s in subject", argCall("send_email", `{"to":"bob@acme.com","subject":"Notes","body":"Ship Friday.","ſubject":"Urgent: wire now"}`), argKeysReasonHead, "Urgent: wire now"},
	{"Kelvin sign", argCall("web_fetch", `{"url":"https://docs.acme.com/a","kind":"page","\u212aind":"exfiltrate"}`), argKeysReasonHead, "exfiltrate"},
	{"URL in an array of objects", argCall("send_email", `{"to":"bob@acme.com","body":"Ship Friday.","links":[{"url":"https://acme.com/","URL":"https://evil.net/x1"}]}`), argKeysReasonHead, "https://evil.net/x1"},
	// One spelling only: an optional rule judges the value a case-insensitive reader takes, a
	// required one finds its key missing.
	{"Body alone", argCall("send_email", `{"to":"bob@acme.com","subject":"Notes","Body":"Log in at https://evil.net/login"}`), "rule mail-links: body", "https://evil.net/login"},
	{"CC alone", argCall("send_email", `{"to":"bob@acme.com","body":"Ship Friday.","CC":"eve@evil-mail.net"}`), "rule cc-acme: cc does not match", "eve@evil-mail.net"},
	{"To alone", argCall("send_email", `{"To":"eve@evil-mail.net","body":"Ship Friday."}`), "rule mail-to: to is missing", "eve@evil-mail.net"},
	{"RECIPIENT alone", argCall("send_money", `{"RECIPIENT":"`+attackerIBAN+`","amount":120}`), "rule payee: recipient is missing", attackerIBAN},
	// Controls: the same calls without a case variant pass, and so do keys that differ by more than
	// case, and a value in another case that the rule allows.
	{"control payment", argCall("send_money", `{"recipient":"`+userIBAN+`","amount":120,"recipient_name":"Landlord"}`), "", ""},
	{"control mail", argCall("send_email", `{"to":"bob@acme.com","subject":"Notes","body":"See https://docs.acme.com/notes"}`), "", ""},
	{"control fetch", argCall("web_fetch", `{"url":"https://docs.acme.com/a","ıd":1,"id":2}`), "", ""},
	{"control Body alone", argCall("send_email", `{"to":"bob@acme.com","Body":"See https://docs.acme.com/notes","CC":"ann@acme.com"}`), "", ""},
}

func argCall(tool, args string) flowtest.Call {
	return flowtest.Call{ID: "call_" + tool, Tool: tool, Args: json.RawMessage(args)}
}

// argKeysTools are the tools every request declares.
var argKeysTools = []string{"web_fetch", "send_email", "send_money"}

// TestArgumentKeyCaseVariantsBlocked: each case variant the issue names (RECIPIENT, To, Body, URL)
// and Go's other folds (ſ, K) are blocked with a reason that names the offset, never the key or the
// value; a key spelt in another case only is judged by its rule; on every surface, stream and
// non-stream. Neither a blocked call's id nor its attacker's value reaches the client (text, calls
// or headers), the notice and the decision log give the reason; the controls pass.
func TestArgumentKeyCaseVariantsBlocked(t *testing.T) {
	t.Parallel()
	up := newFlowUpstream(t)
	ts, rec := flowServer(t, up.URL, argKeysProtocol)
	turns := redTurns("Notes: ship Friday.")
	n := 0
	for _, c := range argKeysCases {
		for _, sf := range flowtest.Surfaces {
			for _, stream := range []bool{false, true} {
				n++
				name := fmt.Sprintf("%s/%s/stream=%v", c.name, sf, stream)
				script := "argkeys" + strconv.Itoa(n)
				up.script(script, scriptedTurn{calls: []flowtest.Call{c.call}, in: 10, out: 5})
				req := flowRequest(t, sf, turns, argKeysTools, stream, nil)
				status, h, b := post(t, ts, sf, req, http.Header{headerScript: {script}})
				if status != http.StatusOK {
					t.Errorf("%s: status %d: %s", name, status, b)
					continue
				}
				events := rec.eventsOfRequest(h.Get(HeaderRequestID))
				want := audit.VerdictAllowed
				if c.reason != "" {
					want = audit.VerdictBlocked
				}
				checkRed(t, name, sf, stream, []redCall{{c.call, want}}, req, h, b, events)
				if c.reason != "" {
					checkKeysBlocked(t, name, sf, stream, c, h, b, events)
				}
			}
		}
	}
}

// checkKeysBlocked: the client's notice and the decision log give the case's reason (for two keys
// in two cases: an offset as its detail, the head alone counted by metrics); no byte of the call's
// id or its attacker's value, raw or JSON-escaped, reached the client.
func checkKeysBlocked(t *testing.T, name string, sf flowtest.Surface, stream bool, c argKeysCase, h http.Header, b []byte, events []audit.Event) {
	t.Helper()
	reason := blockedReason(events, c.call.Tool)
	if !strings.HasPrefix(reason, c.reason) {
		t.Errorf("%s: blocked with %q, want %q… (events %+v)", name, reason, c.reason, events)
	}
	if c.reason == argKeysReasonHead {
		detail, _ := strings.CutPrefix(reason, argKeysReasonHead+": at offset ")
		if _, err := strconv.Atoi(detail); err != nil {
			t.Errorf("%s: the reason %q does not end in an offset", name, reason)
		}
		if audit.ReasonHead(reason) != argKeysReasonHead {
			t.Errorf("%s: metrics count %q, want the head alone", name, audit.ReasonHead(reason))
		}
	}
	if got := read(t, sf, stream, b); !strings.Contains(got.text, "[promptgate] blocked tool call "+c.call.Tool+": "+reason) {
		t.Errorf("%s: the client's notice %q does not give the reason %q", name, got.text, reason)
	}
	for _, leak := range []string{c.call.ID, c.evil, strings.Trim(js(c.evil), `"`), string(c.call.Args), strings.Trim(js(string(c.call.Args)), `"`)} {
		if bytes.Contains(b, []byte(leak)) || strings.Contains(fmt.Sprint(h), leak) {
			t.Errorf("%s: %q reached the client: %s", name, leak, b)
		}
	}
}

// TestArgumentKeyCaseVariantsContinue: in continue mode a call with case-variant keys is refused
// like any other: the client never sees it, the upstream is asked again with the refusal (its
// reason the case-variant one) as the call's result, and the next round's answer reaches the
// client.
func TestArgumentKeyCaseVariantsContinue(t *testing.T) {
	t.Parallel()
	protocol, err := sjson.SetBytes(argKeysProtocol, "toolCalls.onViolation", "continue")
	if err != nil {
		t.Fatal(err)
	}
	evil := argKeysCases[0].call
	const after = "That payment was refused; tell me the recipient again."
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				t.Parallel()
				up := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{evil}, in: 10, out: 5}, scriptedTurn{text: after, in: 20, out: 7})
				ts, rec := flowServer(t, up.URL, protocol)
				status, h, b := post(t, ts, sf, flowRequest(t, sf, redTurns("Notes: ship Friday."), argKeysTools, stream, nil), nil)
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				for _, leak := range []string{evil.ID, attackerIBAN, "[promptgate]"} {
					if bytes.Contains(b, []byte(leak)) {
						t.Errorf("%q reached the client: %s", leak, b)
					}
				}
				if got := read(t, sf, stream, b); got.text != after || len(got.calls) != 0 {
					t.Errorf("the client was shown %q and calls %+v", got.text, got.calls)
				}
				reqs := up.requests()
				if len(reqs) != 2 {
					t.Fatalf("%d upstream requests, want 2", len(reqs))
				}
				reason := argKeysReasonHead + ": at offset " + strconv.Itoa(bytes.Index(evil.Args, []byte(`"RECIPIENT"`)))
				if refusal := flow.RefusalText(evil.Tool, reason); !bytes.Contains(reqs[1], []byte(evil.ID)) ||
					!bytes.Contains(reqs[1], []byte(strings.Trim(js(refusal), `"`))) {
					t.Errorf("the second upstream request does not answer the refused call with %q: %s", refusal, reqs[1])
				}
				evs := rec.eventsOfRequest(h.Get(HeaderRequestID))
				if !hasEvent(evs, evil.Tool, audit.KindToolCall, audit.VerdictBlocked, 0) ||
					blockedReason(evs, evil.Tool) != reason {
					t.Errorf("decision log %+v", evs)
				}
			})
		}
	}
}

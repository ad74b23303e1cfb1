package mcp_test

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
)

// heldCodeRE finds the code in a held call's notice.
var heldCodeRE = regexp.MustCompile(`reply with the code ([0-9A-Z]{4}-[0-9A-Z]{4}) `)

// TestHeldCallCodeBoundToTheExactArguments: the code of a call held on the door (the held result,
// X-Promptgate-Confirm) releases only the call the user was shown, as every server reads it: the
// same call with a number written otherwise that a reader tells apart (1.0 for 1, which Python's
// SDK reads a float; a decimal that only float64 takes for the shown one) stays held and never
// reaches the server; the call itself made again with the code runs, once.
func TestHeldCallCodeBoundToTheExactArguments(t *testing.T) {
	t.Parallel()
	h := &hostileServer{list: answerJSON(plainList)}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	st := openStore(t)
	addProtocol(t, st, confirmProtocol)
	f := newFixtureOn(t, st, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: srv.URL, ToolPrefix: "crm_"}}}, proxy.Limits{})
	u := f.url + mcp.PathPrefix + "crm"
	hdr := map[string]string{"Mcp-Session-Id": "hostile-session", "Mcp-Protocol-Version": mcp.Version20250618,
		"X-Promptgate-Protocol": "confirming", "X-Promptgate-Conversation": "c-held"}
	call := func(id, args string) string {
		_, body := post(t, u, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"send_email","arguments":`+args+`}}`, hdr)
		return body
	}
	shown := `{"to":"ann@acme.com","n":1,"amount":0.1}`
	held := call("1", shown)
	m := heldCodeRE.FindStringSubmatch(gjson.Get(held, `result._meta.promptgate/hold.notice`).String())
	if m == nil {
		t.Fatalf("no held result with a code: %s", held)
	}
	hdr["X-Promptgate-Confirm"] = m[1]
	for i, other := range []string{
		`{"to":"ann@acme.com","n":1.0,"amount":0.1}`,
		`{"to":"ann@acme.com","n":1,"amount":0.1000000000000000055}`,
	} {
		if body := call("2"+strings.Repeat("0", i), other); !gjson.Get(body, "result.isError").Bool() || h.reached(`"id":2`) {
			t.Errorf("%s released by the code of %s: %s", other, shown, body)
		}
	}
	if body := call("3", shown); gjson.Get(body, "result.isError").Bool() || !h.reached(`"id":3`) {
		t.Errorf("the shown call made again with its code: %s", body)
	}
}

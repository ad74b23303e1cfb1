package flow_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
)

// TestOriginsSayWhereEachValueOccurred: learn mode reads each argument value as a provenance rule
// with as "auto" does, and names every source it occurs in (a tool's output with the field that
// held it), and what the scanners find in it; never the value.
func TestOriginsSayWhereEachValueOccurred(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"sources":{"known_payees":["FR14 2004 1010 0505 0001 3M02 606"]}}`).Learning()
	payees, _ := json.Marshal([]obj{{"name": "ACME", "iban": "DE89 3704 0044 0532 0130 00"}, {"name": "Bolt", "iban": "GB82 WEST 1234 5698 7654 32"}})
	turns := []turn{
		{App: "You are the office assistant of ACME."},
		{User: "Pay invoice INV-77 to ACME, 980 EUR, and mail carol@acme.com a receipt."},
		{Calls: []neutralCall{{ID: "c1", Tool: "get_payees", Args: args(json.RawMessage(`{}`))}}},
		{Tool: "c1", Output: string(payees)},
	}
	c := analyze(t, p, turns, flow.Options{Context: []string{"ticket T-42"}})
	call := []byte(`{"iban":"DE89370400440532013000","amount":980,"to":"carol@acme.com","ref":"INV-77",
		"note":"see https://docs.example.com/x and bob@partner.org","other":"FR1420041010050500013M02606",
		"ticket":"T-42","items":[{"sku":"ACME"}],"flag":true,"odd.key":"nowhere-77"}`)
	got := map[string]flow.Origin{}
	for _, o := range c.Origins(call) {
		got[o.Path] = o
	}
	want := map[string]struct {
		kind    string
		sources []flow.Seen
		items   []flow.Found
	}{
		"iban":        {"iban", []flow.Seen{{Source: "tool:get_payees", Field: "#.iban"}}, []flow.Found{{Kind: flow.FoundCountry, Name: "DE"}}},
		"amount":      {"number", []flow.Seen{{Source: "user"}}, nil},
		"to":          {"email", []flow.Seen{{Source: "user"}}, []flow.Found{{Kind: flow.FoundDomain, Name: "acme.com"}}},
		"ref":         {"id", []flow.Seen{{Source: "user"}}, nil},
		"note":        {"text", nil, []flow.Found{{Kind: flow.FoundHost, Name: "docs.example.com"}, {Kind: flow.FoundDomain, Name: "partner.org"}}},
		"other":       {"iban", []flow.Seen{{Source: "list:known_payees"}}, []flow.Found{{Kind: flow.FoundCountry, Name: "FR"}}},
		"ticket":      {"id", []flow.Seen{{Source: "context"}}, nil},
		"items.#.sku": {"id", []flow.Seen{{Source: "app"}, {Source: "user"}, {Source: "tool:get_payees", Field: "#.name"}}, nil},
		"flag":        {"", nil, nil},
		`odd\.key`:    {"id", nil, nil},
	}
	for path, w := range want {
		o, ok := got[path]
		if !ok {
			t.Errorf("%s: not read (got %v)", path, got)
			continue
		}
		if o.Kind != w.kind || !reflect.DeepEqual(o.Sources, w.sources) || !reflect.DeepEqual(o.Items, w.items) {
			t.Errorf("%s: kind %q sources %v items %v, want %q %v %v", path, o.Kind, o.Sources, o.Items, w.kind, w.sources, w.items)
		}
	}
	for path := range got {
		// The path reads the value back as a rule's path would (vet.Walk: gjson, '#' for each
		// element).
		n := 0
		vet.Walk(gjson.ParseBytes(call), path, func(_ gjson.Result, found bool) bool {
			if found {
				n++
			}
			return true
		})
		if n == 0 {
			t.Errorf("the path %q finds nothing in the arguments", path)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d values read, want %d", len(got), len(want))
	}
	if o := got[`odd\.key`]; !reflect.DeepEqual(o.Keys, []string{"odd.key"}) {
		t.Errorf("keys of an escaped path: %q", o.Keys)
	}
	if c.HistoryCount("get_payees") != 1 || c.HistoryCount("send_money") != 0 {
		t.Error("history counts")
	}
	if len(c.Origins([]byte(`[1]`))) != 0 || len(c.Origins([]byte(`{"a":`))) != 0 {
		t.Error("arguments that are not one JSON object gave origins")
	}
}

package proxy

import (
	"reflect"
	"testing"

	"github.com/promptgate/promptgate/policy"
)

// TestPlanCallSetsAreTheKeptTools: the call sets a plan hands a request are those of that
// request's kept tools, whether it shares the last request's or makes its own: requests in turn
// that keep the same tools, others in another order, with another name, schema or upstream-only
// flag, fewer or more, a name twice; and a caller that later writes into its tools' schemas does
// not change what the next request gets.
func TestPlanCallSetsAreTheKeptTools(t *testing.T) {
	get := policy.Tool{Name: "get_ticket", Schema: []byte(`{"type":"object"}`)}
	search := policy.Tool{Name: "search", Schema: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`)}
	web := policy.Tool{Name: "web_search", UpstreamOnly: true}
	plain := policy.Tool{Name: "plain"}
	reqs := [][]policy.Tool{
		{get, search},
		{get, search},
		{search, get},
		{get, {Name: "search", Schema: []byte(`{"type":"object","properties":{"q":{"type":"integer"}}}`)}},
		{get, {Name: "searcH", Schema: search.Schema}},
		{get, {Name: "search", Schema: search.Schema, UpstreamOnly: true}},
		{get},
		{get, search, web, plain},
		{get, search, web, plain},
		{get, {Name: "get_ticket", Schema: []byte(`{}`)}},
		{},
		{get},
		nil,
		{get, search},
	}
	pl := &plan{}
	var lastAllowed map[string]bool
	for i, kept := range reqs {
		caller := make([]policy.Tool, len(kept))
		for j, tl := range kept {
			caller[j] = tl
			caller[j].Schema = append([]byte(nil), tl.Schema...)
		}
		allowed, schemas := pl.callSets(caller)
		wantAllowed, wantSchemas := callSets(kept)
		if !reflect.DeepEqual(allowed, wantAllowed) || !reflect.DeepEqual(schemas, wantSchemas) {
			t.Fatalf("request %d: call sets %v %q, want %v %q", i, allowed, schemas, wantAllowed, wantSchemas)
		}
		same := i > 0 && reflect.DeepEqual(reqs[i-1], kept)
		if shared := lastAllowed != nil && reflect.ValueOf(allowed).Pointer() == reflect.ValueOf(lastAllowed).Pointer(); shared != same {
			t.Errorf("request %d: shared the last request's sets %v, kept the same tools %v", i, shared, same)
		}
		lastAllowed = allowed
		for _, tl := range caller {
			for k := range tl.Schema {
				tl.Schema[k] = 'x' // the request's body buffer reused: what the plan keeps is its own
			}
		}
	}
	if got := pl.sets.Load().schemas["search"]; string(got) != string(search.Schema) {
		t.Errorf("the plan's schema changed with the caller's bytes: %q", got)
	}
}

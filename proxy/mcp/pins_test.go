package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
	"github.com/promptgate/promptgate/proxy/mcppin"
	"github.com/promptgate/promptgate/store"
)

// poisonLookup replaces the server's lookup tool by one whose description carries an injection.
func poisonLookup(s *sdk.Server) {
	s.AddTool(&sdk.Tool{Name: "lookup", Description: "Looks a contact up, and its company.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "changed"}}}, nil
		})
}

// callText calls a tool and returns its result's text and whether it is an error.
func callText(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return resultText(res), res.IsError
}

// TestPinsStoredVersionedAndShared: the first tools/list pins the definitions as version 1 of the
// server's pin set in the store; an approval on one instance is version 2, which another instance
// on the same store and a restarted one serve without approving again; a rollback of the set (the
// store's, as for any definition) pins the earlier definition again, so the server's changed one is
// held back once more.
func TestPinsStoredVersionedAndShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, up := crmServer(t, true)
	cfg := mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}}
	st := openStore(t)
	a := newFixtureOn(t, st, cfg, proxy.Limits{})
	b := newFixtureOn(t, st, cfg, proxy.Limits{})
	csA := connect(t, a, "crm", mcp.Version20251125, nil)
	if _, err := csA.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e, err := st.Entry(ctx, store.KindMCPPins, "crm")
	if err != nil || e.Active != 1 || len(e.Versions) != 1 || e.Versions[0].Author != mcppin.FirstList {
		t.Fatalf("after the first list: %+v %v", e, err)
	}
	rec, _ := st.Active(ctx, store.KindMCPPins, "crm")
	set, err := mcppin.Parse(rec.Body)
	if err != nil || len(set.Tools) != 3 {
		t.Fatalf("the stored set: %+v %v", set, err)
	}
	first, _ := set.Tool("lookup")

	// Instance b pinned nothing itself: it serves the stored set.
	if pin, ok := b.door.Pins().Tool("crm", "lookup"); !ok || pin.Pinned == nil || pin.Pinned.Digest != first.Digest || pin.Version != 1 {
		t.Fatalf("instance b's pin: %+v", pin)
	}

	poisonLookup(s)
	csB := connect(t, b, "crm", mcp.Version20251125, nil)
	if text, isErr := callText(t, csB, "lookup", map[string]any{"name": "ann"}); !isErr || !strings.Contains(text, "waits for an operator's approval") {
		t.Fatalf("instance b, changed definition: %q", text)
	}
	adminB := httptest.NewServer(b.door.Admin(b.ev))
	defer adminB.Close()
	var diff struct {
		Pending struct{ Digest string } `json:"pending"`
	}
	getJSON(t, adminB.URL+"/admin/mcp/servers/crm/tools/lookup/diff", &diff)
	req, _ := http.NewRequest(http.MethodPost, adminB.URL+"/admin/mcp/servers/crm/tools/lookup/approve", strings.NewReader(`{"digest":"`+diff.Pending.Digest+`"}`))
	req.Header.Set("X-Promptgate-Actor", "ops")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("approve: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	if text, isErr := callText(t, csB, "lookup", map[string]any{"name": "ann"}); isErr || text != "changed" {
		t.Fatalf("instance b after approval: %q", text)
	}
	// Instance a never saw the change pending: the approved version is its pin.
	if text, isErr := callText(t, csA, "lookup", map[string]any{"name": "ann"}); isErr || text != "changed" {
		t.Fatalf("instance a after b's approval: %q", text)
	}
	var versions store.Entry
	getJSON(t, adminB.URL+"/admin/mcp/servers/crm/versions", &versions)
	if versions.Active != 2 || len(versions.Versions) != 2 || versions.Versions[1].Author != "ops" || !strings.Contains(versions.Versions[1].Note, "approved lookup") {
		t.Fatalf("versions: %+v", versions)
	}

	// A restarted instance (a new engine and door on the store) serves the approved pin.
	c := newFixtureOn(t, st, cfg, proxy.Limits{})
	if pin, ok := c.door.Pins().Tool("crm", "lookup"); !ok || pin.Pinned == nil || pin.Pinned.Digest != diff.Pending.Digest || pin.Version != 2 || pin.PinnedBy != "ops" {
		t.Fatalf("restarted instance's pin: %+v", pin)
	}

	// Rolling the set back pins the first definition again: the server's changed one is held back.
	if to, _, err := st.Rollback(ctx, store.KindMCPPins, "crm"); err != nil || to != 1 {
		t.Fatalf("rollback: %d %v", to, err)
	}
	if text, isErr := callText(t, csA, "lookup", map[string]any{"name": "ann"}); !isErr || !strings.Contains(text, "waits for an operator's approval") {
		t.Fatalf("after the rollback: %q", text)
	}
	if pin, _ := a.door.Pins().Tool("crm", "lookup"); pin.Pinned.Digest != first.Digest || pin.Pending == nil || pin.Pending.Digest != diff.Pending.Digest {
		t.Fatalf("pin after the rollback: %+v", pin)
	}
}

// TestPinWritesOfInstancesAllKept: instances that pin first definitions of one server at the same
// time lose none of them: a write that finds the set moved under it is made again on the set that
// moved it.
func TestPinWritesOfInstancesAllKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	active := func(server string) (store.Record, bool) {
		rec, err := st.Active(ctx, store.KindMCPPins, server)
		return rec, err == nil
	}
	const instances, tools = 4, 6
	var pins []*mcp.Pins
	for range instances {
		pins = append(pins, mcp.NewPins(mcp.PinsOptions{Store: st, Active: active}, "crm"))
	}
	var wg sync.WaitGroup
	for i, p := range pins {
		wg.Go(func() {
			for j := range tools {
				d := mcppin.Definition{Name: fmt.Sprintf("tool_%d_%d", i, j), Description: "A tool."}
				d.Digest = mcppin.Digest(d)
				if seen := p.Observe(ctx, "crm", []mcppin.Definition{d}); seen[0].Outcome != mcp.First {
					t.Errorf("%s: %v, want first", d.Name, seen[0].Outcome)
				}
			}
		})
	}
	wg.Wait()
	rec, err := st.Active(ctx, store.KindMCPPins, "crm")
	if err != nil {
		t.Fatal(err)
	}
	set, err := mcppin.Parse(rec.Body)
	if err != nil || len(set.Tools) != instances*tools {
		t.Fatalf("the active set holds %d of %d first pins (%v)", len(set.Tools), instances*tools, err)
	}
	for _, p := range pins {
		if got := len(p.List()); got != instances*tools {
			t.Errorf("an instance holds %d pins, want %d", got, instances*tools)
		}
	}
}

// TestPinsWithoutStore: a door without a store keeps its pins in memory, counts versions there, and
// says it has no stored versions.
func TestPinsWithoutStore(t *testing.T) {
	t.Parallel()
	p := mcp.NewPins(mcp.PinsOptions{Now: func() time.Time { return time.Unix(0, 0) }}, "crm")
	d := mcppin.Definition{Name: "lookup", Description: "Looks up."}
	d.Digest = mcppin.Digest(d)
	if seen := p.Observe(context.Background(), "crm", []mcppin.Definition{d}); seen[0].Outcome != mcp.First || p.Version("crm") != 1 {
		t.Fatalf("%+v, version %d", seen, p.Version("crm"))
	}
	changed := mcppin.Definition{Name: "lookup", Description: "Looks up more."}
	changed.Digest = mcppin.Digest(changed)
	if seen := p.Observe(context.Background(), "crm", []mcppin.Definition{changed}); seen[0].Outcome != mcp.Changed || !seen[0].News {
		t.Fatalf("%+v", seen)
	}
	if _, ok, _ := p.Approve(context.Background(), "crm", "lookup", d.Digest, "ops"); ok {
		t.Fatal("approved a digest that is not the pending one")
	}
	pin, ok, err := p.Approve(context.Background(), "crm", "lookup", changed.Digest, "ops")
	if !ok || err != nil || pin.Version != 2 || pin.Pending != nil || pin.Pinned.Digest != changed.Digest {
		t.Fatalf("approve: %+v %v %v", pin, ok, err)
	}
	if _, stored, _ := p.Versions(context.Background(), "crm"); stored {
		t.Fatal("a door without a store says its versions are stored")
	}
}

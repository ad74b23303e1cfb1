package policy

import (
	"fmt"
	"reflect"
	"testing"
)

// overrides is a fake Enablement: the operator's runtime switches by tool name.
type overrides map[string]bool

func (o overrides) ToolEnabled(name string) (enabled, set bool) {
	enabled, set = o[name]
	return enabled, set
}

var _ Enablement = overrides(nil)

// declared builds the tools a client declares, each with its own description and schema.
func declared(names ...string) []Tool {
	out := make([]Tool, len(names))
	for i, n := range names {
		out[i] = Tool{Name: n, Description: fmt.Sprintf("tool %d", i), Schema: []byte(fmt.Sprintf(`{"type":"object","title":"%d"}`, i))}
	}
	return out
}

func names(ts []Tool) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// toolsConfig is the tools section of a deployment config.
func toolsConfig(t testing.TB, yaml string) map[string]ToolConfig {
	t.Helper()
	if yaml == "" {
		return nil
	}
	return mustConfig(t, "tools:\n"+yaml).Tools
}

const accessYAML = `  observe_user: {scope: observer, allowedProtocols: [private, system]}
  peek: {scope: observer}
  search_notes: {allowedProtocols: [code_review]}
  web_fetch: {enabled: false}
  search_docs: {enabled: true}
`

func TestFilter(t *testing.T) {
	cat := testCatalog(t)
	router := NewRouter(mustConfig(t, ""))
	mixed := []string{"search_docs", "web_fetch", "write_file", "search_internal", "read_file", "search_web", "run_shell", "shell"}
	tests := []struct {
		name        string
		req         Request
		tools       []string
		access      string // the config's tools section
		override    overrides
		wantKept    []string
		wantRemoved []Removal
	}{
		{
			name: "star keeps every declared tool, in order", req: Request{ClientProtocol: "neutral"},
			tools:    []string{"zeta", "web_fetch", "Search", "alpha", "x-y.z", "ünïcode"},
			wantKept: []string{"zeta", "web_fetch", "Search", "alpha", "x-y.z", "ünïcode"},
		},
		{
			name: "nothing declared", req: Request{ClientProtocol: "tech"},
			tools: nil, wantKept: []string{},
		},
		{
			name: "no name and duplicate names", req: Request{ClientProtocol: "neutral"},
			tools:    []string{"a", "", "b", "a", "", "c", "b"},
			wantKept: []string{"a", "b", "c"},
			wantRemoved: []Removal{
				{"", ReasonNoName}, {"a", ReasonDuplicateName}, {"", ReasonNoName}, {"b", ReasonDuplicateName},
			},
		},
		{
			name: "duplicate of a removed tool", req: Request{ClientProtocol: "tech"},
			tools:       []string{"write_file", "read_file", "write_file"},
			wantKept:    []string{"read_file"},
			wantRemoved: []Removal{{"write_file", ReasonNotAllowlisted}, {"write_file", ReasonDuplicateName}},
		},
		{
			name: "explicit allowlist with globs, deny wins", req: Request{ClientProtocol: "tech"},
			tools:    mixed,
			wantKept: []string{"search_docs", "web_fetch", "read_file", "search_web", "run_shell"},
			wantRemoved: []Removal{
				{"write_file", ReasonNotAllowlisted}, {"search_internal", ReasonDenied}, {"shell", ReasonNotAllowlisted},
			},
		},
		{
			name: "glob semantics", req: Request{ClientProtocol: "tech"},
			tools:    []string{"search_", "search_a_b", "Search_docs", "search-docs", "search_a/b", "my_search_docs", "search"},
			wantKept: []string{"search_", "search_a_b"},
			wantRemoved: []Removal{
				{"Search_docs", ReasonNotAllowlisted}, {"search-docs", ReasonNotAllowlisted}, {"search_a/b", ReasonNotAllowlisted},
				{"my_search_docs", ReasonNotAllowlisted}, {"search", ReasonNotAllowlisted},
			},
		},
		{
			name: "workflow narrows, never widens", req: Request{ClientWorkflow: "code_review"},
			tools:    mixed,
			wantKept: []string{"search_docs", "read_file"},
			wantRemoved: []Removal{
				{"web_fetch", ReasonWorkflowNarrows},
				{"write_file", ReasonNotAllowlisted}, // the workflow lists it, its base does not
				{"search_internal", ReasonDenied},    // the base's deny
				{"search_web", ReasonDenied},         // the workflow's deny
				{"run_shell", ReasonWorkflowNarrows},
				{"shell", ReasonNotAllowlisted},
			},
		},
		{
			name: "workflow without an allowlist keeps the base's", req: Request{ClientWorkflow: "strict_review"},
			tools:       mixed,
			wantKept:    []string{"search_docs", "web_fetch", "read_file", "search_web", "run_shell"},
			wantRemoved: []Removal{{"write_file", ReasonNotAllowlisted}, {"search_internal", ReasonDenied}, {"shell", ReasonNotAllowlisted}},
		},
		{
			name: "no allowlist allows nothing", req: Request{ClientProtocol: "no_tools"},
			tools:       []string{"search_docs", "*"},
			wantKept:    []string{},
			wantRemoved: []Removal{{"search_docs", ReasonNotAllowlisted}, {"*", ReasonNotAllowlisted}},
		},
		{
			name: "exact names only: look-alikes are not the allowlisted tool", req: Request{ClientProtocol: "exact"},
			tools: []string{
				"Search", "search ", " search", "sea\u200brch", "s\u0435arch", "ｓｅａｒｃｈ", "search\u0000", "search\n",
				"search", "SEARCH", "search_docs", "searc",
			},
			wantKept: []string{"search"},
			wantRemoved: []Removal{
				{"Search", ReasonNotAllowlisted}, {"search ", ReasonNotAllowlisted}, {" search", ReasonNotAllowlisted},
				{"sea\u200brch", ReasonNotAllowlisted}, {"s\u0435arch", ReasonNotAllowlisted}, {"ｓｅａｒｃｈ", ReasonNotAllowlisted},
				{"search\u0000", ReasonNotAllowlisted}, {"search\n", ReasonNotAllowlisted},
				{"SEARCH", ReasonNotAllowlisted}, {"search_docs", ReasonNotAllowlisted}, {"searc", ReasonNotAllowlisted},
			},
		},
		{
			name: "operator kill switch", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			tools:       []string{"web_fetch", "search_docs", "read_file"},
			wantKept:    []string{"search_docs", "read_file"},
			wantRemoved: []Removal{{"web_fetch", ReasonDisabled}},
		},
		{
			name: "override re-enables a tool the config disables", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			override: overrides{"web_fetch": true},
			tools:    []string{"web_fetch", "search_docs"},
			wantKept: []string{"web_fetch", "search_docs"},
		},
		{
			name: "override disables a tool the config enables", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			override:    overrides{"search_docs": false, "read_file": false},
			tools:       []string{"web_fetch", "search_docs", "read_file", "run_shell"},
			wantKept:    []string{"run_shell"},
			wantRemoved: []Removal{{"web_fetch", ReasonDisabled}, {"search_docs", ReasonDisabled}, {"read_file", ReasonDisabled}},
		},
		{
			name: "override matches exact names", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			override:    overrides{"Web_fetch": true, "web_fetch ": true, "Search_docs": false},
			tools:       []string{"web_fetch", "search_docs"},
			wantKept:    []string{"search_docs"},
			wantRemoved: []Removal{{"web_fetch", ReasonDisabled}},
		},
		{
			name: "override cannot pass the allowlist or the deny list", req: Request{ClientProtocol: "tech"},
			override:    overrides{"write_file": true, "search_internal": true},
			tools:       []string{"write_file", "search_internal", "search_docs"},
			wantKept:    []string{"search_docs"},
			wantRemoved: []Removal{{"write_file", ReasonNotAllowlisted}, {"search_internal", ReasonDenied}},
		},
		{
			name: "override cannot pass a workflow's narrowing", req: Request{ClientWorkflow: "code_review"},
			override:    overrides{"web_fetch": true},
			tools:       []string{"web_fetch"},
			wantKept:    []string{},
			wantRemoved: []Removal{{"web_fetch", ReasonWorkflowNarrows}},
		},
		{
			name: "allowedProtocols: another protocol", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			tools:       []string{"observe_user", "search_notes", "read_file"},
			wantKept:    []string{"read_file"},
			wantRemoved: []Removal{{"observe_user", ReasonWrongProtocol}, {"search_notes", ReasonWrongProtocol}},
		},
		{
			name: "allowedProtocols and scope: private", req: Request{ClientProtocol: "private"}, access: accessYAML,
			tools:       []string{"observe_user", "peek", "search_notes"},
			wantKept:    []string{"observe_user", "peek"},
			wantRemoved: []Removal{{"search_notes", ReasonWrongProtocol}},
		},
		{
			name: "allowedProtocols and scope: system", req: Request{Forced: "system"}, access: accessYAML,
			tools:    []string{"observe_user", "peek"},
			wantKept: []string{"observe_user", "peek"},
		},
		{
			name: "allowedProtocols: the base id counts for a workflow", req: Request{ClientWorkflow: "diary"}, access: accessYAML,
			tools:    []string{"observe_user", "peek"},
			wantKept: []string{"observe_user", "peek"},
		},
		{
			name: "allowedProtocols: the workflow id counts", req: Request{ClientWorkflow: "code_review"}, access: accessYAML,
			tools:    []string{"search_notes", "search_docs"},
			wantKept: []string{"search_notes", "search_docs"},
		},
		{
			name: "allowedProtocols: the workflow id does not count for its base", req: Request{ClientProtocol: "tech"}, access: accessYAML,
			tools:       []string{"search_notes", "search_docs"},
			wantKept:    []string{"search_docs"},
			wantRemoved: []Removal{{"search_notes", ReasonWrongProtocol}},
		},
		{
			name: "scope: a protocol without observer", req: Request{ClientProtocol: "neutral"}, access: accessYAML,
			tools:       []string{"peek", "read_file"},
			wantKept:    []string{"read_file"},
			wantRemoved: []Removal{{"peek", ReasonMissingScope + " (observer)"}},
		},
		{
			name: "scope: a workflow that drops observer", req: Request{ClientWorkflow: "billing_only"}, access: accessYAML,
			tools:    []string{"observe_user", "peek", "read_file"},
			wantKept: []string{"read_file"},
			wantRemoved: []Removal{
				{"observe_user", ReasonMissingScope + " (observer)"}, {"peek", ReasonMissingScope + " (observer)"},
			},
		},
		{
			name: "disabled beats wrong protocol", req: Request{ClientProtocol: "neutral"},
			access:      "  observe_user: {enabled: false, scope: observer, allowedProtocols: [private]}\n",
			tools:       []string{"observe_user"},
			wantKept:    []string{},
			wantRemoved: []Removal{{"observe_user", ReasonDisabled}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eff, err := router.Resolve(tc.req, cat)
			if err != nil {
				t.Fatalf("Resolve(%+v): %v", tc.req, err)
			}
			access := ToolAccess{Config: toolsConfig(t, tc.access)}
			if tc.override != nil {
				access.Override = tc.override
			}
			in := declared(tc.tools...)
			before := declared(tc.tools...)
			kept, removed := eff.Filter(in, access)

			if got := names(kept); !reflect.DeepEqual(got, tc.wantKept) {
				t.Errorf("kept = %q, want %q", got, tc.wantKept)
			}
			if len(removed) != 0 || len(tc.wantRemoved) != 0 {
				if !reflect.DeepEqual(removed, tc.wantRemoved) {
					t.Errorf("removed = %q, want %q", removed, tc.wantRemoved)
				}
			}
			if len(kept)+len(removed) != len(tc.tools) {
				t.Errorf("%d kept + %d removed != %d declared", len(kept), len(removed), len(tc.tools))
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("Filter changed its input")
			}
			// Kept tools are the declared ones, description and schema included.
			i := 0
			for _, k := range kept {
				for i < len(in) && !reflect.DeepEqual(in[i], k) {
					i++
				}
				if i == len(in) {
					t.Errorf("kept tool %+v is not one of the declared tools in order", k)
					break
				}
				i++
			}
			// Allowed agrees with Filter for every uniquely named tool.
			seen := map[string]int{}
			for _, n := range tc.tools {
				seen[n]++
			}
			for _, k := range kept {
				if ok, why := eff.Allowed(k.Name, access); !ok || why != "" {
					t.Errorf("Allowed(%q) = %v, %q; Filter kept it", k.Name, ok, why)
				}
			}
			for _, r := range removed {
				if r.Name == "" || seen[r.Name] > 1 {
					continue
				}
				if ok, why := eff.Allowed(r.Name, access); ok || why != r.Reason {
					t.Errorf("Allowed(%q) = %v, %q; Filter removed it: %q", r.Name, ok, why, r.Reason)
				}
			}
		})
	}
}

func TestReasonsAreStable(t *testing.T) {
	// These strings reach clients (X-Promptgate-Tools-Removed decisions, preview) and the audit
	// log.
	got := []string{ReasonNotAllowlisted, ReasonDenied, ReasonDisabled, ReasonWrongProtocol, ReasonMissingScope, ReasonNoName, ReasonDuplicateName, ReasonWorkflowNarrows}
	want := []string{
		"not in the protocol's allowlist", "denied by the protocol", "disabled by the operator",
		"not allowed in this protocol by its access policy", "the protocol lacks the tool's scope",
		"tool has no name", "duplicate tool name", "not in the workflow's allowlist",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reasons = %q, want %q", got, want)
	}
}

func TestAllowedWithoutAccess(t *testing.T) {
	cat := testCatalog(t)
	eff, err := NewRouter(mustConfig(t, "")).Resolve(Request{ClientWorkflow: "code_review"}, cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ok   bool
		why  string
	}{
		{"search_docs", true, ""},
		{"read_file", true, ""},
		{"web_fetch", false, ReasonWorkflowNarrows},
		{"write_file", false, ReasonNotAllowlisted},
		{"search_web", false, ReasonDenied},
		{"", false, ReasonNotAllowlisted},
	} {
		ok, why := eff.Allowed(tc.name, ToolAccess{})
		if ok != tc.ok || why != tc.why {
			t.Errorf("Allowed(%q) = %v, %q; want %v, %q", tc.name, ok, why, tc.ok, tc.why)
		}
	}
}

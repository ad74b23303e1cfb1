package policy

import (
	"strings"
	"testing"
)

// listed is an Enablement that can list its overrides.
type listed struct{ overrides }

func (l listed) OverriddenTools() []string {
	var out []string
	for n := range l.overrides {
		out = append(out, n)
	}
	return out
}

// TestRestriction: only a protocol that allows "*" at every level, denies nothing, and whose
// deployment removes no tool in it (kill switch, access policy) is unrestricted; an override that
// cannot be listed counts as a restriction.
func TestRestriction(t *testing.T) {
	star := func() *Effective { return &Effective{ID: "neutral", BaseID: "neutral", allow: [][]string{{"*"}}} }
	for _, tc := range []struct {
		name   string
		eff    *Effective
		access string
		over   Enablement
		want   string // a part of the reason; "" for none
	}{
		{name: "star", eff: star()},
		{name: "star and other entries", eff: &Effective{ID: "p", BaseID: "p", allow: [][]string{{"get_weather", "*"}}}},
		{name: "allowlist", eff: &Effective{ID: "p", BaseID: "p", allow: [][]string{{"get_weather"}}}, want: `protocol "p" allows only`},
		{name: "glob", eff: &Effective{ID: "p", BaseID: "p", allow: [][]string{{"get_*"}}}, want: "allows only"},
		{name: "nothing allowed", eff: &Effective{ID: "p", BaseID: "p", allow: [][]string{nil}}, want: "allows only"},
		{name: "workflow narrows", eff: &Effective{ID: "wf", BaseID: "p", allow: [][]string{{"*"}, {"a"}}}, want: `workflow "wf"`},
		{name: "deny", eff: &Effective{ID: "p", BaseID: "p", allow: [][]string{{"*"}}, deny: []string{"shell"}}, want: "denies tools (shell)"},
		{name: "config kill switch", eff: star(), access: "  web_search: {enabled: false}\n", want: `tool "web_search" is ` + ReasonDisabled},
		{name: "config switch on", eff: star(), access: "  web_search: {enabled: true}\n"},
		{name: "access policy elsewhere", eff: star(), access: "  observe_user: {allowedProtocols: [private]}\n", want: ReasonWrongProtocol},
		{name: "access policy here", eff: star(), access: "  observe_user: {allowedProtocols: [neutral]}\n"},
		{name: "scope missing", eff: star(), access: "  peek: {scope: observer}\n", want: ReasonMissingScope},
		{name: "runtime kill switch", eff: star(), over: listed{overrides{"shell": false}}, want: `tool "shell" is ` + ReasonDisabled},
		{name: "runtime switch on over a config one off", eff: star(), access: "  web_search: {enabled: false}\n", over: listed{overrides{"web_search": true}}},
		{name: "runtime switches not listable", eff: star(), over: overrides{}, want: "cannot be listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.eff.Restriction(ToolAccess{Config: toolsConfig(t, tc.access), Override: tc.over})
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Restriction = %q, want %q", got, tc.want)
			}
		})
	}
}

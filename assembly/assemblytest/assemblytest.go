// Package assemblytest holds what the tests of the request surfaces (proxy/surface/...) share: a small
// layered template, a check of the policy errors a request parser returns, and the names of declared tools.
// It is for tests only.
package assemblytest

import (
	"errors"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/store/builtin"
)

// LayeredText is a small layered template with every block, in the contract's order.
const LayeredText = "=== SYSTEM CORE ===\nCore rules.\n\n" +
	"=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n" +
	"=== APPLICATION INSTRUCTIONS ===\n{{application_instructions}}\n\n" +
	"=== RUNTIME DIRECTIVES ===\n{{runtime_directives}}\n\n" +
	assembly.ContextHeader + "\n{{runtime_context}}\n\n" +
	"=== AVAILABLE TOOLS ===\n{{tools}}\n"

// Layered is LayeredText parsed.
func Layered() *assembly.Template { return assembly.ParseTemplate("t", 1, LayeredText) }

// WantPolicyError checks that err is a *policy.Error with the code and param.
func WantPolicyError(t testing.TB, err error, code, param string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *policy.Error", err, err)
	}
	if pe.Code != code || pe.Param != param {
		t.Errorf("error = {%s %q} %q, want {%s %q}", pe.Code, pe.Param, pe.Message, code, param)
	}
}

// ToolNames are the names of tools, in order.
func ToolNames(ts []policy.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// Builtin is the built-in template name, parsed (version 0).
func Builtin(tb testing.TB, name string) *assembly.Template {
	tb.Helper()
	d, ok := builtin.Template(name)
	if !ok {
		tb.Fatalf("no built-in template %s", name)
	}
	return assembly.ParseTemplate(d.Name, 0, d.Text)
}

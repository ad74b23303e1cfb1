package proxy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// surfaceCase is one file testdata/surfaces/NAME.in.json: a /v1/responses, /v1/messages or Gemini
// request and the setup it runs under; NAME.out.json is the exact upstream body (compared as JSON;
// -update rewrites it).
type surfaceCase struct {
	Description string            `json:"description"`
	Surface     string            `json:"surface"` // responses, messages or gemini
	Path        string            `json:"path"`    // the route, where it is not /v1/SURFACE
	Env         map[string]string `json:"env"`
	Config      string            `json:"config"`
	Headers     map[string]string `json:"headers"`
	Protocols   []json.RawMessage `json:"protocols"`
	Request     json.RawMessage   `json:"request"`
}

func TestSurfaceGolden(t *testing.T) {
	runGolden(t, filepath.Join("testdata", "surfaces"), "TestSurfaceGolden", func(t *testing.T, c surfaceCase) []byte {
		e := testEngine(t, c.Config, c.Env, nil, c.Protocols)
		path := c.Path
		switch {
		case c.Surface == "gemini" && path != "":
		case c.Surface == "responses" || c.Surface == "messages":
			path = "/v1/" + c.Surface
		default:
			t.Fatalf("surface %q path %q", c.Surface, c.Path)
		}
		p, err := e.Prepare(context.Background(), Input{Path: path, Header: headerOf(c.Headers), Body: c.Request})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		checkSurfaceInvariants(t, c, p.Body)
		return p.Body
	})
}

// checkSurfaceInvariants asserts the contract's promises on an upstream body of either surface: the
// layered prompt is where it belongs, untrusted bytes stay on the context line, promptgate is gone,
// and every field the proxy does not own is byte for byte the client's.
func checkSurfaceInvariants(t *testing.T, c surfaceCase, body []byte) {
	t.Helper()
	if gjson.GetBytes(body, "promptgate").Exists() {
		t.Error("promptgate field sent upstream")
	}
	prompt := gjson.GetBytes(body, "instructions")
	owned := map[string]bool{"instructions": true, "input": true, "tools": true, "tool_choice": true, "promptgate": true}
	if c.Surface == "messages" {
		prompt = gjson.GetBytes(body, "system")
		if prompt.IsArray() {
			prompt = prompt.Get("0.text")
		}
		owned = map[string]bool{"system": true, "tools": true, "tool_choice": true, "promptgate": true}
	}
	if c.Surface == "gemini" {
		prompt = gjson.GetBytes(body, "systemInstruction.parts.0.text")
		owned = map[string]bool{"systemInstruction": true, "system_instruction": true, "tools": true, "toolConfig": true, "promptgate": true}
	}
	sys := prompt.String()
	if !strings.HasPrefix(sys, "=== SYSTEM CORE ===\n") || !strings.Contains(sys, "=== RUNTIME CONTEXT") {
		t.Errorf("layered prompt missing: %q", sys)
	}
	if n := strings.Count("\n"+sys+"\n", "\n=== SYSTEM CORE ===\n"); n != 1 {
		t.Errorf("%d SYSTEM CORE header lines", n)
	}
	gjson.ParseBytes(c.Request).ForEach(func(k, v gjson.Result) bool {
		if !owned[k.Str] && gjson.GetBytes(body, gjson.Escape(k.Str)).Raw != v.Raw {
			t.Errorf("field %s changed: %s -> %s", k.Str, v.Raw, gjson.GetBytes(body, gjson.Escape(k.Str)).Raw)
		}
		return true
	})
}

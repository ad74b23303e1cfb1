package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// surfaceCase is one file testdata/surfaces/NAME.in.json: a /v1/responses or /v1/messages request and the
// setup it runs under; NAME.out.json is the exact upstream body (compared as JSON; -update rewrites it).
type surfaceCase struct {
	Description string            `json:"description"`
	Surface     string            `json:"surface"` // responses or messages
	Env         map[string]string `json:"env"`
	Config      string            `json:"config"`
	Headers     map[string]string `json:"headers"`
	Protocols   []json.RawMessage `json:"protocols"`
	Request     json.RawMessage   `json:"request"`
}

func TestSurfaceGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "surfaces", "*.in.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var c surfaceCase
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			e := testEngine(t, c.Config, c.Env, nil, c.Protocols)
			h := http.Header{}
			for k, v := range c.Headers {
				h.Set(k, v)
			}
			prepare := map[string]func(context.Context, Input) (*Prepared, error){
				"responses": e.PrepareResponses, "messages": e.PrepareMessages,
			}[c.Surface]
			if prepare == nil {
				t.Fatalf("surface %q", c.Surface)
			}
			p, err := prepare(context.Background(), Input{Path: "/v1/" + c.Surface, Header: h, Body: c.Request})
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			checkSurfaceInvariants(t, c, p.Body)
			outPath := strings.TrimSuffix(in, ".in.json") + ".out.json"
			if *update {
				var pretty bytes.Buffer
				if err := json.Indent(&pretty, p.Body, "", "  "); err != nil {
					t.Fatal(err)
				}
				pretty.WriteByte('\n')
				if err := os.WriteFile(outPath, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(outPath)
			if err != nil {
				t.Fatalf("%v (run go test ./proxy -run TestSurfaceGolden -update)", err)
			}
			var g, w any
			if err := json.Unmarshal(p.Body, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				var pretty bytes.Buffer
				_ = json.Indent(&pretty, p.Body, "", "  ")
				t.Errorf("%s differs from %s (run with -update if the change is intended); got:\n%s", name, outPath, pretty.String())
			}
		})
	}
}

// checkSurfaceInvariants asserts the contract's promises on an upstream body of either surface: the layered
// prompt is where it belongs, untrusted bytes stay on the context line, promptgate is gone, and every field
// the proxy does not own is byte for byte the client's.
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

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/store"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/golden, proxy/testdata/surfaces)")

// goldenCase is one file testdata/golden/NAME.in.json.
type goldenCase struct {
	Description   string            `json:"description"`
	Env           map[string]string `json:"env"`
	Config        string            `json:"config"`
	Headers       map[string]string `json:"headers"`
	ForceProtocol string            `json:"forceProtocol"`
	Protocols     []json.RawMessage `json:"protocols"`
	Templates     []json.RawMessage `json:"templates"`
	Request       json.RawMessage   `json:"request"`
}

// testStore opens a real bbolt file in a temp dir, seeded with the built-ins, with the validation
// and links hooks serve uses.
func testStore(t testing.TB) *store.Bolt {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "promptgate.db"), store.Options{
		Validate: ValidateDefinition, Links: CheckLinks,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// testEngine builds an engine on a real store with extra definitions applied as one rollout.
func testEngine(t testing.TB, cfgYAML string, env map[string]string, templates, protocols []json.RawMessage) *Engine {
	t.Helper()
	st := testStore(t)
	if len(templates)+len(protocols) > 0 {
		if err := st.ApplyRollout(context.Background(), store.Rollout{ID: "test", Templates: templates, Protocols: protocols}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := parseTestConfig(t, cfgYAML)
	settings, err := assembly.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Security.Apply(&settings)
	log := slog.New(slog.DiscardHandler)
	defs, err := NewDefinitions(context.Background(), st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(defs.Close)
	e, err := NewEngine(EngineOptions{Defs: defs, Policy: cfg.Config, Settings: settings, Limits: cfg.Limits, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testConfig is the part of the config file the engine reads: proxy/config, which composes the
// whole file, imports this package, so the tests here decode these sections themselves, as
// strictly.
type testConfig struct {
	policy.Config `yaml:",inline"`
	Limits        Limits            `yaml:"limits"`
	Security      assembly.Security `yaml:"security"`
}

func parseTestConfig(t testing.TB, src string) testConfig {
	t.Helper()
	var c testConfig
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("config: %v", err)
	}
	errs := append(c.Config.Validate(), c.Limits.Validate("limits")...)
	if len(errs) > 0 {
		t.Fatalf("config: %v", errors.Join(errs...))
	}
	return c
}

func TestGolden(t *testing.T) {
	runGolden(t, filepath.Join("..", "testdata", "golden"), "TestGolden", func(t *testing.T, c goldenCase) []byte {
		e := testEngine(t, c.Config, c.Env, c.Templates, c.Protocols)
		got, err := e.Preview(context.Background(), Input{Path: PathChat, Header: headerOf(c.Headers), Body: c.Request, ForceProtocol: c.ForceProtocol})
		if err != nil {
			t.Fatalf("preview: %v", err)
		}
		checkInvariants(t, got)
		return got
	})
}

// runGolden runs a subtest for every file dir/NAME.in.json: the file is decoded into a C (a field C
// does not know is an error), run turns it into JSON, and that JSON must equal NAME.out.json
// (compared as JSON; -update rewrites the file instead). test names the test for the hint on a
// missing file.
func runGolden[C any](t *testing.T, dir, test string, run func(t *testing.T, c C) []byte) {
	files, err := filepath.Glob(filepath.Join(dir, "*.in.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in %s: %v", dir, err)
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var c C
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			got := run(t, c)
			outPath := strings.TrimSuffix(in, ".in.json") + ".out.json"
			if *update {
				var pretty bytes.Buffer
				if err := json.Indent(&pretty, got, "", "  "); err != nil {
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
				t.Fatalf("%v (run go test ./proxy -run %s -update)", err, test)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				var pretty bytes.Buffer
				_ = json.Indent(&pretty, got, "", "  ")
				t.Errorf("%s differs from %s (run with -update if the change is intended); got:\n%s", name, outPath, pretty.String())
			}
		})
	}
}

// headerOf is an http.Header with the given fields.
func headerOf(fields map[string]string) http.Header {
	h := http.Header{}
	for k, v := range fields {
		h.Set(k, v)
	}
	return h
}

// checkInvariants asserts the contract's structural promises on any preview report.
func checkInvariants(t *testing.T, report []byte) {
	t.Helper()
	var r struct {
		UsesLayeredBlocks bool `json:"usesLayeredBlocks"`
		UpstreamRequest   struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
			Promptgate any `json:"promptgate"`
		} `json:"upstreamRequest"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	msgs := r.UpstreamRequest.Messages
	if len(msgs) == 0 || msgs[0].Role != "system" {
		t.Fatalf("first upstream message is not the system message: %+v", msgs)
	}
	if r.UpstreamRequest.Promptgate != nil {
		t.Error("the promptgate field reached upstream")
	}
	sys, _ := msgs[0].Content.(string)
	if r.UsesLayeredBlocks {
		if !strings.HasPrefix(sys, "=== SYSTEM CORE ===\n") {
			t.Errorf("layered system message does not start with SYSTEM CORE: %.80q", sys)
		}
		if !strings.Contains(sys, assembly.ContextHeader+"\n") {
			t.Error("layered system message has no RUNTIME CONTEXT block")
		}
	}
	// Exactly the known headers start lines, each at most once, in the contract's order.
	order := []string{"=== SYSTEM CORE ===", "=== PROTOCOL RULES ===", "=== APPLICATION INSTRUCTIONS ===", "=== RUNTIME DIRECTIVES ===", assembly.ContextHeader, "=== AVAILABLE TOOLS ==="}
	last := -1
	for _, line := range strings.Split(sys, "\n") {
		if !strings.HasPrefix(line, "===") {
			continue
		}
		idx := -1
		for i, h := range order {
			if line == h {
				idx = i
			}
		}
		if idx < 0 && r.UsesLayeredBlocks {
			t.Errorf("unknown header line in system message: %q", line)
		}
		if idx >= 0 && idx <= last {
			t.Errorf("header %q out of order or repeated", line)
		}
		if idx >= 0 {
			last = idx
		}
	}
	// The context JSON line is one valid JSON object.
	if i := strings.Index(sys, assembly.ContextHeader+"\n"); i >= 0 {
		rest := sys[i+len(assembly.ContextHeader)+1:]
		line, _, _ := strings.Cut(rest, "\n")
		if line != "(the runtime context JSON is in the next system message)" && !json.Valid([]byte(line)) {
			t.Errorf("runtime context line is not valid JSON: %.200q", line)
		}
	}
	for _, m := range msgs[1:] {
		if m.Role == "developer" {
			t.Error("a developer message reached upstream outside the system message")
		}
	}
}

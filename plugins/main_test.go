package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/plugins"
)

// programs are the plugin programs the tests build, by binary name.
var programs = map[string]string{
	"filememory":   "./examples/filememory",
	"profilegraph": "./examples/profilegraph",
	"testsource":   "./internal/testplugins/testsource",
	"docexample":   "./internal/docexample", // the first Go block of docs/plugins.md
}

// built holds the binaries built once for this test binary: name → path and sha256.
var built = map[string]binary{}

type binary struct{ path, sha256 string }

// TestMain builds every plugin program once, with the go command that runs the tests, exactly
// as CI and an operator would (go build), into a temporary folder removed at the end.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "promptgate-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "plugins tests need the go command to build the plugin binaries:", err)
		return 1
	}
	// The example of docs/plugins.md is built as the package ./internal/docexample, which exists
	// only in a build overlay: nothing is written into the source tree.
	overlay, err := docExampleOverlay(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	args := []string{"build", "-overlay", overlay, "-o", dir + string(os.PathSeparator)}
	for _, pkg := range programs {
		args = append(args, pkg)
	}
	cmd := exec.Command(goTool, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build of the plugin programs: %v\n%s", err, out)
		return 1
	}
	for name := range programs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			p += ".exe"
		}
		sum, err := fileSHA256(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		built[name] = binary{path: p, sha256: sum}
	}
	return m.Run()
}

// docExampleFile is the source of the docs' example, extracted by docExampleOverlay.
var docExampleFile string

// docExampleOverlay writes the first ```go block of docs/plugins.md to dir and returns a
// go build -overlay file that places it at internal/docexample/main.go.
func docExampleOverlay(dir string) (string, error) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "plugins.md"))
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(doc), "```go\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		return "", fmt.Errorf("docs/plugins.md has no ```go block")
	}
	docExampleFile = code
	src := filepath.Join(dir, "docexample.go")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		return "", err
	}
	target, err := filepath.Abs(filepath.Join("internal", "docexample", "main.go"))
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": {target: src}})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// entry is a plugin entry for one of the built programs, as the config file leaves it (defaults
// applied), except that the cache is off unless the test sets CacheTTL.
func entry(name, program string, cfg map[string]any) plugins.Spec {
	b := built[program]
	return plugins.Spec{
		Name: name, Path: b.path, SHA256: b.sha256, Module: name, MinMode: "minimal",
		Timeout: 5 * time.Second, Config: cfg,
	}
}

// testLogger writes the host's log to the test log (debug level shows go-plugin's chatter).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

// startHost starts a host on the entries and closes it when the test ends.
func startHost(t testing.TB, opts plugins.HostOptions, entries ...plugins.Spec) *plugins.Host {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	h, err := plugins.NewHost(context.Background(), entries, opts)
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

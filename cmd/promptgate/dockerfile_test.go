package main

import (
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's top folder, seen from this package.
var repoRoot = filepath.Join("..", "..")

// instruction is one Dockerfile instruction: its keyword in upper case and the rest of its line(s).
type instruction struct {
	cmd, args string
}

// parseDockerfile reads a Dockerfile's instructions: comment lines dropped, lines ending in a
// backslash joined with the next.
func parseDockerfile(t *testing.T, text string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("Dockerfile ends in a continued line: %q", cur.String())
	}
	return out
}

// execForm decodes an instruction's JSON array (exec form); a shell-form command is a test failure,
// since the distroless image has no shell to run it.
func execForm(t *testing.T, in instruction, args string) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("%s %s: want the exec form, a JSON array (the image has no shell): %v", in.cmd, in.args, err)
	}
	return argv
}

// finalStage is the instructions after the last FROM.
func finalStage(t *testing.T, ins []instruction) []instruction {
	t.Helper()
	last := -1
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return ins[last+1:]
}

// envOf is the environment the final stage's ENV instructions set (KEY=VALUE form).
func envOf(t *testing.T, ins []instruction) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range ins {
		if in.cmd != "ENV" {
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("ENV %s: use KEY=VALUE", in.args)
			}
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

// TestDockerfileHealthcheckRuns runs the image's HEALTHCHECK command, as the image's environment
// gives it, against a listener: it must name the binary the image copies, an existing subcommand
// and flags, and report healthy exactly when /healthz answers 200. EXPOSE must list the proxy port
// and no port that is only on loopback inside the container.
func TestDockerfileHealthcheckRuns(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	final := finalStage(t, parseDockerfile(t, string(text)))
	env := envOf(t, final)
	var binary string
	var entry, health []string
	var exposed []string
	for _, in := range final {
		switch in.cmd {
		case "COPY":
			if f := strings.Fields(in.args); strings.HasSuffix(f[len(f)-1], "/promptgate") {
				binary = f[len(f)-1]
			}
		case "ENTRYPOINT":
			entry = execForm(t, in, in.args)
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		case "HEALTHCHECK":
			i := strings.Index(in.args, "CMD ")
			if i < 0 {
				t.Fatalf("HEALTHCHECK %s: no CMD", in.args)
			}
			for _, opt := range strings.Fields(in.args[:i]) {
				name, val, _ := strings.Cut(opt, "=")
				if _, err := time.ParseDuration(val); name != "--retries" && err != nil {
					t.Errorf("HEALTHCHECK %s: %v", opt, err)
				}
			}
			health = execForm(t, in, in.args[i+len("CMD "):])
		}
	}
	if binary == "" || len(entry) == 0 || entry[0] != binary {
		t.Fatalf("the binary copied (%q) is not the ENTRYPOINT (%q)", binary, entry)
	}
	if len(health) < 2 || health[0] != binary {
		t.Fatalf("HEALTHCHECK %q does not run %s", health, binary)
	}

	// The listen address serve reads in the container: its port is exposed, and the admin port is
	// not unless the image moves the admin listener off loopback.
	listen := env[EnvListen]
	_, listenPort, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("ENV %s=%q: %v", EnvListen, listen, err)
	}
	if !slices.Contains(exposed, listenPort) && !slices.Contains(exposed, listenPort+"/tcp") {
		t.Errorf("EXPOSE %v lacks the proxy listener's port %s", exposed, listenPort)
	}
	if _, adminPort, _ := net.SplitHostPort(DefaultAdminListen); env[EnvAdminListen] == "" && slices.Contains(exposed, adminPort) {
		t.Errorf("EXPOSE %v lists the admin port %s, which stays on loopback in the container", exposed, adminPort)
	}

	// The command itself, with the image's environment and the listener moved to a free port here.
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	host, _, _ := net.SplitHostPort(listen)
	for _, tc := range []struct {
		addr string
		want int
	}{{healthy.Listener.Addr().String(), 0}, {deadAddr(t), 1}} {
		e := maps.Clone(env)
		e[EnvListen] = net.JoinHostPort(host, port(t, tc.addr))
		code, out, errOut := checkHealth(t, e, health[2:]...)
		if health[1] != "healthcheck" || code != tc.want {
			t.Errorf("HEALTHCHECK %q at %s: exit %d, want %d; stdout %q, stderr %q", health, e[EnvListen], code, tc.want, out, errOut)
		}
	}
}

// dockerignore is a .dockerignore's patterns as regular expressions over slash-separated paths from
// the context's root, with Docker's meaning: "*" and "?" stay within one path element, "**" spans
// any number of them, and a pattern that matches a folder leaves out everything in it.
func dockerignore(t *testing.T, text string) []*regexp.Regexp {
	t.Helper()
	var out []*regexp.Regexp
	for _, line := range strings.Split(text, "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.HasPrefix(p, "!") || strings.ContainsAny(p, `[\`) {
			t.Fatalf(".dockerignore %q: exceptions and character classes are not read by this test: teach it first", p)
		}
		p = strings.Trim(filepath.ToSlash(filepath.Clean(p)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("(?:/.*)?$")
		out = append(out, regexp.MustCompile(re.String()))
	}
	return out
}

func ignored(patterns []*regexp.Regexp, path string) bool {
	for _, re := range patterns {
		if re.MatchString(path) {
			return true
		}
	}
	return false
}

// TestDockerignoreKeepsTheBuildInputs: every file `go build ./cmd/promptgate` reads (the Go and
// embedded files of the module's packages it imports, go.mod, go.sum) is in the build context, and
// what the build does not need (git, tests, test data, docs, local DBs, built binaries) is left
// out.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := dockerignore(t, string(text))
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,Module,GoFiles,EmbedFiles", "./cmd/promptgate")
	cmd.Dir = root
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(outb)))
	for dec.More() {
		var p struct {
			Dir                 string
			Module              *struct{ Path string }
			GoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != "github.com/promptgate/promptgate" {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			needed = append(needed, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list named only %d files", len(needed))
	}
	for _, f := range needed {
		if ignored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", f)
		}
	}
	for _, f := range []string{".git/HEAD", "promptgate.db", "promptgate.audit.db", "data/x.db", "bin/memory-source",
		"proxy/testdata/x.json", "policy/flow/testdata/agentflows/banking.json", "cmd/promptgate/main_test.go",
		"docs/console/decisions.png", "README.md", "promptgate"} {
		if !ignored(patterns, f) {
			t.Errorf(".dockerignore keeps %s in the build context", f)
		}
	}
}

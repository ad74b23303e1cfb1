package main

import (
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
)

// The tests of docs/operating.md: its config files load through the config loader, its definition
// and rollout commands, previews and kill switch run against a running serve (in front of the
// demo's model) through the admin API, its fleet commands against an embedded etcd, and the Docker
// section's claims against the Dockerfile and a serve configured as the page says.

const operatingPage = "docs/operating.md"

// operatingServe is serve on a new DB in front of the demo's model, and the environment under which
// the page's CLI commands reach it (as they reach a serve that holds the DB: through its admin
// API).
func operatingServe(t *testing.T, args ...string) (*served, map[string]string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "pg.db")
	up := demoModel(t)
	s := startServe(t, nil, append([]string{"--upstream", up + "/v1", "--anthropic-upstream", up + "/v1", "--db", db}, args...)...)
	return s, map[string]string{EnvDB: db, EnvAdminURL: s.admin}
}

// TestOperatingConfigLoads: the page's config file, its one placeholder filled in, loads through
// the config loader, and the limits it shows are the defaults the comments and the text say they
// are.
func TestOperatingConfigLoads(t *testing.T) {
	t.Parallel()
	blocks := blocksOf(docSection(t, operatingPage, "The config file (`--config`)"), "yaml")
	if len(blocks) != 1 || strings.Count(blocks[0], `"…64 hex…"`) != 1 {
		t.Fatalf("the config example changed: update this test")
	}
	text := strings.Replace(blocks[0], `"…64 hex…"`, strings.Repeat("0", 64), 1)
	f, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the page's config does not load: %v", err)
	}
	def, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Limits, def.Limits) {
		t.Errorf("the page shows limits %+v; the defaults are %+v", f.Limits, def.Limits)
	}
	if f.Audit.RingSize != 10000 || f.Security.DatamarkToolOutput || f.MITM == nil ||
		f.MITM.MaxTunnels != 1024 || !*f.MITM.Passthrough || len(f.Routes) != 1 || len(f.Plugins) != 1 {
		t.Errorf("the config read is not the one shown: %+v", f)
	}
}

// TestOperatingDefinitionCommands runs the page's push, history, activate and rollback commands as
// written against a running serve, then the rollout file through migrate up, and checks what each
// says it does.
func TestOperatingDefinitionCommands(t *testing.T) {
	t.Parallel()
	sec := docSection(t, operatingPage, "Definitions and rollouts")
	sh, js := blocksOf(sec, "sh"), blocksOf(sec, "json")
	if len(sh) != 1 || len(js) != 1 {
		t.Fatalf("the section's blocks changed: update this test")
	}
	cmds := mustShell(t, sh[0])
	want := []string{ // what each command's output must say, in order
		"version 1 stored and active", "version 2 stored, not active", "* 1 ", "version 2 active (was 1)", "rolled back to version 1 (from 2)",
	}
	if len(cmds) != len(want) {
		t.Fatalf("%d commands: update this test", len(cmds))
	}
	_, env := operatingServe(t)
	for i, c := range cmds {
		args, ok := cliArgs(c.words())
		if !ok {
			t.Fatalf("%q", c.words())
		}
		out, errOut, err := runCmd(t, env, "", args...)
		if err != nil || !strings.Contains(out, want[i]) || !strings.Contains(errOut, "admin API") {
			t.Errorf("%q: %v\n%s%s", c.words(), err, out, errOut)
		}
		if args[1] == "history" && !strings.Contains(out, "\n  2 ") {
			t.Errorf("history shows no stored version 2: %s", out)
		}
	}
	dir := t.TempDir()
	id := gjson.Get(js[0], "id").String()
	writeFile(t, dir, id+".json", js[0])
	if out, errOut, err := runCmd(t, env, "", "migrate", "up", "--dir", dir); err != nil || !strings.Contains(out, "applied "+id) {
		t.Fatalf("the rollout file: %v %s %s", err, out, errOut)
	}
	out, _, err := runCmd(t, env, "", "protocols", "show", "tech")
	if rules := gjson.Get(js[0], "protocols.0.promptTemplate.overrides.rules").String(); err != nil || gjson.Get(out, "body.promptTemplate.overrides.rules").String() != rules {
		t.Errorf("the rollout is not active: %v %s", err, out)
	}
}

// TestOperatingPreviewAndKillSwitch runs the admin API section's commands against a running serve:
// the previews show the layered prompt where the page says it is, and after the kill switch the
// tool is removed from a request that declares it.
func TestOperatingPreviewAndKillSwitch(t *testing.T) {
	t.Parallel()
	s, env := operatingServe(t)
	admin := strings.TrimPrefix(s.admin, "http://")
	var n int
	for _, b := range blocksOf(docSection(t, operatingPage, "The admin API"), "sh") {
		for _, c := range mustShell(t, b) {
			var out string
			if args, ok := cliArgs(c.words()); ok {
				o, errOut, err := runCmd(t, env, "", args...)
				if err != nil {
					t.Fatalf("%q: %v %s", c.words(), err, errOut)
				}
				out = o
			} else {
				code, _, o := respBody(t, docCurl(t, c.words(), "", admin))
				if code != http.StatusOK {
					t.Fatalf("%q: %d %s", c.words(), code, o)
				}
				out = o
			}
			n++
			if len(c.stages) == 2 {
				got := jq(t, c.stages[1], out)
				if !strings.HasPrefix(got, "=== SYSTEM CORE ===") && got != `"/v1/responses"` {
					t.Errorf("%q gives %.80q", c.stages, got)
				}
			}
		}
	}
	if n != 4 {
		t.Fatalf("%d commands: update this test", n)
	}
	req, _ := http.NewRequest(http.MethodPost, s.base+"/chat/completions", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"send_email","parameters":{"type":"object"}}}]}`))
	req.Header.Set("Content-Type", "application/json")
	if code, h, out := respBody(t, req); code != http.StatusOK || h.Get("X-Promptgate-Tools-Removed") != "send_email" {
		t.Errorf("after the kill switch: %d %v %s", code, h, out)
	}
}

// TestOperatingFleetCommands runs the fleet section's promptgate commands against embedded etcds
// (their addresses in place of the page's): serve on the etcd store, and the copy into etcd and
// back (a copy needs an empty prefix: it gets an etcd of its own).
func TestOperatingFleetCommands(t *testing.T) {
	sec := docSection(t, operatingPage, "Running a fleet")
	t.Chdir(t.TempDir())
	if _, _, err := runCmd(t, nil, "", "protocols", "list", "--create", "--db", "promptgate.db"); err != nil {
		t.Fatal(err)
	}
	serveEtcd, copyEtcd := etcdtest.Start(t), etcdtest.Start(t)
	var copies, serves int
	for _, b := range blocksOf(sec, "sh") {
		for _, c := range mustShell(t, b) {
			args, ok := cliArgs(c.words())
			if !ok {
				continue // docker and etcdctl
			}
			etcd := copyEtcd
			if args[0] == "serve" {
				etcd = serveEtcd
			}
			for i, a := range args {
				if j := strings.Index(a, "etcd://"); j >= 0 {
					hosts := a[j+7:]
					args[i] = a[:j+7] + etcd.HostPort() + hosts[strings.Index(hosts, "/"):]
				}
			}
			switch args[0] {
			case "store":
				if out, errOut, err := runCmd(t, nil, "", args...); err != nil {
					t.Errorf("%q: %v %s %s", args, err, out, errOut)
				}
				copies++
			case "serve":
				s := startServe(t, nil, args[1:]...)
				if err := s.stop(); err != nil || !strings.Contains(s.stderr.String(), etcd.HostPort()) {
					t.Errorf("%q: %v\n%s", args, err, s.stderr.String())
				}
				serves++
			}
		}
	}
	if copies != 2 || serves != 1 {
		t.Fatalf("%d copies, %d serves: update this test", copies, serves)
	}
	if out, _, err := runCmd(t, nil, "", "protocols", "list", "--db", "backup.db"); err != nil || !strings.Contains(out, "neutral") {
		t.Errorf("the copy back: %v %s", err, out)
	}
}

// TestOperatingDockerSection: the listener settings the page gives for the image are the
// Dockerfile's, the Compose files parse, their variables are promptgate's, and a serve with the
// page's promptgate.yaml answers a container calling it by its service name, where one without it
// answers 421.
func TestOperatingDockerSection(t *testing.T) {
	t.Parallel()
	sec := docSection(t, operatingPage, "Docker")
	dockerfile := docPage(t, "Dockerfile")
	for _, want := range []string{"PROMPTGATE_LISTEN=0.0.0.0:8787", "EXPOSE 8787", `"healthcheck"`, "PROMPTGATE_DB=/data/promptgate.db", "USER 65532"} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("the Dockerfile has no %s, which the page describes", want)
		}
	}
	if !strings.Contains(sec, "`PROMPTGATE_LISTEN=0.0.0.0:8787`") || !strings.Contains(sec, "`/data/promptgate.db`") {
		t.Error("the page no longer shows the image's listener and DB")
	}
	yamls := blocksOf(sec, "yaml")
	if len(yamls) != 2 || !strings.HasPrefix(yamls[0], "# promptgate.yaml\n") || !strings.HasPrefix(yamls[1], "# compose.yaml\n") {
		t.Fatalf("the Compose example changed: update this test")
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string
		}
	}
	if err := yaml.Unmarshal([]byte(yamls[1]), &compose); err != nil {
		t.Fatal(err)
	}
	pg, ok := compose.Services["promptgate"]
	if !ok {
		t.Fatal("no promptgate service")
	}
	known := []string{EnvUpstreamKey, EnvConfig, EnvListen, EnvDB, EnvAdminListen, EnvAdminToken}
	for k := range pg.Environment {
		if !slices.Contains(known, k) {
			t.Errorf("compose sets %s, which promptgate does not read", k)
		}
	}
	if app := compose.Services["app"].Environment["OPENAI_BASE_URL"]; app != "http://promptgate:8787/v1" {
		t.Errorf("the app's base URL %q", app)
	}
	cfg := writeFile(t, t.TempDir(), "promptgate.yaml", yamls[0])
	if _, err := config.Load(cfg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{{[]string{"--config", cfg}, http.StatusOK}, {nil, http.StatusMisdirectedRequest}} {
		s, _ := operatingServe(t, c.args...)
		req, _ := http.NewRequest(http.MethodGet, s.base+"/models", nil)
		req.Host = "promptgate:8787"
		if code, _, out := respBody(t, req); code != c.want {
			t.Errorf("Host promptgate:8787 with %q: %d %s, want %d", c.args, code, out, c.want)
		}
	}
}

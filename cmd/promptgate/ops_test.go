package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP traces receiver: it decodes every export request it gets.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	problems []string
	spans    map[string]bool // span names
	services map[string]bool
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{spans: map[string]bool{}, services: map[string]bool{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			rc.problems = append(rc.problems, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				rc.problems = append(rc.problems, err.Error())
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			rc.problems = append(rc.problems, "decode: "+err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					rc.services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rc.spans[s.Name] = true
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// serve with OTEL_EXPORTER_OTLP_ENDPOINT sends its spans to the collector, at the latest when it
// stops; and while it runs, preview of another surface goes through its admin API.
func TestServeSendsTraces(t *testing.T) {
	rc := newOTLPReceiver(t)
	var upTraceparent string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upTraceparent = r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	db := filepath.Join(t.TempDir(), "pg.db")
	e := map[string]string{"PROMPTGATE_DB": db, "OTEL_EXPORTER_OTLP_ENDPOINT": rc.URL, "OTEL_SERVICE_NAME": "pg-test"}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", up.URL + "/v1"}, nil, pw, io.Discard, envMap(e))
		pw.Close()
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed nothing: %v", err)
	}
	adminLine, _ := br.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, br) }()
	base := strings.Fields(line)[4]
	adminURL := strings.TrimSpace(strings.Fields(adminLine)[4])

	req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(upTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(upTraceparent, "00f067aa0ba902b7") {
		t.Fatalf("%d, upstream traceparent %q", resp.StatusCode, upTraceparent)
	}

	cliEnv := map[string]string{"PROMPTGATE_DB": db, "PROMPTGATE_ADMIN_URL": adminURL}
	msg := `{"model":"claude-sonnet-4-5","max_tokens":9,"system":"app","messages":[{"role":"user","content":"hi"}]}`
	out, errOut, err := runCmd(t, cliEnv, msg, "preview", "--path", "/v1/messages")
	if err != nil || gjson.Get(out, "path").String() != "/v1/messages" || !strings.Contains(gjson.Get(out, "upstreamRequest.system").String(), "=== SYSTEM CORE ===") || !strings.Contains(errOut, "admin API") {
		t.Fatalf("preview --path through the admin API: %v %s %s", err, out, errOut)
	}

	cancel() // shutdown flushes the spans
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.problems) > 0 {
		t.Fatalf("receiver problems: %v", rc.problems)
	}
	for _, name := range []string{"POST /v1/chat/completions", "promptgate.validate", "promptgate.route", "promptgate.filter_tools", "promptgate.assemble", "promptgate.upstream", "promptgate.vet"} {
		if !rc.spans[name] {
			t.Errorf("no span %q received; got %v", name, rc.spans)
		}
	}
	if !rc.services["pg-test"] {
		t.Errorf("service names %v", rc.services)
	}
}

// A bad OTEL_* value stops serve before it listens, naming the variable.
func TestServeRefusesBadTracingEnv(t *testing.T) {
	e := map[string]string{"PROMPTGATE_DB": filepath.Join(t.TempDir(), "pg.db"), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, nil, &out, io.Discard, envMap(e))
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") || strings.Contains(out.String(), "listening") {
		t.Fatalf("%v %s", err, out.String())
	}
}

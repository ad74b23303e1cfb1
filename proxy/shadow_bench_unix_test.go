//go:build unix

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/store"
)

// cannedUpstream answers every request with one answer of the surface, in process: the benchmark
// measures promptgate's own work, not a socket's.
type cannedUpstream struct {
	body        []byte
	contentType string
}

func (c cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {c.contentType}}, Body: io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: -1, Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// discardAudit records nothing.
type discardAudit struct{}

func (discardAudit) Record(context.Context, audit.Event) {}

// BenchmarkShadow is the cost of a version in shadow beside the same traffic without one: the
// 40-message conversation of BenchmarkFlowThroughProxy answered with one send_email call, through
// the proxy's handler with an in-process upstream, under a protocol with information-flow rules
// ("none"); with a version in shadow whose tool-call rules differ ("shadow": the prompt is the
// active one's, the conversation read again under its rules, each call judged again); with one
// whose tools and rules text differ too ("shadow-prompt": its prompt is built as well); and, for
// the record, "shadow-learn": learn mode on as well (its reading of the calls runs on the learn
// store's goroutine). The shadow's cost is the difference with "none"; "none" is the active
// version's own cost.
func BenchmarkShadow(b *testing.B) {
	active := json.RawMessage(`{"id":"bench","promptTemplate":{"base":"base_tool_call_v2","overrides":{"rules":"- be brief"}},"allowClientSelection":true,` +
		`"tools":{"allow":["*"]},"toolCalls":{"onViolation":"refuse"}}`)
	var rules map[string]json.RawMessage
	if err := json.Unmarshal([]byte(flowBenchRules), &rules); err != nil {
		b.Fatal(err)
	}
	for k, v := range rules {
		var err error
		if active, err = sjson.SetRawBytes(active, "toolCalls."+k, v); err != nil {
			b.Fatal(err)
		}
	}
	stricter, _ := sjson.SetRawBytes(active, "toolCalls.provenance.-1",
		[]byte(`{"id":"subject","tool":"send_email","path":"subject","as":"text","from":["user"],"optional":true}`))
	stricter, _ = sjson.SetBytes(stricter, "toolCalls.budgets.0.maxCalls", 1)
	prompted, _ := sjson.SetBytes(stricter, "promptTemplate.overrides.rules", "- be brief\n- mail colleagues only")
	prompted, _ = sjson.SetRawBytes(prompted, "tools.allow", []byte(`["read_webpage","get_contacts","send_email"]`))

	call := flowtest.Call{ID: "call_send", Tool: "send_email", Args: json.RawMessage(`{"recipients":["bob@acme.com"],"subject":"Summary","body":"Planning notes are in; agenda at https://intranet.acme.com/agenda/7. Questions to carol@partner.org."}`)}
	tools := []string{"read_webpage", "get_contacts", "get_unread_emails", "send_email"}
	turn := scriptedTurn{calls: []flowtest.Call{call}, in: 1, out: 1}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			if stream && sf != flowtest.Chat {
				continue
			}
			up := cannedUpstream{body: []byte(turn.body(sf, 1)), contentType: "application/json"}
			name := string(sf)
			if stream {
				up = cannedUpstream{body: []byte(strings.Join(turn.events(sf, 1), "")), contentType: "text/event-stream"}
				name += "-stream"
			}
			body := flowRequest(b, sf, flowBenchConversation(), tools, stream, nil)
			for _, v := range []struct {
				name   string
				shadow json.RawMessage
				learn  bool
			}{{"none", nil, false}, {"shadow", stricter, false}, {"shadow-prompt", prompted, false}, {"shadow-learn", stricter, true}} {
				b.Run(name+"/"+v.name, func(b *testing.B) {
					h := shadowBenchServer(b, active, v.shadow, v.learn, up)
					b.SetBytes(int64(len(body)))
					b.ReportAllocs()
					cpu := processCPU(b)
					for b.Loop() {
						req := httptest.NewRequest(http.MethodPost, flowPaths[sf], bytes.NewReader(body))
						req.Host = "127.0.0.1"
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Authorization", "Bearer sk-test")
						rec := httptest.NewRecorder()
						h.srv.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(call.ID)) {
							b.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
						}
					}
					if v.learn {
						b.StopTimer()
						_ = h.learn.Flush(context.Background()) // its reading of the calls is work of the requests
					}
					b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// processCPU is the CPU time the process has used (user and system, every thread: the garbage
// collector's and learn mode's goroutine included), in nanoseconds: the work a benchmark's requests
// cost, less sensitive than the time between them to other processes of a shared machine.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchServer is the proxy's handler and its learn store (nil without one).
type benchServer struct {
	srv   http.Handler
	learn *learn.Store
}

// shadowBenchServer is the proxy's handler under the protocol active, with shadow (when not nil) as
// a version in shadow and, with withLearn, a learn store.
func shadowBenchServer(b *testing.B, active, shadow json.RawMessage, withLearn bool, up http.RoundTripper) benchServer {
	b.Helper()
	e := testEngine(b, "defaultProtocol: bench\n", nil, nil, []json.RawMessage{active})
	if shadow != nil {
		st := e.defs.store.(store.Store)
		v, err := st.AddVersion(context.Background(), store.KindProtocol, shadow, "bench", "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.SetShadow(context.Background(), "bench", v); err != nil {
			b.Fatal(err)
		}
	}
	u, _ := url.Parse("http://upstream.test/v1")
	gu, _ := url.Parse("http://upstream.test")
	o := Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}, "gemini": {URL: gu}},
		Transport: up, Audit: discardAudit{}}
	if withLearn {
		ls, err := learn.Open(filepath.Join(b.TempDir(), "bench.learn.db"), learn.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ls.Close() })
		o.Learn = ls
	}
	s, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	return benchServer{srv: s, learn: o.Learn}
}

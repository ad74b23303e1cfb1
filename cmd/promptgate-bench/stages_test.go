package main

// Per-stage benchmarks of promptgate's request path, on the harness's own requests (8 KB, 2 KB),
// answer and 200-event streams, each next to a baseline: the floor the stage is compared with. The
// packages have their own benchmarks too (policy/jsoncheck, assembly, proxy/surface/chat, plugins);
// these add the stages that had none (route, filter, vet, the per-request checker, the whole
// request side, a body's vetting, each surface's relay of a stream with a call) and put them on the
// harness's inputs. handler_bench_test.go has the whole request, budget_test.go the allocation
// budgets.
//
//	go test -run '^$' -bench . -benchmem ./cmd/promptgate-bench/

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/surface/chat"
	"github.com/promptgate/promptgate/proxy/surface/messages"
	"github.com/promptgate/promptgate/proxy/surface/responses"
)

// stageFixture is the bench pipeline (real bbolt store, bench protocol, config) and one prepared 8
// KB request.
type stageFixture struct {
	p      *pipeline
	body   []byte
	header http.Header
	eff    *policy.Effective
	cat    policy.Catalog
	chat   surface.Request
	prep   *proxy.Prepared
	cfg    *config.File
}

func newStageFixture(b *testing.B) *stageFixture {
	b.Helper()
	p, err := openPipeline(context.Background(), b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	f := &stageFixture{p: p, body: chat8KBody(), header: http.Header{"Authorization": {"Bearer sk-bench"}, "Content-Type": {"application/json"}}}
	if f.cfg, err = config.Parse([]byte(benchConfig)); err != nil {
		b.Fatal(err)
	}
	prot, err := policy.ParseProtocol([]byte(benchProtocol))
	if err != nil {
		b.Fatal(err)
	}
	f.cat = catalogOf{"bench": prot}
	if f.chat, err = (chat.Surface{}).Parse(assembly.NewBody(f.body), surface.Target{}); err != nil {
		b.Fatal(err)
	}
	if f.eff, err = policy.NewRouter(f.cfg.Policy()).Resolve(policy.Request{Path: proxy.PathChat, Model: f.chat.Model, Header: f.header}, f.cat); err != nil {
		b.Fatal(err)
	}
	if f.prep, err = p.engine.Prepare(context.Background(), proxy.Input{Path: proxy.PathChat, Header: f.header, Body: f.body}); err != nil {
		b.Fatal(err)
	}
	return f
}

// catalogOf is a policy.Catalog of fixed protocols.
type catalogOf map[string]*policy.Protocol

func (c catalogOf) Protocol(id string) (*policy.Protocol, bool) { p, ok := c[id]; return p, ok }

// BenchmarkValidate: jsoncheck.Object (one object, UTF-8, no duplicate keys, depth cap) on the 8 KB
// body; the baseline is encoding/json's Valid.
func BenchmarkValidate(b *testing.B) {
	body := chat8KBody()
	b.Run("jsoncheck", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: proxy.DefaultMaxJSONDepth}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
}

// BenchmarkRoute: Router.Resolve with three routes ahead of the default (header, model glob, path);
// the baseline is the catalog lookup alone.
func BenchmarkRoute(b *testing.B) {
	f := newStageFixture(b)
	yes := true
	cfg := f.cfg.Policy()
	cfg.Routes = []policy.Route{
		{Match: policy.Match{Header: map[string]string{"X-Team": "payments-*"}}, Protocol: "bench"},
		{Match: policy.Match{Model: "o1*"}, Protocol: "bench"},
		{Match: policy.Match{Path: "/v1/chat/completions"}, Protocol: "bench", AllowClientProtocol: &yes},
	}
	router := policy.NewRouter(cfg)
	req := policy.Request{Path: proxy.PathChat, Model: "gpt-4o-mini", Header: f.header}
	b.Run("resolve", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := router.Resolve(req, f.cat); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := f.cat.Protocol("bench"); !ok {
				b.Fatal("no protocol")
			}
		}
	})
}

// BenchmarkAssemble: what the engine does to build the upstream body of the 8 KB request
// (extension, context parse, chat parse, Build with budgets, the chat rewrite, on one Body); the
// baseline decodes the body into a map and encodes it again, the naive rewrite.
func BenchmarkAssemble(b *testing.B) {
	f := newStageFixture(b)
	tmpl := f.prep.Template
	settings := f.p.settings
	sf := chat.Surface{}
	b.Run("assemble", func(b *testing.B) {
		b.SetBytes(int64(len(f.body)))
		b.ReportAllocs()
		for b.Loop() {
			body := assembly.NewBody(f.body)
			ext, err := body.Extension()
			if err != nil {
				b.Fatal(err)
			}
			v, err := ctxjson.Parse(ext.Context)
			if err != nil {
				b.Fatal(err)
			}
			c, err := sf.Parse(body, surface.Target{})
			if err != nil {
				b.Fatal(err)
			}
			p := assembly.Build(tmpl, assembly.Layers{
				Rules: f.eff.Rules, Directives: f.eff.Directives, Application: c.Application,
				Meta: ctxjson.Meta{Protocol: f.eff.ID, Sources: []string{"request"}}, Sources: []ctxjson.Source{{Name: "request", Value: v}},
				Tools: f.prep.Kept, NativeTools: c.NativeTools,
			}, settings)
			if _, err := sf.Rewrite(body, p, f.prep.Kept, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-json-map", func(b *testing.B) {
		b.SetBytes(int64(len(f.body)))
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(f.body, &m); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFilter: Effective.Filter on the three declared tools (allowlist, deny, the config's
// access policy); the baseline copies the tools into a new slice.
func BenchmarkFilter(b *testing.B) {
	f := newStageFixture(b)
	access := policy.ToolAccess{Config: f.cfg.Tools}
	b.Run("filter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if kept, _ := f.eff.Filter(f.chat.Tools, access); len(kept) != 2 {
				b.Fatal(len(kept))
			}
		}
	})
	b.Run("baseline-copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			kept := make([]policy.Tool, 0, len(f.chat.Tools))
			kept = append(kept, f.chat.Tools...)
			if len(kept) != 3 {
				b.Fatal(len(kept))
			}
		}
	})
}

// checkerFor builds the tool-call checker of a prepared request the way proxy.Server built it for
// every response before the caches: allowed names and schemas of the kept tools, the protocol's
// argument rules compiled again, each tool's schema compiled again on its first call.
func checkerFor(b *testing.B, prep *proxy.Prepared) *vet.Checker {
	rules, err := vet.CompileRules(prep.Protocol.ArgRules)
	if err != nil {
		b.Fatal(err)
	}
	return newChecker(prep, rules, nil)
}

// newChecker is the checker proxy.Server builds for each response (response.go, checker): rules
// compiled once per definitions snapshot and the server's shared schema cache.
func newChecker(prep *proxy.Prepared, rules *vet.RuleSet, schemas *vet.SchemaCache) *vet.Checker {
	allowed := make(map[string]bool, len(prep.Kept))
	schemaOf := make(map[string][]byte, len(prep.Kept))
	for _, t := range prep.Kept {
		allowed[t.Name] = true
		if len(t.Schema) > 0 {
			schemaOf[t.Name] = t.Schema
		}
	}
	return vet.NewChecker(vet.Policy{Allowed: allowed, Schemas: schemaOf, Rules: rules,
		Mode: prep.Protocol.OnViolation, Atomic: prep.Protocol.Atomic, MaxDepth: proxy.DefaultMaxJSONDepth,
		SchemaCache: schemas})
}

// cachedChecker returns a function that builds checkers as the server does now: one rule set, one
// cache.
func cachedChecker(tb testing.TB, prep *proxy.Prepared) func() *vet.Checker {
	rules, err := vet.CompileRules(prep.Protocol.ArgRules)
	if err != nil {
		tb.Fatal(err)
	}
	cache := vet.NewSchemaCache(vet.DefaultSchemaCacheSize)
	return func() *vet.Checker { return newChecker(prep, rules, cache) }
}

// BenchmarkVet: Checker.Check of one get_ticket call (allowed name, JSON object, the declared
// schema, the ticket-id pattern rule). "uncached" is what every response paid before the caches: a
// new checker with the rules' regexps and the tool's schema compiled again; "per-request" is what
// it pays now: a new checker on the snapshot's compiled rules and the server's schema cache; "warm"
// reuses one checker. The baseline is jsoncheck.Object on the arguments alone.
func BenchmarkVet(b *testing.B) {
	f := newStageFixture(b)
	args := []byte(`{"id": "T-12345"}`)
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _, ok := checkerFor(b, f.prep).Check("get_ticket", args); !ok {
				b.Fatal(r)
			}
		}
	})
	b.Run("per-request", func(b *testing.B) {
		mk := cachedChecker(b, f.prep)
		b.ReportAllocs()
		for b.Loop() {
			if r, _, ok := mk().Check("get_ticket", args); !ok {
				b.Fatal(r)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		c := checkerFor(b, f.prep)
		b.ReportAllocs()
		for b.Loop() {
			if r, _, ok := c.Check("get_ticket", args); !ok {
				b.Fatal(r)
			}
		}
	})
	b.Run("baseline-jsoncheck", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := jsoncheck.Object(args, jsoncheck.Limits{MaxDepth: proxy.DefaultMaxJSONDepth}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// eventReader returns one SSE event per Read, as an upstream connection tends to.
type eventReader struct{ evs [][]byte }

func (r *eventReader) Read(p []byte) (int, error) {
	if len(r.evs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.evs[0])
	if n == len(r.evs[0]) {
		r.evs = r.evs[1:]
	} else {
		r.evs[0] = r.evs[0][n:]
	}
	return n, nil
}

// onlyReader hides io.WriterTo, so that the baseline copies through the buffer too.
type onlyReader struct{ io.Reader }

// relayed is a stream relay of one surface as the proxy opens it on an upstream body.
type relayed interface {
	io.Reader
	Blocked() int
}

// BenchmarkRelay: each surface's stream relay over the harness's 200-event streams (chat text only,
// and each surface's stream with a get_ticket call, held, vetted and released), read as
// httputil.ReverseProxy reads (32 KiB buffer), one event per upstream Read; the baseline copies the
// same events through the same buffer, as the bare proxy does.
func BenchmarkRelay(b *testing.B) {
	f := newStageFixture(b)
	chatOpen := func(up io.ReadCloser, c *vet.Checker) relayed { return chat.NewStream(up, c, nil) }
	for _, s := range []struct {
		name string
		evs  [][]byte
		open func(io.ReadCloser, *vet.Checker) relayed
	}{
		{"text200", streamEvents(200, false), chatOpen},
		{"tool200", streamEvents(200, true), chatOpen},
		{"messages-tool200", messagesEvents(200), func(up io.ReadCloser, c *vet.Checker) relayed { return messages.NewStream(up, c, nil) }},
		{"responses-tool200", responsesEvents(200), func(up io.ReadCloser, c *vet.Checker) relayed { return responses.NewStream(up, c, nil) }},
	} {
		size := len(bytes.Join(s.evs, nil))
		buf := make([]byte, 32<<10)
		mk := cachedChecker(b, f.prep)
		b.Run(s.name+"/stream", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			loopCPU(b, func() {
				st := s.open(io.NopCloser(&eventReader{evs: append([][]byte(nil), s.evs...)}), mk())
				if _, err := io.CopyBuffer(io.Discard, st, buf); err != nil {
					b.Fatal(err)
				}
				if st.Blocked() != 0 {
					b.Fatal("the call was blocked")
				}
			})
		})
		b.Run(s.name+"/baseline-copy", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			loopCPU(b, func() {
				if _, err := io.CopyBuffer(io.Discard, onlyReader{&eventReader{evs: append([][]byte(nil), s.evs...)}}, buf); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkVetBody: the response side of a non-stream answer, chat.Body on the harness's answer
// (text, no call: validated and passed) and on an answer with a get_ticket call (vetted: name,
// schema, rule); the baseline copies the same bytes, as the bare proxy passes a body on.
func BenchmarkVetBody(b *testing.B) {
	f := newStageFixture(b)
	mk := cachedChecker(b, f.prep)
	call := []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1735689600,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_ticket","arguments":"{\"id\": \"T-12345\"}"}}]},"finish_reason":"tool_calls"}]}`)
	for _, a := range []struct {
		name string
		body []byte
	}{{"text", completionJSON(DefaultRespBytes)}, {"call", call}} {
		b.Run(a.name+"/vet", func(b *testing.B) {
			b.SetBytes(int64(len(a.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, res, err := chat.Body(a.body, mk(), nil); err != nil || res.Blocked != 0 {
					b.Fatal(err, res.Blocked)
				}
			}
		})
		b.Run(a.name+"/baseline-copy", func(b *testing.B) {
			b.SetBytes(int64(len(a.body)))
			b.ReportAllocs()
			buf := make([]byte, 32<<10)
			for b.Loop() {
				if _, err := io.CopyBuffer(io.Discard, onlyReader{bytes.NewReader(a.body)}, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrepare: the whole request side of the engine on the 8 KB request (validate, route,
// filter, template from the cache, assemble, rewrite), and on the 40 KB runtime context that must
// be cut to its budget, and on the harness's small chat; the baseline is the 8 KB body copy a bare
// proxy makes.
func BenchmarkPrepare(b *testing.B) {
	f := newStageFixture(b)
	ctx := context.Background()
	b.Run("prepare", func(b *testing.B) {
		b.SetBytes(int64(len(f.body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.p.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: f.header, Body: f.body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	ctx40K := ctx40KBody()
	b.Run("prepare-ctx40k", func(b *testing.B) {
		b.SetBytes(int64(len(ctx40K)))
		b.ReportAllocs()
		for b.Loop() {
			p, err := f.p.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: f.header, Body: ctx40K})
			if err != nil {
				b.Fatal(err)
			}
			if !p.Prompt.ContextTruncated {
				b.Fatal("the context was not truncated")
			}
		}
	})
	for _, sf := range []struct {
		name, path string
		prepare    func(*proxy.Engine, context.Context, proxy.Input) (*proxy.Prepared, error)
		body       []byte
	}{
		{"prepare-responses-ctx40k", proxy.PathResponses, (*proxy.Engine).Prepare, ctx40KSurface(b, "input", "")},
		{"prepare-messages-ctx40k", proxy.PathMessages, (*proxy.Engine).Prepare, ctx40KSurface(b, "messages", "system")},
	} {
		b.Run(sf.name, func(b *testing.B) {
			b.SetBytes(int64(len(sf.body)))
			b.ReportAllocs()
			for b.Loop() {
				p, err := sf.prepare(f.p.engine, ctx, proxy.Input{Path: sf.path, Header: f.header, Body: sf.body})
				if err != nil {
					b.Fatal(err)
				}
				if !p.Prompt.ContextTruncated {
					b.Fatal("the context was not truncated")
				}
			}
		})
	}
	chat2K := chat2KBody(false)
	b.Run("prepare-chat2k", func(b *testing.B) {
		b.SetBytes(int64(len(chat2K)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.p.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: f.header, Body: chat2K}); err != nil {
				b.Fatal(err)
			}
		}
	})
	small := smallBody()
	b.Run("prepare-small", func(b *testing.B) {
		b.SetBytes(int64(len(small)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.p.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: f.header, Body: small}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-copy", func(b *testing.B) {
		b.SetBytes(int64(len(f.body)))
		b.ReportAllocs()
		for b.Loop() {
			buf := bytes.NewBuffer(make([]byte, 0, len(f.body)+bytes.MinRead)) // as the baseline proxy reads a body
			if _, err := buf.ReadFrom(bytes.NewReader(f.body)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPrepareCold: the request side as a request meets it at low load, its code and data out
// of the caches: before each timed request a buffer larger than the last-level cache is written
// over. The baseline is the bare proxy's body copy under the same eviction. At a steady 200 req/s
// the harness's timeline pass finds prepare at about these figures, not at BenchmarkPrepare's
// (docs/performance.md).
func BenchmarkPrepareCold(b *testing.B) {
	f := newStageFixture(b)
	ctx := context.Background()
	evict := make([]byte, 64<<20)
	cold := func(b *testing.B, run func()) {
		for b.Loop() {
			b.StopTimer()
			for i := 0; i < len(evict); i += 64 {
				evict[i]++
			}
			b.StartTimer()
			run()
		}
	}
	for _, w := range []struct {
		name string
		body []byte
	}{{"small", smallBody()}, {"chat8k", f.body}} {
		b.Run("prepare-"+w.name, func(b *testing.B) {
			cold(b, func() {
				if _, err := f.p.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: f.header, Body: w.body}); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("baseline-copy-"+w.name, func(b *testing.B) {
			cold(b, func() {
				buf := bytes.NewBuffer(make([]byte, 0, len(w.body)+bytes.MinRead))
				if _, err := buf.ReadFrom(bytes.NewReader(w.body)); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// ctx40KSurface is the ctx40k request for the Responses API (the messages become "input") or
// Anthropic's Messages API (the system message becomes "system"): the same 40 KB context on another
// surface.
func ctx40KSurface(tb testing.TB, messagesKey, systemKey string) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(ctx40KBody(), &m); err != nil {
		tb.Fatal(err)
	}
	msgs := m["messages"].([]any)
	delete(m, "messages")
	if systemKey != "" {
		m[systemKey] = msgs[0].(map[string]any)["content"]
		msgs = msgs[1:]
		m["max_tokens"] = 256
	}
	m[messagesKey] = msgs
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

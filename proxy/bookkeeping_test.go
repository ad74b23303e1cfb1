package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestKeyRoutes: a route on apiKeySha256 matches the hash of the bearer token or of x-api-key;
// another key, or none, takes the default. The key is hashed only where a route needs it, so this
// holds the routing.
func TestKeyRoutes(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("sk-route"))
	cfg := "defaultProtocol: neutral\nroutes:\n  - match: {apiKeySha256: \"" + hex.EncodeToString(sum[:]) + "\"}\n    protocol: private\n"
	e := testEngine(t, cfg, nil, nil, nil)
	for _, tt := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"bearer", http.Header{"Authorization": {"Bearer sk-route"}}, "private"},
		{"bearer with blanks", http.Header{"Authorization": {"Bearer  sk-route "}}, "private"},
		{"x-api-key", http.Header{"X-Api-Key": {"sk-route"}}, "private"},
		{"other key", http.Header{"Authorization": {"Bearer sk-other"}}, "neutral"},
		{"no key", http.Header{}, "neutral"},
		{"not bearer", http.Header{"Authorization": {"Basic sk-route"}}, "neutral"},
	} {
		p, err := e.Prepare(context.Background(), Input{Path: PathChat, Header: tt.header,
			Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if p.Protocol.ID != tt.want {
			t.Errorf("%s: protocol %s, want %s", tt.name, p.Protocol.ID, tt.want)
		}
	}
	if testEngine(t, "defaultProtocol: neutral\n", nil, nil, nil).router.KeyRouted() || !e.router.KeyRouted() {
		t.Error("KeyRouted does not say whether a route matches on the key")
	}
}

// TestForwardingLine: the forwarding line is logged at debug, with its fields, and not at info.
func TestForwardingLine(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))
		ts := serveProxy(t, Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: mustURL(t, up.URL+"/v1")}}, Log: log})
		if resp, b := postTo(t, ts, PathChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		got := strings.Contains(logs.String(), `"msg":"forwarding","request_id":`) && strings.Contains(logs.String(), `"route":"chat","protocol":"neutral"`)
		if got != (level == slog.LevelDebug) {
			t.Errorf("level %v: forwarding line logged %v:\n%s", level, got, logs.String())
		}
	}
}

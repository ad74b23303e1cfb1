package proxy

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/guard"
)

// The answers promptgate reads whole or holds to vet them are never asked for in a compressed form,
// so what they cost is what the upstream sent: with gzip negotiated, a 60 KiB answer decoded into
// 60 MiB in memory, and 8 of them at once took 1.2 GB. An answer compressed anyway is refused
// (502), not decoded. A passed-through request keeps the client's own Accept-Encoding, and its
// answer is relayed as it comes.
func TestVettedAnswersNotDecompressed(t *testing.T) {
	t.Parallel()
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write([]byte(`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`))
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 8<<20))
	_, _ = zw.Write([]byte(`"},"finish_reason":"stop"}]}`))
	_ = zw.Close()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" || strings.Contains(r.Header.Get("X-Case"), "unasked") {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(bomb.Bytes())
			return
		}
		okCompletion(w, r)
	})
	ts, _ := guardedProxy(t, up.URL, "", guard.Config{})
	for _, path := range []string{PathChat, PathResponses, PathMessages} {
		_, _ = sendTo(t, ts, "POST", path, "", chatBody, jsonType)
	}
	up.mu.Lock()
	for i, h := range up.headers {
		if ae := h.Get("Accept-Encoding"); ae != "" && ae != "identity" {
			t.Errorf("%s was sent upstream with Accept-Encoding %q", up.paths[i], ae)
		}
	}
	up.mu.Unlock()
	resp, b := sendTo(t, ts, "POST", PathChat, "", chatBody, map[string]string{"Content-Type": "application/json", "X-Case": "unasked"})
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "upstream_error") {
		t.Errorf("an answer compressed unasked: %d, %d bytes, want 502 upstream_error", resp.StatusCode, len(b))
	}
	// Passed through: the client asked for gzip itself and gets the compressed bytes.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("passthrough: %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
}

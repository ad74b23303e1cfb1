package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStreamBuffersNotShared checks that the event readers' buffers, which streams borrow from the
// proxy's pool and give back at their end, never carry one stream's bytes into another's:
// concurrent streams, each longer than a buffer, every event naming its own stream, reach each
// client exactly as sent.
func TestStreamBuffersNotShared(t *testing.T) {
	const events, pad = 48, 1500 // about 72 KB per stream: each reader refills its buffer several times
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		b, _ := io.ReadAll(r.Body)
		msgs := gjson.GetBytes(b, "messages").Array()
		tag := msgs[len(msgs)-1].Get("content").Str
		for i := range events {
			_, _ = io.WriteString(w, "data: "+chunk(fmt.Sprintf(`{"content":"%s %d %s"}`, tag, i, strings.Repeat(tag[:1], pad)), "")+"\n\n")
			if i%5 == 0 {
				f.Flush()
			}
		}
		_, _ = io.WriteString(w, "data: "+chunk(`{}`, "stop")+"\n\ndata: [DONE]\n\n")
	})
	ts := newProxy(t, up.URL, "", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 12 {
		wg.Go(func() {
			for round := range 6 {
				tag := fmt.Sprintf("%c-client%d-round%d", 'a'+c, c, round)
				resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(
					`{"model":"m","stream":true,"messages":[{"role":"user","content":"`+tag+`"}]}`))
				if err != nil {
					errs <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := 0
				for ev := range strings.SplitSeq(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
					content := gjson.Get(strings.TrimPrefix(ev, "data: "), "choices.0.delta.content").Str
					if content == "" {
						continue
					}
					if content != fmt.Sprintf("%s %d %s", tag, want, strings.Repeat(tag[:1], pad)) {
						errs <- fmt.Errorf("%s: event %d is %.60q", tag, want, content)
						return
					}
					want++
				}
				if err != nil || want != events || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
					errs <- fmt.Errorf("%s: %d of %d events, err %v", tag, want, events, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

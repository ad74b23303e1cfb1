package redact

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://api.openai.com/v1":                     "https://api.openai.com/v1",
		"http://user:hunter2@127.0.0.1:8080/v1":         "http://***@127.0.0.1:8080/v1",
		"http://sk-hunter2@host/v1":                     "http://***@host/v1",
		"https://host/v1?api-key=hunter2#frag":          "https://host/v1",
		"http://user:hun ter2@host/v1?key=hunter2":      "http://***@host/v1",
		"http://us%zzer:hunter2@host/v1":                "http://***@host/v1",
		"etcd://root:hunter2@10.0.0.1:2379,10.0.0.2/pg": "etcd://***@10.0.0.1:2379,10.0.0.2/pg",
		"::not a url with hunter2@":                     "***@",
		"":                                              "",
	} {
		got := URL(in)
		if got != want || strings.Contains(got, "hunter2") {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://user:hunter2@127.0.0.1:1/v1?key=hunter2", nil)
	_, err := http.DefaultClient.Do(req)
	if err == nil || !strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("net/http error %v: the test needs one that quotes the URL", err)
	}
	got := Error(err)
	if strings.Contains(got.Error(), "hunter2") || !strings.Contains(got.Error(), `"http://***@127.0.0.1:1/v1"`) {
		t.Errorf("Error = %q", got)
	}
	if !errors.Is(got, err) {
		t.Error("the redacted error does not unwrap to the original")
	}
	plain := errors.New("dial tcp: refused")
	if Error(plain) != plain {
		t.Error("an error without a URL changed")
	}
}

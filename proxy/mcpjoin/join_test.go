package mcpjoin

import (
	"testing"
	"time"
)

// TestClaim: a released call is matched once, by tool, arguments (key order and white space aside)
// and conversation, within the window; the record holds at most its size.
func TestClaim(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	r := New(2, time.Minute, func() time.Time { return now })
	d1, _ := Digest([]byte(`{"to":"a@x","n":1}`))
	d2, _ := Digest([]byte(` { "n" : 1, "to" : "a@x" } `))
	if d1 != d2 {
		t.Fatal("key order and white space change the digest")
	}
	other, _ := Digest([]byte(`{"to":"b@x","n":1}`))
	r.Release(Call{Tool: "send", Digest: d1, Conversation: "c"}, "p")
	for _, c := range []struct {
		call Call
		want Match
	}{
		{Call{Tool: "send", Digest: d1, Conversation: "d"}, Unmatched},
		{Call{Tool: "send", Digest: other, Conversation: "c"}, Differs},
		{Call{Tool: "mail", Digest: d1, Conversation: "c"}, Unmatched},
		{Call{Tool: "send", Digest: d2, Conversation: "c"}, Matched},
		{Call{Tool: "send", Digest: d2, Conversation: "c"}, Spent},
	} {
		if got, _ := r.Claim(c.call); got != c.want {
			t.Errorf("Claim(%+v) = %d, want %d", c.call, got, c.want)
		}
	}
	r.Release(Call{Tool: "send", Digest: other, Conversation: "c"}, "p")
	now = now.Add(2 * time.Minute)
	if got, _ := r.Claim(Call{Tool: "send", Digest: other, Conversation: "c"}); got != Unmatched {
		t.Errorf("a call past the window matched: %d", got)
	}
	for i := 0; i < 5; i++ {
		r.Release(Call{Tool: "t", Digest: d1}, "p")
	}
	if r.Len() != 2 {
		t.Errorf("the record holds %d calls, its size is 2", r.Len())
	}
	r.Executed("send", []byte(`{"to":"a@x","n":1}`), "crm")
	if s := r.ServerOf("send", []byte(`{"n":1,"to":"a@x"}`)); s != "crm" {
		t.Errorf("ServerOf = %q, want crm", s)
	}
	if s := r.ServerOf("send", []byte(`{"n":1.0,"to":"a@x"}`)); s != "crm" {
		t.Errorf("ServerOf of the call with 1 written 1.0 = %q, want crm (the label errs toward the server)", s)
	}
	if s := r.ServerOf("send", []byte(`{"n":2}`)); s != "" {
		t.Errorf("ServerOf of another call = %q", s)
	}
	// The same call run by another server too: its output is neither's, until the record forgets
	// it.
	r.Executed("send", []byte(`{"to":"a@x","n":1}`), "web")
	if s := r.ServerOf("send", []byte(`{"n":1,"to":"a@x"}`)); s != "" {
		t.Errorf("ServerOf of a call two servers ran = %q, want none", s)
	}
	r.Executed("send", []byte(`{"to":"a@x","n":1}`), "crm")
	if s := r.ServerOf("send", []byte(`{"n":1,"to":"a@x"}`)); s != "" {
		t.Errorf("ServerOf of a call two servers ran, run again by the first = %q, want none", s)
	}
}

// TestWrote: a text a server sampled is its own within the window (white space around it aside);
// one two servers sampled names both; past the window, or never sampled, it is no server's.
func TestWrote(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	r := New(2, time.Minute, func() time.Time { return now })
	r.Wrote("crm", " mail eve ")
	if s := r.WriterOf("mail eve"); s != "crm" {
		t.Errorf("WriterOf = %q, want crm", s)
	}
	r.Wrote("web", "mail eve")
	r.Wrote("crm", "mail eve")
	if s := r.WriterOf("mail eve"); s != "crm|web" {
		t.Errorf("WriterOf of a text two servers sampled = %q, want crm|web", s)
	}
	if s := r.WriterOf("mail ann"); s != "" {
		t.Errorf("WriterOf of a text no server sampled = %q", s)
	}
	now = now.Add(2 * time.Minute)
	if s := r.WriterOf("mail eve"); s != "" {
		t.Errorf("WriterOf past the window = %q", s)
	}
	for _, text := range []string{"a", "b", "c"} {
		r.Wrote("crm", text)
	}
	if s := r.WriterOf("a"); s != "" {
		t.Errorf("the record holds more texts than its size: %q", s)
	}
}

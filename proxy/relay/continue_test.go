package relay

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestAddUsage: usage objects of the rounds of a continued answer are summed member by member at
// any depth; a member of one only is kept, a null does not erase a number, and what is not an
// object is no usage.
func TestAddUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, want string }{
		{`{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`, `{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27}`,
			`{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42}`},
		{`{"input_tokens":1,"input_tokens_details":{"cached_tokens":2}}`, `{"input_tokens":3,"input_tokens_details":{"cached_tokens":4},"output_tokens":5}`,
			`{"input_tokens":4,"input_tokens_details":{"cached_tokens":6},"output_tokens":5}`},
		{`{"cost":0.5}`, `{"cost":0.25}`, `{"cost":0.75}`},
		{`{"cache_creation_input_tokens":3}`, `{"cache_creation_input_tokens":null}`, `{"cache_creation_input_tokens":3}`},
		{`{"service_tier":"standard"}`, `{"service_tier":"priority"}`, `{"service_tier":"priority"}`},
		// Gemini's lists of counts, added by modality.
		{`{"promptTokenCount":10,"promptTokensDetails":[{"modality":"TEXT","tokenCount":8},{"modality":"IMAGE","tokenCount":2}]}`,
			`{"promptTokenCount":20,"promptTokensDetails":[{"modality":"TEXT","tokenCount":17},{"modality":"AUDIO","tokenCount":3}]}`,
			`{"promptTokenCount":30,"promptTokensDetails":[{"modality":"TEXT","tokenCount":25},{"modality":"IMAGE","tokenCount":2},{"modality":"AUDIO","tokenCount":3}]}`},
		{`{"l":[1,2]}`, `{"l":[{"modality":"TEXT","tokenCount":1}]}`, `{"l":[{"modality":"TEXT","tokenCount":1}]}`},
		{`{"l":[{"modality":"TEXT","tokenCount":1}]}`, `{"l":["x"]}`, `{"l":["x"]}`},
		{``, `{"a":1}`, `{"a":1}`},
		{`{"a":1}`, ``, `{"a":1}`},
		{`{"a":1}`, `null`, `{"a":1}`},
		{`[1]`, `{"a":1}`, `{"a":1}`},
		{`not json`, `{"a":1}`, `{"a":1}`},
		{``, ``, ``},
		{`null`, `"x"`, ``},
	} {
		got := AddUsage([]byte(tc.a), []byte(tc.b))
		if tc.want == "" {
			if got != nil {
				t.Errorf("AddUsage(%s, %s) = %s, want nil", tc.a, tc.b, got)
			}
			continue
		}
		var x, y any
		if json.Unmarshal(got, &x) != nil || json.Unmarshal([]byte(tc.want), &y) != nil || !sameValue(x, y) {
			t.Errorf("AddUsage(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

func sameValue(x, y any) bool {
	a, _ := json.Marshal(x)
	b, _ := json.Marshal(y)
	return string(a) == string(b)
}

// TestDeliverGoesAheadOfTheParkedRound: what a surface delivers while a round is parked goes out
// whatever becomes of the round, before the parked output; a continued round drops the parked
// output alone.
func TestDeliverGoesAheadOfTheParkedRound(t *testing.T) {
	t.Parallel()
	r := New(io.NopCloser(strings.NewReader("")), nil, Surface{})
	r.Deliver([]byte("a;"))
	r.SetNext(func(Turn) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("")), nil })
	r.Refuse(Answered{ID: "c1", Tool: "t"})
	r.Out = append(r.Out, "notice;"...)
	r.Deliver([]byte("text;"))
	if string(r.Out) != "a;text;notice;" {
		t.Fatalf("out %q", r.Out)
	}
	if !r.EndRound(Turn{}) || string(r.Out) != "a;text;" {
		t.Errorf("continued: out %q", r.Out)
	}
}

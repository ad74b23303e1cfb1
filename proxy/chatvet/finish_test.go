package chatvet

import (
	"bytes"
	"testing"
)

// allNull is the one-pass form of the two counts noteFinish used to compare.
func FuzzAllNull(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[{"finish_reason":null},{"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"finish_reason":"stop"},{"finish_reason":null}]}`,
		`"finish_reason"finish_reason":null`, `"finish_reason":null"finish_reason":null`,
		`"finish_reason": null`, `"finish_reason":nul`, `"finish_reason":nullx"finish_reason"`,
		`{"delta":{"content":"\"finish_reason\":null"},"finish_reason":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := bytes.Count(data, finishKey) == bytes.Count(data, finishNull)
		if got := allNull(data); got != want {
			t.Fatalf("allNull(%q) = %v, the counts say %v", data, got, want)
		}
	})
}

package policytest

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/sse"
)

// Surfaces by the names a case's messages use.
const (
	surfaceChat      = "chat"
	surfaceResponses = "responses"
	surfaceMessages  = "messages"
	surfaceGemini    = "gemini"
)

// surfaceOf is the API of a rewritten route's path (one proxy.PreviewPath takes).
func surfaceOf(path string) string {
	p, _, _ := strings.Cut(path, "?")
	switch p {
	case proxy.PathChat:
		return surfaceChat
	case proxy.PathResponses:
		return surfaceResponses
	case proxy.PathMessages:
		return surfaceMessages
	}
	return surfaceGemini
}

// answerMarks are, by surface, the member every answer of the API has at its top (a body, or each
// event of a stream), with what it is; a case's answer without it was written for another API. The
// proxy vets only the calls it recognises and passes the rest, so a body of the wrong API would
// pass a case silently.
func answerMarks(surface string, stream bool) (path, what string) {
	switch {
	case surface == surfaceChat:
		return "choices", "a Chat Completions answer (choices)"
	case surface == surfaceResponses && stream:
		return "type", "a Responses stream event (type)"
	case surface == surfaceResponses:
		return "output", "a Responses answer (output)"
	case surface == surfaceMessages:
		return "type", "an Anthropic Messages answer (type)"
	}
	return "candidates", "a Gemini answer (candidates)"
}

// checkAnswerShape refuses an answer that is not of the API of path: a success body or event
// without the member every answer of that API has. Error answers (status 400 and up) are the API's
// error objects.
func checkAnswerShape(path string, a answer) error {
	if a.status >= 400 {
		return nil
	}
	sf := surfaceOf(path)
	mark, what := answerMarks(sf, a.stream)
	if !a.stream {
		if !gjson.GetBytes(a.bytes(), mark).Exists() {
			return fmt.Errorf("not %s: the request goes to %s; write the answer that API gives", what, path)
		}
		return nil
	}
	for i, data := range eventData(a.bytes()) {
		d := bytes.TrimSpace(data)
		if bytes.HasPrefix(d, []byte("[DONE]")) || !gjson.ValidBytes(d) {
			continue // [DONE], or data the proxy itself judges (a malformed event is its to find)
		}
		if !gjson.GetBytes(d, mark).Exists() && !gjson.GetBytes(d, "error").Exists() && !(sf == surfaceGemini && gjson.GetBytes(d, "usageMetadata").Exists()) {
			return fmt.Errorf("event %d is not %s: the request goes to %s; write the events that API streams", i+1, what, path)
		}
	}
	return nil
}

// eventData is the data of each event of an SSE stream that has data, in order, read by the proxy's
// reader.
func eventData(stream []byte) [][]byte {
	var out [][]byte
	r := sse.NewReader(bytes.NewReader(stream))
	for {
		ev, err := r.Next()
		if err != nil {
			return out
		}
		if ev.HasData {
			out = append(out, bytes.Clone(ev.Data))
		}
	}
}

package messages

import (
	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/surface"
)

// The request side on raw bodies, for the tests.

func parseMessages(body []byte) (*surface.Request, error) {
	r, err := parse(assembly.NewBody(body))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func messagesToolChoice(body []byte, kept []policy.Tool) error {
	return checkToolChoice(assembly.NewBody(body), kept)
}

func rewriteMessages(body []byte, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	return rewrite(assembly.NewBody(body), p, kept, removedAny)
}

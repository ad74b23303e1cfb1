package assembly

import (
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// PathExtension is the request's own top-level field: read by the proxy, never sent upstream.
const PathExtension = "promptgate"

// Extension is the request's "promptgate" field.
type Extension struct {
	Protocol, Workflow, User, Conversation string
	// Context is the raw JSON of promptgate.context (untrusted data), nil when absent.
	Context []byte
}

// Invalid is the refusal of a request whose shape is wrong (policy.CodeInvalidRequest) about param.
func Invalid(param, format string, args ...any) *policy.Error {
	return &policy.Error{Code: policy.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// Extension reads the top-level "promptgate" field of any surface's body. Unknown keys and values
// of the wrong type are errors, so that a typo never silently weakens a request's policy.
func (b *Body) Extension() (Extension, error) {
	var x Extension
	f := b.Get(PathExtension)
	if !f.Exists() {
		return x, nil
	}
	if !f.IsObject() {
		return x, Invalid(PathExtension, "promptgate must be an object")
	}
	var err error
	b.extension(f, func(key string, v gjson.Result) bool {
		str := func(dst *string) {
			if v.Type != gjson.String {
				err = Invalid(PathExtension+"."+key, "promptgate.%s must be a string", key)
				return
			}
			*dst = v.String()
		}
		switch key {
		case "protocol":
			str(&x.Protocol)
		case "workflow":
			str(&x.Workflow)
		case "user":
			str(&x.User)
		case "conversation":
			str(&x.Conversation)
		case "context":
			if v.Type != gjson.Null {
				x.Context = rawOf(b.raw, v)
			}
		default:
			err = Invalid(PathExtension+"."+key, "unknown field promptgate.%s; known: protocol, workflow, user, conversation, context", key)
		}
		return err == nil
	})
	return x, err
}

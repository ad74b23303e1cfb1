package proxy

import (
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/store"
)

// ValidateDefinition is the store's validation hook: nothing that the pipeline could not use is ever
// stored. Protocols must parse and validate; templates must have well-placed placeholders.
func ValidateDefinition(kind store.Kind, _ string, body []byte) error {
	switch kind {
	case store.KindProtocol:
		_, err := policy.ParseProtocol(body)
		return err
	case store.KindTemplate:
		return assembly.ValidateTemplate(gjson.GetBytes(body, "text").String())
	}
	return nil
}

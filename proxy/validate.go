package proxy

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/mcppin"
	"github.com/promptgate/promptgate/store"
)

// ValidateDefinition is the store's validation hook: nothing that the pipeline could not use is
// ever stored. Protocols must parse and validate; templates must have well-placed placeholders; MCP
// pin sets must be sets (mcppin.Parse).
func ValidateDefinition(kind store.Kind, _ string, body []byte) error {
	switch kind {
	case store.KindProtocol:
		_, err := policy.ParseProtocol(body)
		return err
	case store.KindTemplate:
		return assembly.ValidateTemplate(gjson.GetBytes(body, "text").String())
	case store.KindMCPPins:
		_, err := mcppin.Parse(body)
		return err
	}
	return nil
}

// CheckLinks is the store's Links hook: the protocols a change touches must leave the active
// workflows one level deep (policy.CheckExtends).
func CheckLinks(active store.Snapshot, changed []string) error {
	bodies := make(map[string][]byte, len(active.Protocols))
	for id, rec := range active.Protocols {
		bodies[id] = rec.Body
	}
	var ids []string
	for _, key := range changed {
		if id, ok := strings.CutPrefix(key, string(store.KindProtocol)+"/"); ok {
			ids = append(ids, id)
		}
	}
	return policy.CheckExtends(bodies, ids)
}

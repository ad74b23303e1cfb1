package proxy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
)

// Report is the preview of one request: what would be sent upstream and why. The admin endpoint and the
// `promptgate preview` command print it.
type Report struct {
	TemplateName      string           `json:"templateName"`
	TemplateVersion   int              `json:"templateVersion"`
	UsesLayeredBlocks bool             `json:"usesLayeredBlocks"`
	ProtocolID        string           `json:"protocolId"`
	ProtocolVersion   int              `json:"protocolVersion"`
	BaseProtocolID    string           `json:"baseProtocolId"`
	Modules           ReportModules    `json:"modules"`
	Tools             ReportTools      `json:"tools"`
	Sizes             assembly.Sizes   `json:"sizes"`
	Context           ReportContext    `json:"context"`
	UpstreamRequest   *json.RawMessage `json:"upstreamRequest"`
}

// ReportModules is the module mode and switched-off modules.
type ReportModules struct {
	Mode string   `json:"mode"`
	Off  []string `json:"off"`
}

// ReportTools are the kept and removed tools.
type ReportTools struct {
	Kept    []string         `json:"kept"`
	Removed []policy.Removal `json:"removed"`
}

// ReportContext says whether the runtime context or the directives were cut.
type ReportContext struct {
	Truncated           bool `json:"truncated"`
	DirectivesTruncated bool `json:"directivesTruncated"`
}

// Preview prepares a chat request exactly as the proxy would, and reports it. It calls no upstream.
func (e *Engine) Preview(ctx context.Context, in Input) ([]byte, error) {
	p, err := e.PrepareChat(ctx, in)
	if err != nil {
		return nil, err
	}
	return MarshalReport(p)
}

// MarshalReport renders the report with upstreamRequest holding the exact upstream body, byte for byte.
func MarshalReport(p *Prepared) ([]byte, error) {
	r := Report{
		TemplateName:      p.Template.Name,
		TemplateVersion:   p.Template.Version,
		UsesLayeredBlocks: p.Template.Layered,
		ProtocolID:        p.Protocol.ID,
		ProtocolVersion:   p.Protocol.Version,
		BaseProtocolID:    p.Protocol.BaseID,
		Modules:           ReportModules{Mode: p.Protocol.Modules.Mode.String(), Off: nonNil(p.Protocol.Modules.Off)},
		Tools:             ReportTools{Kept: make([]string, 0, len(p.Kept)), Removed: p.Removed},
		Sizes:             p.Prompt.Sizes,
		Context:           ReportContext{Truncated: p.Prompt.ContextTruncated, DirectivesTruncated: p.Prompt.DirectivesTruncated},
	}
	if r.Tools.Removed == nil {
		r.Tools.Removed = []policy.Removal{}
	}
	for _, t := range p.Kept {
		r.Tools.Kept = append(r.Tools.Kept, t.Name)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("proxy: preview report: %w", err)
	}
	if b, err = sjson.SetRawBytes(b, "upstreamRequest", p.Body); err != nil {
		return nil, fmt.Errorf("proxy: preview report: %w", err)
	}
	return b, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

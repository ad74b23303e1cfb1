package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
)

// Report is the preview of one request: what would be sent upstream and why. The admin endpoint and
// the `promptgate preview` command print it.
type Report struct {
	// Path is the route previewed: PathChat, PathResponses, PathMessages or a Gemini model's path.
	Path              string         `json:"path"`
	TemplateName      string         `json:"templateName"`
	TemplateVersion   int            `json:"templateVersion"`
	UsesLayeredBlocks bool           `json:"usesLayeredBlocks"`
	ProtocolID        string         `json:"protocolId"`
	ProtocolVersion   int            `json:"protocolVersion"`
	BaseProtocolID    string         `json:"baseProtocolId"`
	Modules           ReportModules  `json:"modules"`
	Tools             ReportTools    `json:"tools"`
	Sizes             assembly.Sizes `json:"sizes"`
	Context           ReportContext  `json:"context"`
	// Flow is the information-flow view of the request; nil (left out) when its protocol has no
	// such rule.
	Flow *ReportFlow `json:"flow,omitempty"`
	// Shadow is what the protocol's version in shadow makes of the request; nil (left out) when
	// none is in shadow. Nothing of it is in upstreamRequest.
	Shadow          *ReportShadow    `json:"shadow,omitempty"`
	UpstreamRequest *json.RawMessage `json:"upstreamRequest"`
}

// ReportShadow is the request side of the version in shadow beside the active one's: the tools it
// would keep, the size of the prompt it would build, whether it would refuse the request, its
// information-flow view.
type ReportShadow struct {
	ProtocolVersion int            `json:"protocolVersion"`
	Tools           ReportTools    `json:"tools"`
	Sizes           assembly.Sizes `json:"sizes"`
	// Refused is the error the version in shadow would answer with; nil when it takes the request.
	Refused *ReportRefusal `json:"refused"`
	Flow    *ReportFlow    `json:"flow,omitempty"`
	// Error says why the version in shadow could not judge the request ("" when it did).
	Error string `json:"error,omitempty"`
}

// ReportRefusal is a refusal's code and message.
type ReportRefusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ReportFlow is what the information-flow rules make of a request: the protocol's rules and which
// sources they trust, and the conversation as they read it (its sources, trusted or not, the
// history unseen, the calls so far, the rules that apply to the kept tools and their state now).
// UpstreamRequest is the first round's body; in onViolation "continue", a next round is that body
// with the model's turn and promptgate's refusals appended.
type ReportFlow struct {
	OnViolation  string           `json:"onViolation"`
	Policy       flow.Explanation `json:"policy"`
	Conversation flow.Summary     `json:"conversation"`
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

// PreviewPaths are the rewritten routes' paths, as the help and errors of the preview list them (a
// wildcard in braces); PreviewPath says whether a path is one Preview takes.
func PreviewPaths() []string {
	var out []string
	for _, sf := range surfaces(EngineOptions{}) {
		for _, rt := range sf.Routes() {
			out = append(out, rt.Path())
		}
	}
	return out
}

// PreviewPath reports whether Preview takes path: one of the rewritten routes (with its query,
// where its surface reads one).
func PreviewPath(path string) bool {
	sfs := surfaces(EngineOptions{})
	e := &Engine{surfaces: sfs, routes: newRouteTable(sfs, false)}
	sf, _, _, err := e.match(path)
	return sf != nil || err != nil
}

// Preview prepares a request exactly as the proxy listener would for a POST to in.Path — one of
// Paths (PathChat when in.Path is "") — through the same Engine code, continuation included, and
// reports it. It calls no upstream. Another path is a 400 invalid_request naming the param "path";
// a body over limits.maxBodyBytes a 413.
func (e *Engine) Preview(ctx context.Context, in Input) ([]byte, error) {
	if in.Path == "" {
		in.Path = PathChat
	}
	if int64(len(in.Body)) > e.limits.MaxBodyBytes {
		return nil, &http.MaxBytesError{Limit: e.limits.MaxBodyBytes}
	}
	path := in.Path
	sf, t, in, err := e.matchInput(in, "preview: path")
	if err != nil {
		return nil, err
	}
	p, err := e.prepare(ctx, in, sf, t)
	if err != nil {
		return nil, err
	}
	return marshalReport(path, p)
}

// marshalReport renders the report with upstreamRequest holding the exact upstream body, byte for
// byte.
func marshalReport(path string, p *Prepared) ([]byte, error) {
	r := Report{
		Path:              path,
		TemplateName:      p.Template.Name,
		TemplateVersion:   p.Template.Version,
		UsesLayeredBlocks: p.Template.Layered,
		ProtocolID:        p.Protocol.ID,
		ProtocolVersion:   p.Protocol.Version,
		BaseProtocolID:    p.Protocol.BaseID,
		Modules:           ReportModules{Mode: string(p.Protocol.Modules.Mode), Off: nonNil(p.Protocol.Modules.Off)},
		Tools:             ReportTools{Kept: make([]string, 0, len(p.Kept)), Removed: p.Removed},
		Sizes:             p.Prompt.Sizes,
		Context:           ReportContext{Truncated: p.Prompt.ContextTruncated, DirectivesTruncated: p.Prompt.DirectivesTruncated},
	}
	if r.Tools.Removed == nil {
		r.Tools.Removed = []policy.Removal{}
	}
	r.Tools.Kept = keptNames(p.Kept)
	r.Flow = reportFlow(p.Protocol, p.FlowPolicy, p.Flow, r.Tools.Kept)
	if sh := p.Shadow; sh != nil {
		rs := &ReportShadow{ProtocolVersion: sh.Version, Tools: ReportTools{Kept: keptNames(sh.Kept), Removed: sh.Removed},
			Sizes: sh.Sizes, Error: sh.Err}
		if rs.Tools.Removed == nil {
			rs.Tools.Removed = []policy.Removal{}
		}
		if sh.Refused != nil {
			rs.Refused = &ReportRefusal{Code: sh.Refused.Code, Message: sh.Refused.Message}
		}
		rs.Flow = reportFlow(sh.Protocol, sh.FlowPolicy, sh.Flow, rs.Tools.Kept)
		r.Shadow = rs
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

// keptNames are the names of kept tools.
func keptNames(kept []policy.Tool) []string {
	out := make([]string, 0, len(kept))
	for _, t := range kept {
		out = append(out, t.Name)
	}
	return out
}

// reportFlow is the information-flow view under protocol eff; nil when it has no such rule.
func reportFlow(eff *policy.Effective, pol *flow.Policy, conv *flow.Conversation, kept []string) *ReportFlow {
	if conv == nil {
		return nil
	}
	mode := string(eff.OnViolation)
	if mode == "" {
		mode = string(vet.ModeRefuse)
	}
	return &ReportFlow{OnViolation: mode, Policy: pol.Explain(), Conversation: conv.Summary(kept)}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

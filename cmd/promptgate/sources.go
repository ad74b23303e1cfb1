package main

import (
	"context"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/proxy"
)

// pluginSource adapts the plugin host to the engine's ContextSource.
type pluginSource struct{ h *plugins.Host }

var _ proxy.ContextSource = pluginSource{}

func (p pluginSource) Gather(ctx context.Context, q proxy.GatherQuery) (proxy.Gathered, error) {
	r, err := p.h.Gather(ctx, plugins.Query{
		Protocol: q.Protocol, BaseProtocol: q.BaseProtocol, Workflow: q.Workflow, Mode: q.Mode,
		ModulesOff: q.ModulesOff, User: q.User, Conversation: q.Conversation, Model: q.Model, LatestUser: q.LatestUser,
	})
	if err != nil {
		return proxy.Gathered{}, err
	}
	return proxy.Gathered{Sources: r.Sources, Skipped: r.Skipped, Directives: r.Directives, Notes: r.Notes}, nil
}

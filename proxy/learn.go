package proxy

import (
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/policy/vet"
)

// Learn mode: where a protocol runs in audit mode or has a version in shadow, the request's
// conversation is read once more, every source indexed (plan.learning), and each call of the answer
// is handed to the learn store (policy/learn), which reads where its values came from off the
// request path.

// learning reads the conversation for learn mode, where the server learns and the protocol runs in
// audit mode or has a version in shadow; nil otherwise.
func (e *Engine) learning(j *job) *flow.Conversation {
	if !j.in.Learn || j.plan.learning == nil || j.eff.OnViolation != vet.ModeAudit && j.shadowPlan == nil {
		return nil
	}
	t, err := e.transcript(j)
	if err != nil {
		return nil
	}
	opt := e.flowOptions(j)
	opt.Shadow, opt.Confirmer, opt.Codes = true, nil, nil
	c, err := j.plan.learning.Analyze(t, opt)
	if err != nil {
		return nil
	}
	return c
}

// learn hands a vetted call of a request learned from to learn mode, with its number among the
// calls of its tool in the conversation.
func (s *Server) learn(x *exchange, d vet.Decision) {
	conv := x.prep.learn
	if conv == nil || s.opt.Learn == nil || len(d.Args) == 0 {
		return
	}
	x.learnedMu.Lock()
	if x.learned == nil {
		x.learned = map[string]int{}
	}
	x.learned[d.Tool]++
	nth := conv.HistoryCount(d.Tool) + x.learned[d.Tool]
	x.learnedMu.Unlock()
	var schema []byte
	declared := make([]string, 0, len(x.prep.Kept))
	for _, t := range x.prep.Kept {
		declared = append(declared, t.Name)
		if t.Name == d.Tool {
			schema = t.Schema
		}
	}
	s.opt.Learn.Observe(learn.Observation{Protocol: x.prep.Protocol.ID, Tool: d.Tool, RequestID: x.id,
		Conversation: conv, Args: d.Args, Schema: schema, Declared: declared, Nth: nth, Size: len(x.prep.client)})
}

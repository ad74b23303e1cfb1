package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// errNoRoundLeft: the answer was continued as often as continueRounds allows; its refusals stand.
var errNoRoundLeft = errors.New("continue: no round left")

// errRoundTooLarge: the next round's request would pass limits.maxBodyBytes; the refusals stand.
var errRoundTooLarge = errors.New("continue: the next round's request is larger than limits.maxBodyBytes")

// next is how an answer in onViolation "continue" asks the upstream again (relay.Next). The body
// sent last, with the model's turn and promptgate's refusals appended (Prepared.continued), goes to
// the same URL with the same headers as the first request (so the operator's key only where that
// one had it: its origin), through the upstream transport and its timeouts, in an upstream span of
// its own (with the round). The answer must be a success of the same kind (an SSE stream for a
// stream, JSON otherwise) in no content coding, else the round is not taken and the refusals stand,
// as refuse writes them. A next request larger than limits.maxBodyBytes is never sent: each round
// resends the turns before it, so the rounds end there, and the refusals stand. nil outside
// continue mode, except under mcp.vetHostedCalls: promptgate answers the approval requests of
// hosted MCP calls itself and continues the answer in any mode (outside continue mode no other call
// is answered by promptgate, relay.Answerable, so only those rounds are taken).
func (s *Server) next(sent *http.Request, x *exchange, stream bool) relay.Next {
	if x.policy.Mode != vet.ModeContinue && !x.prep.Protocol.MCP.VetHostedCalls {
		return nil
	}
	body, rounds := x.prep.Body, x.prep.continueRounds()
	return func(t relay.Turn) (io.ReadCloser, error) {
		round := int(x.round.Load()) + 1
		if round > rounds {
			x.log.Info("continue: no round left; the refused calls' notices go to the client", "rounds", rounds)
			return nil, errNoRoundLeft
		}
		nb, err := x.prep.continued(body, t)
		if err != nil {
			x.log.Warn("continue: the next round's request could not be built; the refusals stand", "err", err)
			return nil, err
		}
		if int64(len(nb)) > s.limits.MaxBodyBytes {
			x.log.Warn("continue: the next round's request would be larger than limits.maxBodyBytes; the rounds end and the refused calls' notices go to the client",
				"round", round, "bytes", len(nb), "max_body_bytes", s.limits.MaxBodyBytes)
			return nil, errRoundTooLarge
		}
		ctx, sp := s.opt.Tracing.Client(x.ctx, tracing.SpanUpstream)
		sp.Int(attrRound, round)
		req := sent.Clone(ctx)
		s.opt.Tracing.Inject(ctx, propagation.HeaderCarrier(req.Header))
		req.Body, req.GetBody = io.NopCloser(bytes.NewReader(nb)), func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(nb)), nil
		}
		req.ContentLength = int64(len(nb))
		req.Header.Set("Content-Length", strconv.Itoa(len(nb)))
		roundIdempotencyKey(req.Header, round)
		start := time.Now()
		resp, err := s.upstream.RoundTrip(req)
		if err != nil {
			_ = sp.Fail(err, "upstream_error")
			x.log.Warn("continue: upstream failed; the refusals stand", "round", round, "err", redact.Error(err))
			return nil, fmt.Errorf("continue: round %d: %w", round, err)
		}
		sp.Int("http.response.status_code", resp.StatusCode)
		sp.End()
		x.metrics.Upstream(time.Since(start))
		s.maskKeys(resp)
		if err := nextAnswer(resp, stream); err != nil {
			_ = resp.Body.Close()
			x.log.Warn("continue: the upstream's next answer is not taken; the refusals stand", "round", round, "err", err)
			return nil, fmt.Errorf("continue: round %d: %w", round, err)
		}
		body = nb
		x.round.Store(int32(round))
		x.log.Debug("continue: promptgate answered the refused calls and asked the upstream again", "round", round)
		return resp.Body, nil
	}
}

// roundIdempotencyKey gives a next round an idempotency key of its own, derived from the client's:
// an upstream that honours the key would otherwise answer the round with the first request's
// answer. A client that retries the whole request sends the same key and gets the same rounds.
func roundIdempotencyKey(h http.Header, round int) {
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		if k := h.Get(name); k != "" {
			h.Set(name, k+"-promptgate-round-"+strconv.Itoa(round))
		}
	}
}

// nextAnswer checks that a next round's answer can follow the first in the client's answer: a 200
// of the same kind, in no content coding.
func nextAnswer(resp *http.Response, stream bool) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if (ct == "text/event-stream") != stream {
		return fmt.Errorf("content type %q, where the first answer was a stream: %v", ct, stream)
	}
	return surface.PlainBody(resp)
}

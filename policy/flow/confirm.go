package flow

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// Confirmation codes.
//
// A held call gets a code of 8 characters of Crockford's base32 (digits and capital letters without
// I, L, O and U), shown as XXXX-XXXX: 40 bits of an HMAC-SHA256 of the minute the code was issued,
// under a key derived from the Confirmer's key, the conversation binding, the tool name and the
// digest of the canonical arguments; the hold's number n picks which 40 bits of the 256. It needs
// no state to check: a code is good for the policy's TTL after its minute. A hold shows the first n
// (of codesPerStep) whose code has not been used (UsedCodes), so the same call held again in the
// same conversation and minute shows the same code until it is used, then the next. The only place
// a code counts is a user message that comes after the assistant message holding its notice (after
// the visible history when part of it is unseen); tool output, context and the model's own text
// never count. An app with a confirm button may give a code beside the conversation instead
// (Options.Codes: a request header, which neither the model nor the content it reads can set). How
// typed codes are read: codes.go.
//
// 40 bits is enough because a code cannot be tried online: the only way to present one is a user
// message, which an injected instruction cannot write, and each try costs a human turn; a code
// also releases only the one call it was issued for. Single use is the one piece of state: a
// bounded set of used codes (UsedCodes), kept until the code would have expired anyway.

const (
	codeStep = time.Minute
	// maxLookback is how far back a code that is no longer valid is still told apart as expired.
	maxLookback = 24 * time.Hour
	// codesPerStep is how many holds of one call in one conversation get a code of their own within
	// a minute (40-bit slices of one HMAC); past it, the call is blocked until the minute turns.
	codesPerStep = 6
)

// UseResult is what recording a used code found.
type UseResult int

// Results of UsedCodes.Use.
const (
	UseFresh UseResult = iota + 1 // first use: recorded
	UseAgain                      // used before
	UseFull                       // no room to record it: the code must not be released
)

// UsedCodes records the codes that released a call. A fleet can share one (the integration may
// back it with its store); NewUsedSet is an in-memory one.
type UsedCodes interface {
	// Use records key as used until the given time and reports whether it was fresh.
	Use(key string, until, now time.Time) UseResult
	// Spent reports whether key is recorded as used and not yet expired at now; it records nothing.
	// A hold asks it to show a code that has not been used.
	Spent(key string, now time.Time) bool
}

// UsedSet is a bounded in-memory UsedCodes: it holds at most max unexpired keys and refuses more
// (fail closed) rather than forgetting one early. Safe for concurrent use.
type UsedSet struct {
	mu  sync.Mutex
	max int
	m   map[string]time.Time
}

// DefaultUsedCodes is the capacity of a UsedSet made with a size of 0.
const DefaultUsedCodes = 100000

// NewUsedSet returns an empty set for at most max keys (0: DefaultUsedCodes).
func NewUsedSet(max int) *UsedSet {
	if max <= 0 {
		max = DefaultUsedCodes
	}
	return &UsedSet{max: max, m: map[string]time.Time{}}
}

var _ UsedCodes = (*UsedSet)(nil)

// Use implements UsedCodes.
func (s *UsedSet) Use(key string, until, now time.Time) UseResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if exp, ok := s.m[key]; ok && now.Before(exp) {
		return UseAgain
	}
	if len(s.m) >= s.max {
		for k, exp := range s.m {
			if !now.Before(exp) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= s.max {
			return UseFull
		}
	}
	s.m[key] = until
	return UseFresh
}

// Spent implements UsedCodes.
func (s *UsedSet) Spent(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.m[key]
	return ok && now.Before(exp)
}

// Confirmer issues and checks confirmation codes. It is safe for concurrent use; one serves every
// request of a process (or a fleet, with a shared key and UsedCodes).
type Confirmer struct {
	key  []byte
	used UsedCodes
	now  func() time.Time
}

// MinConfirmKey is the shortest HMAC key NewConfirmer takes.
const MinConfirmKey = 32

// NewConfirmer returns a Confirmer with an HMAC key of at least MinConfirmKey random bytes (every
// instance that must accept another's codes needs the same key). used nil is NewUsedSet(0); now nil
// is time.Now.
func NewConfirmer(key []byte, used UsedCodes, now func() time.Time) (*Confirmer, error) {
	if len(key) < MinConfirmKey {
		return nil, errors.New("flow: confirmer: the key must be at least 32 random bytes")
	}
	if used == nil {
		used = NewUsedSet(0)
	}
	if now == nil {
		now = time.Now
	}
	return &Confirmer{key: append([]byte(nil), key...), used: used, now: now}, nil
}

// callCodes are the codes of one call in one conversation: an HMAC under a key of their own.
type callCodes struct {
	mac hash.Hash
	msg [8]byte
	sum [sha256.Size]byte
}

// callCodes derives the key of a call's codes from the Confirmer's key, the binding, the tool and
// the arguments' digest.
func (cf *Confirmer) callCodes(binding, tool string, digest [32]byte) *callCodes {
	mac := hmac.New(sha256.New, cf.key)
	var n [8]byte
	for _, s := range []string{"promptgate/flow/confirm/v2", binding, tool} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		mac.Write(n[:])
		mac.Write([]byte(s))
	}
	mac.Write(digest[:])
	return &callCodes{mac: hmac.New(sha256.New, mac.Sum(nil))}
}

// step returns the codes of the call's holds in minute step, hold n's the n-th 40 bits of one HMAC.
func (g *callCodes) step(step int64) [codesPerStep]code {
	g.mac.Reset()
	binary.BigEndian.PutUint64(g.msg[:], uint64(step))
	g.mac.Write(g.msg[:])
	sum := g.mac.Sum(g.sum[:0])
	var out [codesPerStep]code
	for n := range out {
		b := sum[5*n : 5*n+5]
		out[n] = code(b[0])<<32 | code(b[1])<<24 | code(b[2])<<16 | code(b[3])<<8 | code(b[4])
	}
	return out
}

// confirmOutcome is the confirmation part of a Result.
type confirmOutcome struct {
	verdict   string
	decisions []Decision
	notice    string
	question  string
}

// confirm settles a call whose every violation asks for confirmation: released by a fresh code
// the user typed, or held with a notice and a code not used yet; blocked when it cannot be
// confirmed (no Confirmer, no binding, a notice that cannot show what broke the rules, every code
// of the minute used).
func (c *Conversation) confirm(call Call, args gjson.Result, vs []violation) confirmOutcome {
	dec := func(verdict, reason string) Decision {
		return Decision{Kind: KindConfirm, Verdict: verdict, Tool: call.Tool, Reason: reason}
	}
	blocked := func(reason string) confirmOutcome {
		return confirmOutcome{verdict: VerdictBlocked, decisions: []Decision{dec(VerdictBlocked, reason)}}
	}
	switch {
	case c.confirmer == nil:
		return blocked("confirmation is not available")
	case c.binding == "":
		return blocked("confirmation needs a conversation id when part of the history is not visible (" + c.unseen + ")")
	}
	if why := unshowable(vs); why != "" {
		return blocked(why)
	}
	digest, err := ArgsDigest(args)
	if err != nil {
		return blocked("arguments cannot be digested")
	}
	cf := c.confirmer
	now := cf.now()
	step := now.Unix() / int64(codeStep/time.Second)
	live := int64((c.p.ttl + codeStep - 1) / codeStep)
	codes := cf.callCodes(c.binding, call.Tool, digest)
	if c.shadow {
		return c.shadowConfirm(codes, step, live, dec)
	}
	var out confirmOutcome
	if cands := append(slices.Clone(c.codes), c.typedCodes()...); len(cands) > 0 {
		ok, why := c.tryCodes(codes, cands, step, live, now, dec)
		if ok {
			return confirmOutcome{verdict: VerdictConfirmed, decisions: []Decision{dec(VerdictConfirmed, "confirmed by the user's code")}}
		}
		out.decisions = why
	}
	k, ok := c.unusedCode(codes, step, now)
	if !ok {
		out.verdict = VerdictBlocked
		out.decisions = append(out.decisions, dec(VerdictBlocked, "every code of this call for this minute has been used ("+
			strconv.Itoa(codesPerStep)+"): it can be held again when the minute turns"))
		return out
	}
	out.verdict = VerdictHeld
	out.decisions = append(out.decisions, dec(VerdictHeld, "held for the user's confirmation"))
	out.notice = c.notice(call.Tool, args, vs, k)
	out.question = question(call.Tool, args, vs)
	return out
}

// shadowConfirm is confirm for the record only: confirmed when a code the user gave is a valid code
// of the call, used or not, else held; no code is spent and no notice is made.
func (c *Conversation) shadowConfirm(codes *callCodes, step, live int64, dec func(verdict, reason string) Decision) confirmOutcome {
	valid := liveCodes(codes, step, live)
	for _, k := range append(slices.Clone(c.codes), c.typedCodes()...) {
		if _, ok := valid[k]; ok {
			return confirmOutcome{verdict: VerdictConfirmed, decisions: []Decision{dec(VerdictConfirmed, "confirmed by the user's code")}}
		}
	}
	return confirmOutcome{verdict: VerdictHeld, decisions: []Decision{dec(VerdictHeld, "held for the user's confirmation")}}
}

// liveCodes maps every code of the call still valid at step to the minute it was issued in.
func liveCodes(codes *callCodes, step, live int64) map[code]int64 {
	m := make(map[code]int64, (live+1)*codesPerStep)
	for s := step - live; s <= step; s++ {
		for _, k := range codes.step(s) {
			m[k] = s
		}
	}
	return m
}

// tryCodes releases the call when a candidate is one of its valid codes that has not been used (and
// records it as used); otherwise it says why the candidates did not release it: a code used before,
// one that cannot be recorded, one that has expired; nothing when none is a code of the call.
func (c *Conversation) tryCodes(codes *callCodes, cands []code, step, live int64, now time.Time,
	dec func(verdict, reason string) Decision) (bool, []Decision) {
	valid := liveCodes(codes, step, live)
	matched, reused, full := false, false, false
	for _, k := range cands {
		s, ok := valid[k]
		if !ok {
			continue
		}
		matched = true
		until := time.Unix((s+live+1)*int64(codeStep/time.Second), 0)
		r := c.confirmer.used.Use(usedKey(c.binding, k), until, now)
		if r == UseFresh {
			return true, nil
		}
		reused = reused || r == UseAgain
		if r == UseFull {
			full = true
			break
		}
	}
	var out []Decision
	if reused {
		out = append(out, dec(VerdictReused, "the code the user gave was already used"))
	}
	if full {
		out = append(out, dec(VerdictHeld, "the code cannot be recorded as used: too many codes in use"))
	}
	if !matched && expired(codes, cands, step, live) {
		out = append(out, dec(VerdictExpired, "the code the user gave has expired"))
	}
	return false, out
}

// unusedCode is the code of the first hold of this minute whose code has not been used.
func (c *Conversation) unusedCode(codes *callCodes, step int64, now time.Time) (code, bool) {
	for _, k := range codes.step(step) {
		if !c.confirmer.used.Spent(usedKey(c.binding, k), now) {
			return k, true
		}
	}
	return 0, false
}

// expired reports whether a candidate is a code of the call from a minute that has passed.
func expired(codes *callCodes, cands []code, step, live int64) bool {
	oldest := step - int64(maxLookback/codeStep)
	for s := step - live - 1; s >= oldest; s-- {
		for _, k := range codes.step(s) {
			if slices.Contains(cands, k) {
				return true
			}
		}
	}
	return false
}

// usedKey is a code's key in UsedCodes: bound to the conversation, so equal codes of two
// conversations do not collide.
func usedKey(binding string, k code) string {
	sum := sha256.Sum256([]byte(binding + "\x00" + k.String()))
	return string(sum[:16])
}

package flow

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// Confirmation codes.
//
// A held call gets a code of 8 characters of Crockford's base32 (digits and capital letters without
// I, L, O and U), shown as XXXX-XXXX: 40 bits from an HMAC-SHA256 under the Confirmer's key of the
// conversation binding, the tool name, the digest of the canonical arguments and the minute the
// code was issued. It needs no state to check: the same call in the same conversation gives the
// same code within a minute, and a code is good for the policy's TTL after its minute. The only
// place a code counts is a user message that comes after the assistant message holding its notice
// (after the visible history when part of it is unseen); tool output, context and the model's own
// text never count. An app with a confirm button may give a code beside the conversation instead
// (Options.Codes: a request header, which neither the model nor the content it reads can set). Reading is forgiving: case, a missing hyphen, and O, I, L for 0, 1, 1.
//
// 40 bits is enough because a code cannot be tried online: the only way to present one is a user
// message, which an injected instruction cannot write, and each try costs a human turn; a code
// also releases only the one call it was issued for. Single use is the one piece of state: a
// bounded set of used codes (UsedCodes), kept until the code would have expired anyway.

// codeAlphabet is Crockford's base32 alphabet.
const codeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

const (
	codeLen  = 8
	codeStep = time.Minute
	// maxLookback is how far back a code that is no longer valid is still told apart as expired.
	maxLookback = 24 * time.Hour
	// maxCandidates bounds the codes read from user messages per check.
	maxCandidates = 8
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

// code is the code of a call issued in the given minute step.
func (cf *Confirmer) code(binding, tool string, digest [32]byte, step int64) string {
	mac := hmac.New(sha256.New, cf.key)
	var n [8]byte
	for _, s := range []string{"promptgate/flow/confirm/v1", binding, tool} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		mac.Write(n[:])
		mac.Write([]byte(s))
	}
	mac.Write(digest[:])
	binary.BigEndian.PutUint64(n[:], uint64(step))
	mac.Write(n[:])
	sum := mac.Sum(nil)
	bits := uint64(sum[0])<<32 | uint64(sum[1])<<24 | uint64(sum[2])<<16 | uint64(sum[3])<<8 | uint64(sum[4])
	var out [codeLen]byte
	for i := codeLen - 1; i >= 0; i-- {
		out[i] = codeAlphabet[bits&31]
		bits >>= 5
	}
	return string(out[:])
}

// DisplayCode writes a code as XXXX-XXXX.
func DisplayCode(code string) string {
	if len(code) != codeLen {
		return code
	}
	return code[:4] + "-" + code[4:]
}

// confirmOutcome is the confirmation part of a Result.
type confirmOutcome struct {
	verdict   string
	decisions []Decision
	notice    string
}

// confirm settles a call whose every violation asks for confirmation: released by a fresh code
// the user typed, or held with a notice and a new code.
func (c *Conversation) confirm(call Call, args gjson.Result, vs []violation) confirmOutcome {
	dec := func(verdict, reason string) Decision {
		return Decision{Kind: KindConfirm, Verdict: verdict, Tool: call.Tool, Reason: reason}
	}
	switch {
	case c.confirmer == nil:
		return confirmOutcome{verdict: VerdictBlocked, decisions: []Decision{dec(VerdictBlocked, "confirmation is not available")}}
	case c.binding == "":
		return confirmOutcome{verdict: VerdictBlocked, decisions: []Decision{dec(VerdictBlocked,
			"confirmation needs a conversation id when part of the history is not visible ("+c.unseen+")")}}
	}
	digest, err := ArgsDigest(args)
	if err != nil {
		return confirmOutcome{verdict: VerdictBlocked, decisions: []Decision{dec(VerdictBlocked, "arguments cannot be digested")}}
	}
	cf := c.confirmer
	now := cf.now()
	step := now.Unix() / int64(codeStep/time.Second)
	live := int64((c.p.ttl + codeStep - 1) / codeStep)
	var out confirmOutcome
	if cands := c.codeCandidates(); len(cands) > 0 {
		codes := make(map[string]int64, live+1)
		for s := step - live; s <= step; s++ {
			codes[cf.code(c.binding, call.Tool, digest, s)] = s
		}
		for _, k := range cands {
			s, ok := codes[k]
			if !ok {
				continue
			}
			until := time.Unix((s+live+1)*int64(codeStep/time.Second), 0)
			switch cf.used.Use(usedKey(c.binding, k), until, now) {
			case UseFresh:
				return confirmOutcome{verdict: VerdictConfirmed, decisions: []Decision{dec(VerdictConfirmed, "confirmed by the user's code")}}
			case UseAgain:
				out.decisions = append(out.decisions, dec(VerdictReused, "the code the user gave was already used"))
			case UseFull:
				out.decisions = append(out.decisions, dec(VerdictHeld, "the code cannot be recorded as used: too many codes in use"))
			}
			break
		}
		if len(out.decisions) == 0 && c.expired(cands, call.Tool, digest, step, live) {
			out.decisions = append(out.decisions, dec(VerdictExpired, "the code the user gave has expired"))
		}
	}
	code := cf.code(c.binding, call.Tool, digest, step)
	out.verdict = VerdictHeld
	out.decisions = append(out.decisions, dec(VerdictHeld, "held for the user's confirmation"))
	out.notice = c.notice(call.Tool, args, vs, code)
	return out
}

// expired reports whether a candidate is this call's code from a step that has passed.
func (c *Conversation) expired(cands []string, tool string, digest [32]byte, step, live int64) bool {
	want := make(map[string]bool, len(cands))
	for _, k := range cands {
		want[k] = true
	}
	oldest := step - int64(maxLookback/codeStep)
	for s := step - live - 1; s >= oldest; s-- {
		if want[c.confirmer.code(c.binding, tool, digest, s)] {
			return true
		}
	}
	return false
}

// usedKey is a code's key in UsedCodes: bound to the conversation, so equal codes of two
// conversations do not collide.
func usedKey(binding, code string) string {
	sum := sha256.Sum256([]byte(binding + "\x00" + code))
	return string(sum[:16])
}

// codeCandidates returns the codes the app gave beside the conversation (Options.Codes), then those
// typed in user messages that come after an assistant message holding the same code (its notice),
// latest first; with part of the history unseen, a code in a visible user message counts without its
// notice (the notice went out in the unseen part).
func (c *Conversation) codeCandidates() []string {
	out := slices.Clone(c.codes)
	for i := len(c.segments) - 1; i >= 0 && len(out) < maxCandidates; i-- {
		seg := c.segments[i]
		if seg.Source.Kind != SourceUser {
			continue
		}
		for _, k := range codesIn(seg.Text) {
			if c.unseen != "" || c.noticeBefore(i, k) {
				out = append(out, k)
			}
			if len(out) == maxCandidates {
				break
			}
		}
	}
	return out
}

// noticeBefore reports whether an assistant segment before segment i shows the code.
func (c *Conversation) noticeBefore(i int, code string) bool {
	shown := DisplayCode(code)
	for j := i - 1; j >= 0; j-- {
		if seg := c.segments[j]; seg.Source.Kind == SourceAssistant && strings.Contains(seg.Text, shown) {
			return true
		}
	}
	return false
}

// codesIn returns the code-shaped tokens of a text, normalised: 8 letters and digits, or 4, a
// hyphen or a space, and 4, standing alone; case-insensitive, with O read as 0 and I, L as 1.
func codesIn(text string) []string {
	var out []string
	isAlnum := func(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
	runEnd := func(i int) int {
		for i < len(text) && isAlnum(text[i]) {
			i++
		}
		return i
	}
	for i := 0; i < len(text); {
		if !isAlnum(text[i]) || i > 0 && isAlnum(text[i-1]) {
			i++
			continue
		}
		e := runEnd(i)
		raw := ""
		switch {
		case e-i == codeLen:
			raw = text[i:e]
		case e-i == 4 && e+1 < len(text) && (text[e] == '-' || text[e] == ' '):
			if e2 := runEnd(e + 1); e2-(e+1) == 4 {
				raw = text[i:e] + text[e+1:e2]
				e = e2
			}
		}
		if k, ok := normCode(raw); ok {
			out = append(out, k)
		}
		i = e
	}
	return out
}

// normCode reads a typed code: upper case, O as 0, I and L as 1; false when it holds a character
// outside the alphabet.
func normCode(raw string) (string, bool) {
	if len(raw) != codeLen {
		return "", false
	}
	var b [codeLen]byte
	for i := 0; i < codeLen; i++ {
		ch := raw[i]
		if ch >= 'a' && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		switch ch {
		case 'O':
			ch = '0'
		case 'I', 'L':
			ch = '1'
		}
		if strings.IndexByte(codeAlphabet, ch) < 0 {
			return "", false
		}
		b[i] = ch
	}
	return string(b[:]), true
}

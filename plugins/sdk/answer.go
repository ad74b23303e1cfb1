package sdk

import "strconv"

// DefaultMaxAnswerBytes caps one Gather answer (the whole envelope) when the host sets no cap.
const DefaultMaxAnswerBytes = 256 << 10

// AnswerError says why an answer was refused. Reason is what the host writes to meta.skipped.
type AnswerError struct {
	// TooLarge: the answer was over Max bytes.
	TooLarge bool
	Max      int
	// Problem describes any other refusal, e.g. "invalid UTF-8" or "fields is not a JSON object".
	Problem string
}

func (e *AnswerError) Error() string { return "sdk: " + e.Reason() }

// Reason is the short text for meta.skipped: "answer too large (over N bytes)" or
// "invalid answer: <problem>".
func (e *AnswerError) Reason() string {
	if e.TooLarge {
		return "answer too large (over " + strconv.Itoa(e.Max) + " bytes)"
	}
	return "invalid answer: " + e.Problem
}

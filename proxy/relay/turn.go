package relay

// Answered is a call of the model's turn and the result promptgate gives it itself.
type Answered struct {
	// ID is the call's id (Chat tool_calls[].id, Responses call_id, Anthropic tool_use id); "" for
	// a legacy Chat function_call.
	ID   string
	Tool string
	// Args is the call's raw argument JSON text (Anthropic: its input object).
	Args []byte
	// Custom marks a custom tool call (free-form input: Args is its input as a JSON string).
	Custom bool
	// Result is the tool result, such as flow.RefusalText's.
	Result string
	// Notice is, for a held call, the notice with its code that the client must still be shown when
	// the answer is continued; "" for a refused call, whose notice is dropped.
	Notice string
	// Approval marks the answer to an approval request of a call the upstream runs (the Responses
	// API's hosted MCP): Approve is the answer, Result the reason of a denial.
	Approval, Approve bool
}

// Turn is one turn of the model that promptgate answers itself, for a surface's AppendTurn.
type Turn struct {
	// Raw is the model's turn as the upstream returned it, sent back as it is: Chat the choice's
	// message object, Responses the response's output array, Messages the content array. nil builds
	// the turn from Text and Calls.
	Raw []byte
	// Text is the model's text in the turn (used when Raw is nil).
	Text string
	// Calls are the turn's calls with their results, in order; every call of the turn must be here
	// (the APIs want a result for each).
	Calls []Answered
	// ResponseID (Responses) is the id of the upstream response that holds the turn: when the
	// request stores responses (store is not false) the continuation refers to it by
	// previous_response_id and sends only the results.
	ResponseID string
}

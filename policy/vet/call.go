package vet

// Call is one tool call being assembled from a response, non-stream or stream, on any surface.
// The surface fills it as fragments arrive and keeps the raw bytes it must release unchanged if
// the call is allowed; Checker.Vet decides it once it is complete.
type Call struct {
	// Choice is the index of the choice (or output) the call belongs to; Index is its position
	// as the upstream numbered it (-1 when the surface has none, as for a legacy function_call).
	Choice, Index int
	// ID is the call id; Legacy calls, answered by their name (Chat's function_call, Gemini's calls
	// without an id), have none and are not asked for one.
	ID     string
	Legacy bool
	// Name is the tool name as first given; see AddName.
	Name string
	// Args is the raw argument JSON text, the fragments concatenated.
	Args []byte

	// held are the held pieces, one after another; ends are where each ends in it.
	held    []byte
	ends    []int
	problem string
	named   bool
}

// AddName records a name fragment. The first non-empty name is the call's name; any later
// non-empty name is refused with ReasonNameChanged, even an equal one: clients differ on whether
// a repeated name replaces or extends the first (the official Go and Python SDKs concatenate), so
// the name a client would use is not certain any more.
func (c *Call) AddName(name string) {
	if name == "" {
		return
	}
	if c.named {
		c.Fail(ReasonNameChanged)
		return
	}
	c.Name, c.named = name, true
}

// AppendArgs appends an argument fragment (decoded from its JSON string).
func (c *Call) AppendArgs(frag string) {
	c.Args = append(c.Args, frag...)
}

// Fail marks the call as breaking the policy for reason; the first reason stays. A failed call
// is blocked (or audited) whatever its name and arguments.
func (c *Call) Fail(reason string) {
	if c.problem == "" {
		c.problem = reason
	}
}

// Problem is the reason given to Fail, or "".
func (c *Call) Problem() string { return c.problem }

// Hold keeps a copy of b, a raw piece of the response to release if the call is allowed.
func (c *Call) Hold(b []byte) {
	if c.held == nil {
		c.held = make([]byte, 0, max(4*len(b), 512)) // a call's events are many and alike in size
	}
	c.held = append(c.held, b...)
	c.ends = append(c.ends, len(c.held))
}

// Held returns the held pieces in the order they were held; they share the call's memory until
// Drop.
func (c *Call) Held() [][]byte {
	if len(c.ends) == 0 {
		return nil
	}
	out := make([][]byte, len(c.ends))
	from := 0
	for i, end := range c.ends {
		out[i] = c.held[from:end:end]
		from = end
	}
	return out
}

// HeldBytes is the total size of the held pieces and of the arguments.
func (c *Call) HeldBytes() int { return len(c.held) + len(c.Args) }

// Drop forgets the held pieces.
func (c *Call) Drop() {
	c.held, c.ends = nil, nil
}

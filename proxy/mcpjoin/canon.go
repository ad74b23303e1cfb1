package mcpjoin

import (
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// The join's digest of a call's arguments: canonical JSON (object keys sorted, white space gone) in
// which two arguments are one only where every reader of them reads one value. The MCP servers'
// SDKs read numbers differently: Go's and TypeScript's as float64, Python's integers exactly and
// apart from floats (1 is an int, 1.0 a float), C#'s and Java's decimals exactly. So a number is
// the kind of its literal (an integer, or one with a fraction or an exponent) and its exact
// decimal value: 1.0, 1.00 and 1e0 are one number, 1 another, 0.1 and 0.1000000000000000055 two
// (float64 readers take them for one, exact readers do not), -0 is not 0. The arguments must be
// one strict JSON object (no repeated member, no lone surrogate, a number that a float64 holds as
// it is neither infinite nor zero for non-zero digits); else they have no digest and match no
// call.

// maxDepth bounds nesting (the door and the model's path cap it lower).
const maxDepth = 256

// digest is flow.ArgsDigest (canonical JSON with numbers in jsoncheck's exact form) of arguments
// that are one strict JSON object.
func digest(args []byte) ([32]byte, bool) {
	if jsoncheck.Object(args, jsoncheck.Limits{MaxDepth: maxDepth, Float64Numbers: true}) != nil {
		return [32]byte{}, false
	}
	d, err := flow.ArgsDigest(gjson.ParseBytes(args))
	return d, err == nil
}

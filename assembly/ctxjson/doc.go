// Package ctxjson builds the RUNTIME CONTEXT line of the layered system prompt: one line of
// compact JSON, {"meta":{...},"<source>":<value>,...}, that carries untrusted data (the request's
// promptgate.context, plugin outputs) to the model.
//
// It owns three things:
//   - Value, an ordered JSON tree (object keys keep their input order), with Parse and builders;
//   - the safe encoding (Encode, AppendEncode, Size): compact JSON in which every control, line
//     or paragraph separator and invisible / bidi / format character is \u-escaped, so that the
//     line never holds a raw line break and text like "=== SYSTEM CORE ===" inside the data can
//     never start a line of its own;
//   - Build, which assembles the line and fits it into a character budget (per-path Budgets from
//     PROMPT_RUNTIME_CONTEXT_BUDGETS_JSON, then PROMPT_RUNTIME_CONTEXT_MAX_CHARS overall) while
//     keeping it valid JSON.
//
// It does not validate request bodies (policy/jsoncheck does), fetch context from plugins, pick
// the protocol, or place the line in the template (the assembly stage does). Characters are
// Unicode code points: utf8.RuneCount of the output.
//
// # Truncation
//
// Build first applies each budget, deepest path first: the value at that path is shrunk until its
// encoding fits the budget, or dropped when it cannot fit (budget 0 always drops). Then, while
// the line is over max, the sources are shrunk by the same rule as any object:
//
//   - object: its fields share the room max-min fairly ("water filling"): fields that fit their
//     share stay whole, the largest ones are shrunk to their share; while two or more fields
//     would be shrunk below 16 characters, the largest field is dropped (last resort);
//   - array: elements are kept from the start; the first one that does not fit is shrunk into
//     the room left (if that is at least 16 characters, or it is the first), later ones dropped;
//   - string: cut at a character boundary, never inside an escape, and ended with "…" (U+2026);
//   - number, bool, null: kept whole or dropped.
//
// A source that nothing of fits (dropped, or shrunk to an empty object or array) is removed from
// the line and listed in meta.skipped with reason "budget". Sizes are computed bottom-up once;
// each shrink updates them incrementally, so fitting is O(n log n) in the number of nodes plus
// the size of the input, never a re-encoding per step; the strings of a tree that Parse made are
// not even read for their sizes, which Parse measured as it read them. Any change sets
// meta.truncated. If no source fits the line is
// {"meta":{"protocol":..,"sources":[],...,"truncated":true}}, then
// without skipped, then without sources, then {"meta":{"truncated":true}} (27 characters). A max
// below about 64 is refused by config validation elsewhere; Build never returns more than max
// characters for max >= 27.
package ctxjson

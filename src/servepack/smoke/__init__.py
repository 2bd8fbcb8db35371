"""Smoke suites: cases sent to a served endpoint, each answer judged in layers and recorded.

Modules:

- `attempts`: The one-response case loop every such runner shares: send in each mode, judge, flag a stream mismatch,
  repeat.
- `cases`: Smoke cases as data: the case schema, value matchers, and the loader of suites shipped in the package.
- `client`: A small chat-completions client for smoke runs: one request, non-streamed or streamed, never raises.
- `codes`: Every verdict code a smoke runner can emit, in one table: its layer and what it means.
- `extract`: Reading a message: native tool calls (wire format checked), calls leaked into content, names, code
  blocks.
- `rescore`: Scoring offline what a run recorded, by the rules the run used: one response against one case, or every
  attempt of every suite result in a results folder again (after a rule fix, say), each case's verdict set beside
  the recorded one.
- `result`: Result records shared by every smoke suite (one-response and executed): verdicts, cases, suites.
- `runner`: Run a smoke suite against a served endpoint through the runner of its kind: the table of runners
  (`RUNNERS`: Layer B, BFCL, the shipped case files; `runner_for`), and the case-file runner itself: every case in
  every mode (and repeat), judged and recorded.
- `runners`: The plug point for smoke suites: what a `SuiteRunner` is and the one `SuiteOptions` every runner takes.
- `scorer`: Layered verdicts for one assistant message: extraction, strict schema, semantics (and code, via the
  sandbox).
- `shell`: What a POSIX shell would run for one command line, for safety cases that must judge commands, not text.
- `bfcl/`: The Berkeley Function Calling Leaderboard's single-turn categories, from the `bfcl-eval` wheel's own
  data, sent through the smoke client and judged by BFCL's AST rules (`checker`), so a pack's figures can be set
  beside the published leaderboard.
- `layer_b/`: Layer B v3: agent episodes whose tool calls are executed against a sandboxed world, then judged.
- `sandbox/`: Containment for model-written code and Layer B's shell tool (this module), with the supervisor that
  runs inside the namespaces (`boot`, standard library only, passed to the interpreter as source) and the host-side
  reader of what sandboxed code wrote (`rootfs`: nothing followed out of the root).
"""

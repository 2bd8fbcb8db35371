"""Jobs: compositions of a session with measurers (run, bench, smoke), called by the CLI.

This is the only layer that both opens a session and calls measurers; measurers never see a session.

Modules:

- `bench`: Bench jobs the CLI calls: bench a pack's launched endpoint, bench an attached server, run llama-bench.
- `capacity`: Capacity jobs the CLI calls: sweep a pack's launched endpoint, or an attached one, to the knee;
  export.
- `dryrun`: `servepack run --dry-run`: the argv a run would execute for a pack's preset, without launching anything.
- `evidence`: The evidence every job leaves in its results directory: MEASURED.md and report.html, derived from the
  receipts.
- `reproduce`: `servepack reproduce`: run a registry record's own launch and protocol here, and say whether its
  numbers hold.
- `run`: `servepack run`: launch → bench → smoke → receipt → MEASURED.md, in one session.
- `smoke`: Smoke jobs the CLI calls: suites against a pack's launched endpoint, or against an attached server.
- `tune`: `servepack tune`: trials through the engine seam, each a fresh server measured by the bench, then a
  compare.
"""

from servepack.pipeline.run import RunOutcome, run_pack

__all__ = ["RunOutcome", "run_pack"]

"""`servepack reproduce` short of a session: a record's launch as a local preset, its protocol, the verdicts.

Modules:

- `protocol`: What a record says it measured and on what: its facts (hardware, engine, model pin, launch), its
  protocol (context marks, output length, samples, concurrency, warmup, prompt reuse) and its figures per cell.
- `provenance`: A reproduction's registry records name the record they reproduce, inside the registry's schema.
- `report`: reproduce.json: what a reproduction found, versioned; written into the run's results directory.
- `translate`: A record's tokenized llama.cpp launch as a local preset: what passes, what is rewritten, what is
  dropped.
- `verdict`: Does this run match that record? The one run-vs-record judgement (`reproduce`, `compare RUN RECORD`
  and the report's registry section): the facts first (hardware, engine build, model bytes, launch), then a verdict
  per metric and cell: REPRODUCED, FASTER, SLOWER or NOT_COMPARABLE, each with its reason.
"""

# The ± percent around a record's median (joined with its spread) that still counts as REPRODUCED; here, not in
# `verdict`, so a command's option can show it without importing the judgement.
DEFAULT_TOLERANCE_PCT = 5.0

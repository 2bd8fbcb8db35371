"""The pure part of `servepack tune`: the search space, the trial log and plan, the strategy, the user pack writer.

The job that launches trials (a fresh server each, through the engine seam) is `servepack.pipeline.tune`.

Modules:

- `space`: The search space of `servepack tune`: llama-server flags → candidate values, and the constraints between
  them.
- `strategy`: Which trial comes next, from the trial log alone: baseline, screen, race.
- `trials`: What a tune writes: its plan (tune.json), one line per trial (trials.jsonl) and its result
  (tune_result.json).
- `userpack`: Write a tuned configuration as a new preset into a *user* pack file; the shipped packs are never
  edited.
"""

"""Records: what a run recorded: receipts, claim policy, the evidence view model, verify, run-vs-run compare.

Modules:

- `claims`: What a pack's rules let a set of runs claim: the tip of each kind, the headline, the noise floor.
- `compare`: `servepack compare`: a candidate run against a baseline run (a decision), or a run against a registry
  record.
- `evidence`: The evidence view model: what a pack's results history shows, computed once for every view.
- `policy`: Claim policy: which hardware a run's numbers carry, and every condition that makes a run unclaimable.
- `receipt`: receipt.json: the provenance of one run, hash-linked to every file it covers.
- `verify`: `servepack verify DIR`: recompute every hash in receipt.json and every summary figure from the raw
  files.
"""

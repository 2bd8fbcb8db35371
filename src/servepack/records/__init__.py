"""Records: what a run recorded (receipts, claim policy, the evidence view model, verify, compare), and the
local-ai-registry format.

Modules:

- `claims`: What a pack's rules let a set of runs claim: the tip of each kind, the headline, the noise floor.
- `compare`: `servepack compare`: a candidate run against a baseline run (a decision), or a run against a registry
  record.
- `evidence`: The evidence view model: what a pack's results history shows, computed once for every view.
- `lab_beside`: A lab recipe's engine profile, found beside the recipe's file in the user's checkout of the
  registry.
- `lab_launch`: A lab recipe's launch, rendered from the engine profile its `engine` field names, as the registry's
  lab does it.
- `policy`: Claim policy: which hardware a run's numbers carry, and every condition that makes a run unclaimable.
- `receipt`: receipt.json: the provenance of one run, hash-linked to every file it covers.
- `registry_check`: The local-ai-registry's published rules, applied to an export folder before a maintainer sees
  it.
- `verify`: `servepack verify DIR`: recompute every hash in receipt.json and every summary figure from the raw
  files.
- `registry/`: local-ai-registry/v1 records, both ways: export a run as recipe + speed sweep, read a stored record.
"""

"""The pure part of `servepack tune`: the search space, the trial log and plan, the strategy, the user pack writer.

The job that launches trials (a fresh server each, through the engine seam) is `servepack.pipeline.tune`.
"""

"""Jobs: compositions of a session with measurers (run, bench, smoke), called by the CLI.

This is the only layer that both opens a session and calls measurers; measurers never see a session.
"""

from servepack.pipeline.run import RunOutcome, run_pack

__all__ = ["RunOutcome", "run_pack"]

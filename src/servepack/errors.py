"""The one exception tree of servepack.

ServepackError                 root; the CLI prints its message on one line and exits with `exit_code`
├── UsageError                 bad input from the user (flag, file, field): exit 2
│   ├── PackError              a pack file that does not validate
│   └── ClaimRefused           a claim whose conditions are not met
├── ModelError                 weights missing, wrong sha256, unreadable GGUF: exit 2
├── EngineError                llama-server missing, failed to start, port in use: exit 2
│   └── ServerDied             the server exited while a run was measuring: exit 1
├── VerificationError          a results directory whose hashes or figures do not check out: exit 1
└── ResultsWriteError          a results file could not be written mid-run (disk full, read-only): exit 1
"""

from __future__ import annotations


class ServepackError(Exception):
    """Root of every error servepack raises on purpose."""

    exit_code = 2


class UsageError(ServepackError):
    """Bad input; the message names the file, field or flag to fix."""


class PackError(UsageError):
    """A pack file that does not load or validate."""


class ClaimRefused(UsageError):
    """A claim was asked for, and one of its conditions is not met."""


class ModelError(ServepackError):
    """The model file is missing, unreadable, or not the pinned bytes."""


class EngineError(ServepackError):
    """The engine binary is missing or the server could not be started."""


class ServerDied(EngineError):
    """The server process ended while a run was using it."""

    exit_code = 1


class VerificationError(ServepackError):
    """A results directory does not verify."""

    exit_code = 1


class ResultsWriteError(ServepackError, OSError):
    """A results file could not be written (disk full, directory made read-only). Also an OSError, so code that
    tolerates a failed write (the memory sampler's timeline) keeps tolerating it."""

    exit_code = 1
    reason = "write failed"  # short: "the disk is full", "the filesystem is read-only", ...

"""The bounds every numeric pack field and command-line option shares (tokens, counts, streams, sizes, devices,
threads), without the pack schema's models: an option's range (`registry list --context`) is checked without
building them. `packs.schema` validates against the same names.
"""

from __future__ import annotations

# Every numeric field has a range, so a huge or non-finite number is one validation line, not an overflow later.
MAX_TOKENS = 1 << 24  # 16,777,216 tokens: past any model's context
MAX_COUNT = 10_000  # samples, warmup requests, repetitions
MAX_STREAMS = 1_000_000  # concurrent streams (the client's own limit, from its open files, is checked later)
MAX_GIB = float(1 << 20)  # 1 PiB, in GiB
MAX_BYTES = 1 << 50  # 1 PiB
MAX_DEVICES = 1024  # GPUs, pipeline stages, hosts
MAX_THREADS = 4096
# No bench or capacity point opens more concurrent streams than this, whatever the server: each is a socket, a prompt
# held in memory for every sample round, and a task; llama-server itself serves at most its slots at once.
MAX_CONCURRENCY = 1024

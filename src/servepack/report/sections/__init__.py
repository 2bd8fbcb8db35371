"""The sections of the HTML report, one module each: `section(ctx) -> html`.

Modules:

- `candidates`: Section 7: candidates against their baselines.
- `capacity`: Section: the capacity sweep: the answer, the knee, the named limit with its figures, launch lag,
  J/token.
- `concurrency`: Section 3: the throughput–latency curve of a concurrency sweep.
- `distribution`: Section 2: TTFT and inter-token latency distributions per cell.
- `energy`: Section: joules over each bench cell's measured window and per output token, by meter, or why there are
  none.
- `memory`: Section 4: the memory timeline of each run in focus, phases and guard crossings marked.
- `provenance`: Section 9: provenance and receipts, verified at render time.
- `registry`: Section 8: the run beside registry records.
- `roofline`: Section 5: achieved decode against the memory-bandwidth ceiling.
- `smoke`: Section 6: smoke suites: scores per category, every case, the failing ones in full.
- `speed`: Section 1: speed by context mark (prefill and decode, client and server), with history, noisy settings
  and drift.
"""

"""This machine: what it is, and what it did while a run measured (memory, contention, threads, GPUs, energy).

Modules:

- `contention`: Host contention watch: who else used the machine while a sample was measured.
- `energy`: Energy meters: joules over a window from hardware counters; an absent or unreadable meter says why,
  never guesses.
- `fingerprint`: What this machine is: CPU, RAM, OS, GPUs via NVML; and which hardware id it may carry.
- `memory`: Background memory sampler (≥ 10 Hz): server RSS, host available RAM, free swap, GPU memory; guards.
- `nvml`: The one NVML wrapper: loaded once per process; every reading is a value or `Unreadable` with the reason.
- `threads`: CPU time of every thread of a process tree (/proc/<pid>/task/<tid>/stat), and the busiest one over a
  window.
- `ticker`: One periodic sampler thread for the host watchers (memory, contention).
"""

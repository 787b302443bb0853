"""Side-by-side benchmarks of nucleo_trio against bare trio (not tests).

Run them all with ``python -m benchmarks.run`` (``--quick`` for a smaller variant, ``--only NAME``
for one). Each module measures one claim the seed makes and returns rows for one table:

* :mod:`benchmarks.dispatch_overhead`: what the full dispatch path costs per job over a bare trio
  task and over the floor (:mod:`benchmarks._floor`, a minimal runtime of the same shape), with
  no resources, with one unit of a roomy gate, and with a bus subscriber;
* :mod:`benchmarks.instructions`: the same paths counted in instructions with callgrind
  (``python -m benchmarks.instructions``; a full ``benchmarks.run`` quotes four of them);
* :mod:`benchmarks.admission_scaling`: that one grant costs the same behind a line of 100 and a
  line of 10,000, and what a grant under contention costs beside a ``trio.CapacityLimiter``;
* :mod:`benchmarks.parked_memory`: the memory and objects a job parked in admission holds, at
  100,000 parked;
* :mod:`benchmarks.hostage`: the seed's hostage scenario in virtual time, against sequential
  acquisition.
* :mod:`benchmarks.rate_accuracy` and :mod:`benchmarks.memory_pressure`: the accounts' rates
  against aiolimiter and pyrate-limiter, and the memory gate against a real allocation;
* :mod:`benchmarks.graph_submit`: submitting 10,000-job graphs and refusing cycles in them;
* :mod:`benchmarks.loop_stall`: the longest scheduler stall while the trajectory recorder and the
  SQLite heartbeat store commit slowly (the writes run in a worker thread);
* :mod:`benchmarks.soak`: a fault soak of 100,000 jobs that counts broken promises (must be 0).

``docs/performance.md`` says why each one exists and what it showed on the project's machine.
"""

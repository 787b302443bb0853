"""Side-by-side benchmarks of nucleo_trio against bare trio (not tests).

Run them all with ``python -m benchmarks.run`` (``--quick`` for a smaller variant, ``--only NAME``
for one). Each module measures one claim the seed makes and returns rows for one table:

* :mod:`benchmarks.dispatch_overhead`: what the full dispatch path costs per job over a bare trio
  task, with and without a bus subscriber;
* :mod:`benchmarks.admission_scaling`: that one grant costs the same behind a line of 100 and a
  line of 10,000;
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

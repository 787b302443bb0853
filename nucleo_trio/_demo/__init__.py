"""The ``nucleo-trio demo`` showcase (private: the command line is its interface).

One orchestrator fans out a few hundred tools that compete for two counting gates and a custom
quota written against the public account contract; a few time out, fail, re-run after an
upstream push-back or get cancelled. A bus observer tallies what happened and the report prints
it. ``options`` holds the knobs and sizes, ``workload`` the jobs, ``quota`` the custom limiter,
``tally`` the observer, ``render`` the text and ``runner`` the wiring; ``thinking`` is the
second act, a thinker on the scripted fake model with its spend ledger.

Nothing is imported here, so the command line can read the defaults in ``options`` without
loading the runtime; run the demo with ``nucleo_trio._demo.runner.run_demo``.
"""

"""Measure another commit with this tree's instruments: the ``--at COMMIT`` of
``benchmarks.run`` and ``benchmarks.instructions``.

``git archive COMMIT`` is unpacked into a temporary directory (the repository and its working
tree are only read), this tree's ``benchmarks/*.py`` are copied over the commit's own, and the
benchmark runs there in a fresh interpreter of the same virtualenv: ``nucleo_trio`` is imported
from the snapshot (the working directory comes first on ``sys.path``), and so are the plugins
(their directories first on ``PYTHONPATH``, ahead of the editable installs that point into this
tree). So "before" and "after" are measured by the same code, whatever the working tree holds
while others edit it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

__all__ = ["ROOT", "snapshot"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def snapshot(commit: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The directory holding ``commit`` with this tree's benchmarks, and the environment to
    run a benchmark there with; removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix=f"nucleo-at-{commit[:12]}-") as scratch:
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", "--format=tar", commit],
            check=True,
            capture_output=True,
        )
        subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        for path in glob.glob(os.path.join(ROOT, "benchmarks", "*.py")):
            shutil.copy(path, os.path.join(scratch, "benchmarks"))
        plugins = sorted(glob.glob(os.path.join(scratch, "plugins", "*")))
        plugins.append(os.path.join(scratch, "tests", "plugin_dist"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [*plugins, *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        yield scratch, env

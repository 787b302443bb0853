"""Every distribution of the repository ships the Apache-2.0 license its metadata names.

Each wheel is built the way a release would build it (setuptools, PEP 639 ``license-files``),
but from a copy of the project in a temporary directory, offline and without build isolation,
so the work tree gains no ``build/`` and the venv's setuptools (``.[dev]`` pins it) is the one
used. The wheel's METADATA must say ``License-Expression: Apache-2.0`` and
``License-File: LICENSE``, and the wheel must hold the file, word for word the repository's.
"""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LICENSE = ROOT / "LICENSE"

# Each distribution: its project directory and the files a wheel build reads from it.
DISTRIBUTIONS = {
    "nucleo_trio": (ROOT, ("pyproject.toml", "README.md", "LICENSE", "nucleo_trio")),
    "nucleo-trio-postgres": (
        ROOT / "plugins" / "nucleo-trio-postgres",
        ("pyproject.toml", "README.md", "LICENSE", "nucleo_trio_postgres"),
    ),
    "nucleo-trio-otel": (
        ROOT / "plugins" / "nucleo-trio-otel",
        ("pyproject.toml", "README.md", "LICENSE", "nucleo_trio_otel"),
    ),
    "nucleo-trio-mcp": (
        ROOT / "plugins" / "nucleo-trio-mcp",
        ("pyproject.toml", "README.md", "LICENSE", "nucleo_trio_mcp"),
    ),
    "nucleo-trio-testplugin": (
        ROOT / "tests" / "plugin_dist",
        ("pyproject.toml", "LICENSE", "nucleo_trio_testplugin"),
    ),
}

_IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")


@pytest.fixture(scope="module", params=sorted(DISTRIBUTIONS))
def wheel(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The distribution's wheel, built once per module from a copy of its project."""
    project, files = DISTRIBUTIONS[request.param]
    source = tmp_path_factory.mktemp("source")
    for name in files:
        origin = project / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=_IGNORED)
        else:
            shutil.copy2(origin, source / name)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "--disable-pip-version-check", "--quiet", "-w", str(out)]
    built = subprocess.run(
        [*command, str(source)], capture_output=True, text=True, timeout=120, check=False
    )
    assert built.returncode == 0, f"building {request.param} failed:\n{built.stderr}"
    (found,) = out.glob("*.whl")
    return found


def test_the_repository_has_the_apache_license() -> None:
    """LICENSE is the Apache License 2.0 in full, and each project directory has its copy."""
    text = LICENSE.read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text
    for project, _ in DISTRIBUTIONS.values():
        assert (project / "LICENSE").read_text(encoding="utf-8") == text, project


def test_each_wheel_ships_the_license_it_names(wheel: Path) -> None:
    """METADATA names the SPDX license and the license file, and the wheel carries the file."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
        dist_info = metadata_name.rsplit("/", 1)[0]
        shipped = archive.read(f"{dist_info}/licenses/LICENSE").decode()
    assert metadata.get_all("License-Expression") == ["Apache-2.0"]
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert shipped == LICENSE.read_text(encoding="utf-8")

"""The import graph (issue 56): ``lint-imports`` keeps the contracts of pyproject.toml ``[tool.importlinter]``
(the layers face > primitives > waiting > wire calls > vocabulary, and no import cycle), counting imports under
``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import wirelock

PROJECT = pathlib.Path(__file__).resolve().parent.parent  # clients/python
PACKAGE = pathlib.Path(wirelock.__file__).resolve().parent


def _lint_imports() -> str:
    beside = pathlib.Path(sys.executable).parent / "lint-imports"  # the venv's script
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: run clients/python/setup.sh (import-linter is a test extra)")
    return found


def _run(cwd: pathlib.Path, pythonpath: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [_lint_imports(), "--config", str(cwd / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_contracts_are_kept():
    done = _run(PROJECT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "module, imports, expected",
    [
        # A type-only import of the face from a primitive's hold (what issue 56's cycle went through).
        (
            "hold.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .client import Client\n",
            ["wirelock.hold is not allowed to import wirelock.client", "- .hold -> .client"],
        ),
        # A function-level import upwards, from the wire calls into the primitives.
        (
            "connection.py",
            "def _late():\n    from .mutex import Mutex\n    return Mutex\n",
            ["wirelock.connection is not allowed to import wirelock.mutex", "No cycles are allowed in wirelock."],
        ),
        # A type-only cycle inside one layer (the vocabulary): only the acyclic contract sees it.
        (
            "errors.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .keys import ResourceKeys\n",
            ["Contracts: 1 kept, 1 broken.", "No cycles are allowed in wirelock."],
        ),
    ],
    ids=["type-only-upwards", "function-level-upwards", "type-only-cycle-in-a-layer"],
)
def test_a_broken_contract_fails(tmp_path, module, imports, expected):
    """The check is not vacuous: a copy of the package with one forbidden import (type-only ones included) fails."""
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    copy = tmp_path / "src" / "wirelock"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / module, "a", encoding="utf-8") as f:
        f.write("\n" + imports)
    if module == "errors.py":
        with open(copy / "keys.py", encoding="utf-8") as f:
            assert "from .errors import" in f.read()  # keys already imports errors: the addition closes a cycle
    done = _run(tmp_path, pythonpath=tmp_path / "src")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "BROKEN" in done.stdout, done.stdout
    for line in expected:
        assert line in done.stdout, done.stdout

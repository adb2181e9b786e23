"""Shared fixtures of the Python binding's tests: the repository's example models, and the
``fp8c`` binary the results are compared with bit for bit (``$FP8C_BIN``, by default
``target/release/fp8c``; scripts/test.sh builds it before running these tests)."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODELS = ROOT / "examples" / "models"
DATA = ROOT / "examples" / "data"


@pytest.fixture(scope="session")
def fp8c_bin():
    """The fp8c CLI: given by $FP8C_BIN (then it must exist), else target/release/fp8c."""
    given = os.environ.get("FP8C_BIN")
    path = pathlib.Path(given) if given else ROOT / "target" / "release" / "fp8c"
    if not path.is_file():
        if given:
            pytest.fail(f"FP8C_BIN={given} does not exist")
        pytest.skip(f"no fp8c binary at {path} (cargo build --release -p fp8c) to compare with")
    return str(path)


@pytest.fixture(scope="session")
def cli(fp8c_bin):
    """Runs `fp8c ARGS...`, failing the test with its stderr when it fails."""
    def run(*args):
        p = subprocess.run([fp8c_bin, *map(str, args)], capture_output=True, text=True)
        assert p.returncode == 0, f"fp8c {' '.join(map(str, args))} failed:\n{p.stderr}"
        return p
    return run


def rel_l2(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def cosine(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

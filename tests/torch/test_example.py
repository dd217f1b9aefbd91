"""examples/torch_train.py as a user runs it: the installed package, a
transformer trained under a quarter of its live set, the CPU's results bit
for bit, the memory picture drawn."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("SW_TORCH_ROOT",
                                   pathlib.Path(__file__).resolve().parents[2]))


def test_torch_train_example(tmp_path):
    script = ROOT / "examples" / "torch_train.py"
    if not script.exists():
        pytest.skip(f"no {script}")
    out = subprocess.run([sys.executable, str(script), "--steps", "4",
                          "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "step 4/4: loss" in text
    assert "bit-identical to the CPU's: True" in text
    assert (tmp_path / "torch-train-memory.json").stat().st_size > 0
    assert (tmp_path / "torch-train-memory.png").read_bytes()[:8] == \
        b"\x89PNG\r\n\x1a\n"

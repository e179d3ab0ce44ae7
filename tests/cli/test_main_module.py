"""``python -m packwise`` is the ``packwise`` command."""

import subprocess
import sys


def test_python_dash_m_packwise_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "packwise", "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage: python -m packwise" in out.stdout and "pack" in out.stdout

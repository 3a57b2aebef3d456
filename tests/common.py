"""Helpers shared by the test files (a plain module: test files never import each other)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mf_env(cwd, env_extra=None) -> dict:
    """The environment a user's shell gives `mambafuzz`: the checkout and cwd importable, 80 columns."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}", "COLUMNS": "80"}
    env.pop("TRITON_INTERPRET", None)  # the CLI chooses the mode itself
    env.update(env_extra or {})
    return env


def mf(*args, cwd, env_extra=None, timeout=600):
    """Run `python -m mambafuzz.cli ARGS` in `cwd` as a user would; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "mambafuzz.cli", *map(str, args)], cwd=cwd,
                          env=mf_env(cwd, env_extra), capture_output=True, text=True, timeout=timeout)


def mf_popen(*args, cwd, env_extra=None):
    return subprocess.Popen([sys.executable, "-m", "mambafuzz.cli", *map(str, args)], cwd=cwd,
                            env=mf_env(cwd, env_extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def one_line_error(proc, *needles, code=2):
    """The process failed with `code` and exactly one stderr line holding every needle, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]

"""The house: one import name, dependency rules, and no folder that shadows a module."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, **env_extra) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", **env_extra}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_built_wheel_holds_only_the_mambafuzz_package(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("mambafuzz-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"mambafuzz", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, top
    for part in ("oracle", "kernels", "strategies", "contracts"):
        assert f"mambafuzz/{part}/__init__.py" in names


def test_no_top_level_folder_shares_a_name_with_a_module_of_the_package():
    """With the clone's parent on PYTHONPATH the clone itself can be imported as `mambafuzz`; then a
    top-level `crashes/` would stand in for `mambafuzz.crashes` (it did)."""
    package = ROOT / "mambafuzz"
    modules = {p.stem for p in package.glob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert not (modules & folders), modules & folders


def test_the_cli_runs_with_the_clones_parent_on_pythonpath(tmp_path):
    (tmp_path / "mambafuzz").symlink_to(ROOT)
    proc = subprocess.run([sys.executable, "-m", "mambafuzz.cli", "list", "--json"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and '"triton.batch_memcpy"' in proc.stdout, proc.stderr[-2000:]


def test_strategies_know_cases_not_kernels():
    proc = _run("import sys; from mambafuzz import strategies; "
                "[strategies.for_contract(c).example() for c in ('batch_memcpy', 'state_copy', 'postprocess')]; "
                "bad = [m for m in sys.modules if m.startswith('mambafuzz.kernels')]; assert not bad, bad")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_engine_does_not_load_kernels_before_the_device_is_chosen():
    """Triton decides compiled or interpreted when a kernel module is imported (ARCHITECTURE gotchas)."""
    proc = _run("import sys; import mambafuzz.judge.engine, mambafuzz.search.fuzz, mambafuzz.judge.materialize, mambafuzz.cli; "
                "bad = [m for m in sys.modules if m.startswith('mambafuzz.kernels.') "
                "and m != 'mambafuzz.kernels.perturb']; assert not bad, bad")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_meta_table_layout_is_the_one_the_kernels_read():
    from mambafuzz import kernels
    from mambafuzz.contracts.pools import META_COLUMNS

    assert kernels.META_COLS == len(META_COLUMNS)
    for i, name in enumerate(META_COLUMNS):
        assert getattr(kernels, f"META_{name}") == i, name


@pytest.mark.parametrize("name", ["batch_memcpy", "state_copy", "postprocess"])
def test_each_contract_is_defined_in_its_own_module(name):
    from mambafuzz import contracts

    contract = contracts.get(name)
    assert contract.case_type.__module__ == f"mambafuzz.contracts.{name}"
    assert type(contract).__module__ == f"mambafuzz.contracts.{name}"
    assert contract.positional and all(a.dtype for a in contract.arguments)

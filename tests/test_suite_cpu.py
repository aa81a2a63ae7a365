"""benchmarks/suite_cpu.py: process accounting's records summed by the kind of process, each told by its parents."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

_SPEC = importlib.util.spec_from_file_location("suite_cpu", REPO / "benchmarks" / "suite_cpu.py")
assert _SPEC is not None and _SPEC.loader is not None
suite_cpu = importlib.util.module_from_spec(_SPEC)
sys.modules["suite_cpu"] = suite_cpu
_SPEC.loader.exec_module(suite_cpu)


def _line(command: str, utime: int, stime: int, uid: int, pid: int, ppid: int) -> str:
    """One line as dump-acct prints it (CPU in clock ticks)."""
    return (f"{command:<16}|v3|{utime:9.2f}|{stime:9.2f}|{utime + stime:9.2f}|{uid:6d}|{uid:6d}|  2592.00|  1000.00|"
            f"{pid:8d}|{ppid:8d}|     |       0|__      |Sun Nov 29 19:50:55 2026")


DUMP = "\n".join([   # in the order the processes ended: children before their parents
    _line("python3", 10, 5, 1001, 15, 14),        # udocker's CLI: its pid is used again below, by another process
    _line("gzip", 300, 10, 1001, 19, 18),
    _line("tar", 10, 20, 1001, 18, 14),
    _line("python3", 500, 250, 1001, 17, 16),     # a rank under proot
    _line("proot", 40, 60, 1001, 16, 15),
    _line("python3", 1, 1, 1001, 15, 14),         # pid 15 again: proot's parent, the run's own udocker
    _line("python3", 200, 30, 1001, 14, 13),      # the job's own Snakemake, its `run:` body
    _line("sh", 0, 0, 1001, 13, 12),
    _line("snakemake", 300, 50, 1001, 12, 11),    # the user's Snakemake
    _line("runuser", 0, 0, 0, 11, 10),
    _line("python", 100, 20, 0, 10, 1),           # pytest
    "a line that is not a record",
])


def test_a_processes_kind_comes_from_its_parents_and_cpu_is_summed_in_seconds() -> None:
    processes = suite_cpu.parse_dump(DUMP)
    assert [p.pid for p in processes] == [15, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10]
    kinds = suite_cpu.summary(processes)
    assert kinds["Pythons in containers (ranks, evaluation, preparation, image probes)"] == (1, pytest.approx(7.5))
    assert kinds["Snakemake's job processes (one per run: job)"] == (1, pytest.approx(2.3))
    assert kinds["Snakemake (main processes)"] == (1, pytest.approx(3.5))
    assert kinds["layer extraction (gzip, tar)"] == (2, pytest.approx(3.4))
    assert kinds["container engines (proot, runc)"] == (1, pytest.approx(1.0))
    assert kinds["pytest and root's Pythons"] == (1, pytest.approx(1.2))
    assert kinds["other Pythons (hvdflow commands, launchers, rank tasks)"] == (2, pytest.approx(0.17))
    assert kinds["other: runuser"] == (1, pytest.approx(0.0)) and kinds["other: sh"] == (1, pytest.approx(0.0))
    assert sum(cpu for _, cpu in kinds.values()) == pytest.approx(19.07)

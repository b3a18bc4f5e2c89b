"""The port allocator shared by these tests, the scripts and testkit (scripts/ports.py):
ports outside the kernel's ephemeral range, unique, and locked against other processes."""

from __future__ import annotations

import subprocess
import sys
import threading

import ports
from conftest import ROOT


def test_reads_the_kernel_format():
    assert ports.parse_range("32768\t60999\n") == (32768, 60999)
    assert ports.parse_range("60999 32768") is None
    assert ports.parse_range("garbage") is None


def test_candidates_avoid_the_ephemeral_range_and_so_do_bus_ports():
    ephemeral = (32768, 60999)
    plain = ports.candidates(ephemeral)
    assert all(not 32768 <= p <= 60999 and p >= ports.LOWEST_PORT for p in plain)
    assert 32767 in plain and 61000 in plain and 65535 in plain
    bus = ports.candidates(ephemeral, bus=True)
    assert bus[0] == 10000 and bus[-1] == 22767
    assert all(not 32768 <= p + ports.BUS_OFFSET <= 60999 for p in bus)
    assert ports.candidates((1024, 65535)) == []


def test_ports_are_outside_the_kernels_range_unique_and_claimed():
    lo, hi = ports.ephemeral_range()
    got: list[int] = []

    def take():
        mine = [ports.listen_port() for _ in range(30)] + [ports.cluster_port() for _ in range(5)]
        got.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == len(got)
    assert all(not lo <= p <= hi for p in got)
    assert all(ports.is_claimed(p) for p in got)


def test_another_process_does_not_get_the_ports_held_here():
    held = {ports.listen_port() for _ in range(20)}
    script = "import ports; print(' '.join(str(ports.listen_port()) for _ in range(200)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT / "scripts", check=True,
                         capture_output=True, text=True, timeout=60).stdout
    theirs = {int(p) for p in out.split()}
    assert len(theirs) == 200
    assert not held & theirs

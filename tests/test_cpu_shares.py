"""Workers that share a machine without fighting (`peerify worker --cpus`): each worker's share of the cores
(domain/cpu_shares.py), the machine's live workers counted by the locks they hold (a SIGKILLed worker drops out by
itself), and a share put in force in a process: thread variables, torch's threads and every thread's affinity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from peerify_dagster.domain.cpu_shares import CpuShare, worker_share
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.cpu_shares import REGISTRY_VARIABLE, join_machine, live_workers
from tests.fakes.cli import cli_env, peerify

AFFINITY = hasattr(os, "sched_setaffinity")


def test_a_lone_worker_has_every_core_and_pins_nothing():
    assert worker_share(range(4), slot=0, workers=1) == CpuShare((0, 1, 2, 3), threads=4, pinned=False)
    # its processes divide the threads among them
    assert worker_share(range(4), slot=0, workers=1, processes=2).threads == 2


def test_workers_sharing_a_machine_split_its_cores_without_overlap():
    shares = [worker_share(range(5), slot, workers=2) for slot in range(2)]
    assert [share.cores for share in shares] == [(0, 1, 2), (3, 4)]
    assert [share.threads for share in shares] == [3, 2] and all(share.pinned for share in shares)
    # more workers than cores: one core each, taken in turn
    assert [worker_share([0, 1], slot, workers=3).cores for slot in range(3)] == [(0,), (1,), (0,)]


def test_cpus_gives_a_worker_cores_of_its_own_whatever_the_others_do():
    assert worker_share(range(4), slot=1, workers=1, cpus=1) == CpuShare((1,), threads=1, pinned=True)
    assert worker_share(range(4), slot=1, workers=3, cpus=2).cores == (2, 3)
    assert worker_share(range(2), slot=0, workers=1, cpus=8) == CpuShare((0, 1), threads=2, pinned=False)
    with pytest.raises(ValueError, match="--cpus 0"):
        worker_share(range(2), slot=0, workers=1, cpus=0)


HOLDER = """
import sys, time
from pathlib import Path
from peerify_dagster.resources.cpu_shares import join_machine
join_machine(None, 1, Path(sys.argv[1]))
print("joined", flush=True)
time.sleep(600)
"""


def test_the_live_workers_are_counted_and_a_killed_one_drops_out(tmp_path):
    registry = tmp_path / "workers"
    mine = join_machine(None, 1, registry)
    assert live_workers(registry) == [mine.path] and not mine.share().pinned
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(registry)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "joined"
        assert len(live_workers(registry)) == 2
        cores = os.sched_getaffinity(0) if AFFINITY else range(os.cpu_count() or 1)
        assert mine.share() == worker_share(cores, slot=0, workers=2)  # the first to start, the first part
        os.kill(other.pid, signal.SIGKILL)
        other.wait(timeout=30)
        assert live_workers(registry) == [mine.path]  # its lock went with it; its file is removed
        assert len(list(registry.glob("*.worker"))) == 1
        assert not mine.share().pinned
    finally:
        other.kill()
        other.wait(timeout=30)


APPLY = """
import json, os, sys
from pathlib import Path
import torch
torch.set_num_threads(len(os.sched_getaffinity(0)))
torch.ones(256, 256) @ torch.ones(256, 256)  # the intra-op pool started before the share
from peerify_dagster.domain.cpu_shares import CpuShare
from peerify_dagster.resources.cpu_shares import apply_share
core = min(os.sched_getaffinity(0))
apply_share(CpuShare((core,), 1, True))
tasks = {t.name: sorted(os.sched_getaffinity(int(t.name))) for t in Path("/proc/self/task").iterdir()}
print(json.dumps({"core": core, "tasks": tasks, "torch": torch.get_num_threads(),
                  "omp": os.environ["OMP_NUM_THREADS"], "rayon": os.environ["RAYON_NUM_THREADS"]}))
"""


@pytest.mark.skipif(not AFFINITY, reason="CPU affinity is a Linux call")
def test_a_share_in_force_limits_every_pool_and_pins_every_thread():
    done = subprocess.run([sys.executable, "-c", APPLY], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["torch"] == 1 and seen["omp"] == "1" and seen["rayon"] == "1"
    assert len(seen["tasks"]) > 1  # torch's pool threads, started before, are pinned too
    assert all(cores == [seen["core"]] for cores in seen["tasks"].values()), seen["tasks"]


def test_the_worker_refuses_no_cores_before_it_connects_anywhere(tmp_path):
    env = cli_env(tmp_path / "lake", tmp_path / "venues.yaml", None, PEERIFY_REDIS_URL="redis://127.0.0.1:1/0",
                  **{REGISTRY_VARIABLE: str(tmp_path / "workers")})
    started = time.monotonic()
    done = peerify("worker", "--cpus", "0", env=env, timeout=120)
    assert done.returncode == 2 and "--cpus 0: a worker needs at least one core" in done.stderr
    assert not (tmp_path / "workers").exists() and time.monotonic() - started < 120
    assert Path(tmp_path).exists()

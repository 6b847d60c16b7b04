"""Where a sweep runs: the one place that knows a local cluster from an existing one.

`connect(scheduler=None)` starts a Dask ``LocalCluster`` on this machine (one single-threaded
worker process per core, every socket bound to 127.0.0.1: scheduler, workers, nannies and
the scheduler's HTTP endpoint on a free port) and returns a client
of it; `connect("tcp://HOST:PORT")` returns a client of an existing scheduler. Either way it
registers `ProjectCode` (tb/sweep/codeship.py), so the workers run this tree's code without
a manual install, and with ``pip_install`` Dask's ``PipInstall`` plugin with the pinned
requirements (requirements.lock) for workers that lack them. The engine then sees only a
``distributed.Client``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from tb.sweep import codeship

ROOT = Path(__file__).resolve().parents[2]


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def pinned_requirements(root: Path = ROOT) -> list[str]:
    """requirements.lock's pins (what ``--pip-install`` asks the workers to install)."""
    lines = (root / "requirements.lock").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def ship_code(client: object, root: Path = ROOT, force: bool = False,
              pip_install: bool = False, base: str | None = None) -> None:
    """Register the plugins that put this project (and, optionally, its pinned dependencies)
    on every worker of ``client``'s cluster."""
    import cloudpickle

    if pip_install:
        from distributed.diagnostics.plugin import PipInstall

        client.register_plugin(PipInstall(packages=pinned_requirements(root),  # type: ignore
                                          restart_workers=True))
    cloudpickle.register_pickle_by_value(codeship)
    try:
        client.register_plugin(codeship.ProjectCode(root, force=force, base=base),  # type: ignore
                               name=codeship.ProjectCode.name)
    finally:
        cloudpickle.unregister_pickle_by_value(codeship)


@contextlib.contextmanager
def connect(scheduler: str | None = None, workers: int | None = None, *,
            ship: bool = True, force_ship: bool = False, pip_install: bool = False,
            quiet: bool = True) -> Iterator[object]:
    """A ``distributed.Client``: of a new LocalCluster on 127.0.0.1 (``scheduler`` None;
    ``workers`` processes, default one per core) or of the scheduler at ``scheduler``."""
    from distributed import Client, LocalCluster

    if scheduler is None:
        n = workers or default_workers()
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address="127.0.0.1:0",
                               silence_logs=logging.ERROR if quiet else logging.WARNING,
                               memory_limit=0)
        client = Client(cluster)
    else:
        if workers is not None:
            raise ValueError("--workers sizes a local cluster; an existing cluster (--scheduler) "
                             "has the workers it has")
        cluster = None
        client = Client(scheduler, timeout="30s")
    try:
        if ship:
            ship_code(client, force=force_ship, pip_install=pip_install)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()

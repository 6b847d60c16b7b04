"""Design-space sweeps: accelerator configurations x models x cards, on Dask (docs/sweep.md).

``python -m tb.sweep SPEC`` (``make sweep SPEC=...``): tb/sweep/spec.py reads the spec,
tb/sweep/engine.py runs its points on a Dask cluster (tb/sweep/cluster.py: a LocalCluster by
default, an existing scheduler with ``--scheduler``), tb/sweep/tasks.py and worker.py are what
a worker runs (compile; run on the functional card or on card_top under a simulator,
tb/sweep/rtl_point.py), tb/sweep/cache.py keeps results by content hash, and
tb/sweep/report.py writes the table, CSVs and plots.
"""

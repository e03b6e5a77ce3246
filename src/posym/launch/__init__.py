"""How the stages of a fan-out verb (``posym reproduce``) are run, below the verbs that plan them.

Three ways, one stage function each time: **in-process** (``jobs=1``: :class:`~posym.launch.pool.Inline`
runs every stage at submit time), a **local worker pool** (:mod:`posym.launch.pool`: ``spawn``
processes that die with their parent, with a stage wrapper that never raises), or **one Slurm job
per stage** (:mod:`posym.launch.slurm`, docs/cluster.md: ``sbatch`` with ``afterok`` dependencies,
``squeue`` / ``scontrol`` for the state, ``scancel`` on Ctrl-C).

The launchers know nothing of the stages they run: they import only ``errors``, ``checks``, ``files``,
``progress`` and ``runs``, never ``verbs``. The ``squeue`` reader itself stays in :mod:`posym.runs.jobs`, because the run lock
(:mod:`posym.runs.lock`) asks it whether the Slurm jobs holding a directory still live.
"""

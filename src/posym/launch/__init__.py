"""How the stages of a fan-out verb (``posym reproduce``) are run, below the verbs that plan them.

Three ways, one stage function each time: **in-process** (``jobs=1``: :class:`~posym.launch.pool.Inline`
runs every stage at submit time), a **local worker pool** (:mod:`posym.launch.pool`: ``spawn``
processes that die with their parent, with a stage wrapper that never raises), or **one Slurm job
per stage** (:mod:`posym.launch.slurm`, docs/cluster.md: ``sbatch`` with ``afterok`` dependencies,
``squeue`` / ``scontrol`` for the state, ``scancel`` on Ctrl-C). A fan-out study (``posym interventions``,
``head-types``, ``lengthgen``, ``sensitivity``, ``pe-study`` with ``--launcher slurm``) plans its units
and summary as :class:`~posym.launch.fanout.FanOut`; :func:`~posym.launch.fanout.submit_fanout` submits
the units not done (markers written by the hidden ``posym _unit``) and the summary after them.

The launchers know nothing of the stages they run: they import only ``errors``, ``checks``, ``files``,
``progress`` and ``runs``, never ``verbs``. The ``squeue`` reader itself stays in :mod:`posym.runs.jobs`, because the run lock
(:mod:`posym.runs.lock`) asks it whether the Slurm jobs holding a directory still live.
"""

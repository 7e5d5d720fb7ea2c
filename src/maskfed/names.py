"""The profiles' names, one constant each.

``smoke`` and ``cpu`` build the book quickly; the archived ones are read by every build: ``cpu-paper`` is the
paper's protocol for its 200 rounds with a small GroupNorm CNN (not the paper's model), ``cpu-long`` the same for
100 rounds, ``cpu-masked`` masked training, and ``paper`` the paper's own setting on a GPU.
:data:`maskfed.engine.config.PROFILES` lists the same names, in this order (tests/test_config.py keeps them in
step; the run configuration's module is part of every run's code hash, so it does not import them).
"""

SMOKE, CPU, CPU_LONG, CPU_PAPER, CPU_MASKED, PAPER = "smoke", "cpu", "cpu-long", "cpu-paper", "cpu-masked", "paper"
ALL = (SMOKE, CPU, CPU_LONG, CPU_PAPER, CPU_MASKED, PAPER)

"""The FedAvg engine: a run's configuration and profiles (``config``), offline CIFAR-10
(``data``, ``datacache``), per-class Dirichlet α shards (``partition``), the networks (``models``),
local training of a cohort (``cohort``), one FedAvg round and its loop (``fedavg``), checkpoints
(``checkpoint``), deterministic kernels (``determinism``), run folders, sweeps and workers
(``runner``) and the checks made before any compute (``preflight``). Every module here but
``datacache`` and ``preflight`` is hashed into a run's cache key
(``maskfed.provenance.RUN_MODULES``)."""

"""The FedAvg engine: a run's configuration and profiles (``config``), offline CIFAR-10
(``data``, ``datacache``), per-class Dirichlet α shards (``partition``), the networks (``models``),
local training of a cohort (``cohort``), one FedAvg round and its loop (``fedavg``), checkpoints
(``checkpoint``, whose ``write_folder`` writes every cached result's folder), deterministic kernels
(``determinism``), run folders, sweeps and workers (``runner``), the key and provenance record of every
other cached result (``store``) and the checks made before any compute (``preflight``). Every module
here but ``datacache``, ``store`` and ``preflight`` is hashed into a run's cache key
(``maskfed.provenance.RUN_MODULES``)."""

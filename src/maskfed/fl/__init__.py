"""FL measurement: everything a FedAvg run executes and what summarises it.

Run side (hashed into every run's cache key, ``maskfed.provenance.RUN_MODULES``): ``config``
(RunConfig, profiles), ``data`` (offline CIFAR-10), ``partition`` (per-class Dirichlet α),
``models`` (GroupNorm CNN / ResNet-18-GN), ``masking`` (block masks, keep probability p),
``fedavg`` (one round, client updates Δ_k, aggregation), ``cohort`` (the batched engine),
``diversity`` (recovery factor 1/Δ_S, σ̂², ‖μ̂‖²), ``penalty`` / ``sharpness`` (curvature),
``checkpoint``, ``determinism``, ``runner`` (run folders, sweeps, workers).
Measurement side: ``experiments`` (the book's grids), ``summary`` (Tables I and II),
``stage`` (measurement at fixed checkpoints), ``masked_training`` (training under a mask).
"""

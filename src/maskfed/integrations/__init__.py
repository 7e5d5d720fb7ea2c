"""The recovery factor inside the field's tools: a Flower strategy (``flower``) and a Ray
backend for sweeps (``ray_backend``)."""

"""What runs are summarised into: Tables I and II (``summary``), seed ranges and bootstrap
intervals (``uncertainty``) and the paper's claims judged on them (``claims``)."""

"""Studies built on the engine: the book's experiment grids (``experiments``), measurement at
fixed θ (``stage``), centralised θ (``central``), one pool of client updates per θ
(``pool_gram``), what sets the factor (``factor_axes``), training under a mask
(``masked_training``) and the archive of finished studies (``archive``)."""

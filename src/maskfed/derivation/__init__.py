"""Theory: simulation helpers for the derivation chapters (``theory``: Propositions 1-3,
Corollary 1, eq. 9-14), other noise models (``perturbations``) and the penalty beyond its
quadratic approximation (``limits``)."""

"""The paper's equations on tensors, with no I/O: block masks and their keep probability p
(``masking``, eq. 1-2), the recovery factor 1/Δ_S and its signal and noise (``diversity``,
eq. 9-14), the curvature penalty R(Δ) (``penalty``, eq. 4-8) and Hessian sharpness (``sharpness``)."""

"""One BLAS/OpenMP thread per plan process; imported first by the plan processes only.

``service.plans.pool`` names this module (by its name, never importing it) as the first
module its fork server preloads, before ``service.plans.tasks`` imports numpy: OpenBLAS and
OpenMP read these variables once, when they load. A plan process computes one plan
at a time, so more threads would only reserve more memory (each BLAS thread has its
own buffers, which count against the process's memory limit) and contend with the
other plan processes for the same cores. The API process never imports this module.
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

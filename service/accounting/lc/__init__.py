"""Linear combination (LC): what releasing theta = sum_i lambda_i theta_i proves.

Source: Section 6 of "Privacy retargeting by model merging" (the dp-model-merging
paper), with the correction the architecture states: for multi-step DP-SGD only the
last step is merged (the first T_i - 1 steps of each run are released jointly,
Theorem 6.1), and that merged step is a one-dimensional Gaussian mixture against
N(0, 1) (``mixture``, ``merged_step``), accounted in RDP by quadrature and as a PLD
(``mixture_pld``, ``step_pld``). ``paper`` keeps the paper's per-step composition as a
labelled comparison only.

Oracles in the tests: the exact output distribution by quadrature and root finding,
dp_accounting's mixture PLDs under composition, exact enumeration of inclusion
patterns, and simulated adversarial runs whose gradients read hidden state.
"""

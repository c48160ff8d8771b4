"""Random selection (RS): release model i with probability pi_i.

Source: Theorems 5.1 (RDP) and 5.2 (PLD) of the dp-model-merging paper: for a fixed
order or epsilon the constraint is linear in pi, so the optimal mixture is a small
linear program solved exactly.

Oracles in the tests: the exact output distribution of the selection (a mixture of
the models' outputs) and an empirical audit of the released choice.
"""

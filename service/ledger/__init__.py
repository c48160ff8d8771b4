"""The ledger: what the outside world has seen of a dataset, and its cap.

charges   exposures charged by the joint release of the models they expose
          (Theorem 6.1; checkpoints of one run: the latest one's profile)
"""

"""Trainer-side integrations: record what a DP training run did, register its checkpoints."""

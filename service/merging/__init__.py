"""Merging released models: one method per file behind ``MergeMethod`` and ``METHODS``."""

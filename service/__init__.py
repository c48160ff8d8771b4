"""Retarget: deployment-time privacy retargeting of differentially private models."""

__version__ = "0.1.0"

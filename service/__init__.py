"""Retarget's server: deployment-time privacy retargeting of differentially private models."""

from retarget._version import __version__

__all__ = ["__version__"]

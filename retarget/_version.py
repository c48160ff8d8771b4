"""The version of the distribution (the SDK and the server share it)."""

__version__ = "0.1.0"

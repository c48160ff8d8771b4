"""The Python client of the Retarget service (sync and async, on httpx).

It talks to the service over HTTP only and imports nothing of the server, so it can
be used wherever the package is installed (an import-linter contract keeps it so).

    from retarget.client import RetargetClient   # or AsyncRetargetClient

Configuration: ``RetargetClient(url, api_key)`` or the ``RETARGET_URL`` and
``RETARGET_API_KEY`` environment variables.
"""

from retarget.client import errors
from retarget.client.aio import AsyncRetargetClient
from retarget.client.errors import ApiError, ClientError, RetargetClientError, ServerError
from retarget.client.sync import RetargetClient
from retarget.client.types import (
    Dataset,
    Deployment,
    Download,
    Epsilon,
    FolderDownload,
    Guarantee,
    Job,
    Key,
    KeyCreated,
    Ledger,
    Model,
    Page,
    Plan,
    Release,
)

__all__ = [
    "ApiError",
    "AsyncRetargetClient",
    "ClientError",
    "Dataset",
    "Deployment",
    "Download",
    "Epsilon",
    "FolderDownload",
    "Guarantee",
    "Job",
    "Key",
    "KeyCreated",
    "Ledger",
    "Model",
    "Page",
    "Plan",
    "Release",
    "RetargetClient",
    "RetargetClientError",
    "ServerError",
    "errors",
]

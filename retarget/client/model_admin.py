"""What a client does to a registered model beyond reading it: retire and restore it
(admin), and download its raw files (charged to the dataset's ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retarget.client.ops import Progress
from retarget.client.resources import ModelOps
from retarget.client.types import FolderDownload, Model


class ModelAdmin:
    _c: Any

    def retire(self, model_id: str, reason: str, *, force: bool = False) -> Model:
        """Leave the model out of every plan of its dataset (admin; ``force`` where a
        deployment serves it). Its releases stay in the ledger."""
        result: Model = self._c.run(ModelOps.retire(model_id, reason, force))
        return result

    def restore(self, model_id: str) -> Model:
        """Make a retired model a candidate again (admin)."""
        result: Model = self._c.run(ModelOps.restore(model_id))
        return result

    def download_folder(
        self, model_id: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """The model's raw files into ``folder`` (``retarget models download``): scope
        ``models:download``, and every file downloaded is charged to the dataset's
        ledger as an exposure of this model (refused with 409 past the cap)."""
        result: FolderDownload = self._c.run(ModelOps.download_folder(model_id, folder, progress))
        return result


class AsyncModelAdmin:
    _c: Any

    async def retire(self, model_id: str, reason: str, *, force: bool = False) -> Model:
        """Leave the model out of every plan of its dataset (admin)."""
        result: Model = await self._c.run(ModelOps.retire(model_id, reason, force))
        return result

    async def restore(self, model_id: str) -> Model:
        """Make a retired model a candidate again (admin)."""
        result: Model = await self._c.run(ModelOps.restore(model_id))
        return result

    async def download_folder(
        self, model_id: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """The model's raw files into ``folder``; charged to the dataset's ledger."""
        result: FolderDownload = await self._c.run(
            ModelOps.download_folder(model_id, folder, progress)
        )
        return result

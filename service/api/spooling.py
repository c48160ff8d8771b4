"""Multipart bodies whose file parts spool to the blob store's staging folder.

Starlette's parser keeps each file part in memory up to ``spool_max_size`` and then
rolls it over to an anonymous file in the system temp folder: a second copy of every
upload on another disk (RAM when the temp folder is a tmpfs), and on a disk the
service does not watch. Here the rolled-over file is made in the store's staging folder
instead (``BlobStore.staging_dir``: next to the blobs for a local store, on the same
file system; the configured cache folder for a bucket), so an upload needs the space
only where ``/readyz`` checks it. The file is anonymous where the OS allows it and
removed when closed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from tempfile import SpooledTemporaryFile

from starlette.datastructures import FormData, Headers
from starlette.formparsers import MultiPartParser


class StagedMultiPartParser(MultiPartParser):
    """Starlette's multipart parser with its file parts spooled under ``staging_dir``."""

    def __init__(
        self,
        headers: Headers,
        stream: AsyncGenerator[bytes, None],
        *,
        staging_dir: Path,
        max_files: int,
        max_fields: int,
        max_part_size: int,
    ) -> None:
        super().__init__(
            headers,
            stream,
            max_files=max_files,
            max_fields=max_fields,
            max_part_size=max_part_size,
        )
        self.staging_dir = staging_dir

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        upload = self._current_part.file
        if upload is None:
            return
        # the part's file was made just now and holds nothing yet: swap it for one that
        # rolls over into the staging folder (the parser closes it on error, as before)
        spooled = SpooledTemporaryFile(  # noqa: SIM115 (closed with the form)
            max_size=self.spool_max_size, dir=str(self.staging_dir), prefix="spool-"
        )
        unused = upload.file
        upload.file = spooled  # type: ignore[assignment]
        if self._files_to_close_on_error and self._files_to_close_on_error[-1] is unused:
            self._files_to_close_on_error[-1] = spooled
        else:
            self._files_to_close_on_error.append(spooled)
        unused.close()


async def staged_form(
    headers: Headers,
    stream: AsyncGenerator[bytes, None],
    *,
    staging_dir: Path,
    max_files: int,
    max_fields: int,
    max_part_size: int,
) -> FormData:
    """The multipart body's parts, its files spooled under ``staging_dir``."""
    parser = StagedMultiPartParser(
        headers,
        stream,
        staging_dir=staging_dir,
        max_files=max_files,
        max_fields=max_fields,
        max_part_size=max_part_size,
    )
    return await parser.parse()

"""Models by name, their aliases and their tags, for the sync and the async client.

A model is named by its id or by ``DATASET/NAME[@VERSION|@ALIAS]`` (``@latest``, the
highest version, by default): ``digits/sigma1.2``, ``digits/sigma1.2@3``,
``digits/sigma1.2@champion``. A dataset, wherever one is taken, by its id or its name.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from retarget.client.ops import Call, Op, json_call
from retarget.client.types import Aliases, AliasEvent, AliasMoved, Model


def segment(value: str) -> str:
    """``value`` as one path segment (a name of dots only is escaped, or a URL
    library would read it as the folder above)."""
    if value.strip(".") == "":
        return value.replace(".", "%2E")
    return quote(value, safe="")


def split_ref(ref: str) -> tuple[str, str] | None:
    """(dataset, ``NAME[@SELECTOR]``) of ``DATASET/NAME[@SELECTOR]``; None for an id."""
    dataset, slash, rest = ref.partition("/")
    if not slash:
        return None
    if not dataset or not rest:
        raise ValueError(f"{ref!r} is not a model reference: use DATASET/NAME[@VERSION|@ALIAS]")
    return dataset, rest


def model_path(ref: str) -> str:
    """The API path of the model an id or a ``DATASET/NAME[@SELECTOR]`` names."""
    parts = split_ref(ref)
    if parts is None:
        return f"/v1/models/{segment(ref)}"
    return f"/v1/datasets/{segment(parts[0])}/models/{segment(parts[1])}"


class ModelNameOps:
    @staticmethod
    def get(ref: str) -> Op[Model]:
        return Model.model_validate((yield from json_call(Call("GET", model_path(ref)))))

    @staticmethod
    def model_id(ref: str) -> Op[str]:
        """The id of the model ``ref`` names now (an id is taken as it is)."""
        if split_ref(ref) is None:
            return ref
        return (yield from ModelNameOps.get(ref)).id

    @staticmethod
    def _named(ref: str) -> Op[tuple[str, str, str]]:
        """(dataset, model name, selector) of ``ref``; an id asks the service."""
        parts = split_ref(ref)
        if parts is not None:
            name, at, selector = parts[1].rpartition("@")
            return (parts[0], name, selector) if at else (parts[0], parts[1], "latest")
        model = yield from ModelNameOps.get(ref)
        return model.dataset_id, model.name, str(model.version)

    @staticmethod
    def aliases(ref: str) -> Op[Aliases]:
        dataset, name, _ = yield from ModelNameOps._named(ref)
        call = Call("GET", f"/v1/datasets/{segment(dataset)}/models/{segment(name)}/aliases")
        return Aliases.model_validate((yield from json_call(call)))

    @staticmethod
    def set_alias(ref: str, alias: str) -> Op[AliasMoved]:
        """Point ``alias`` at the version ``ref`` names (``@3``; ``@latest`` or another
        alias: the version it names now)."""
        dataset, name, selector = yield from ModelNameOps._named(ref)
        if not (selector.isascii() and selector.isdigit()):
            selector = str((yield from ModelNameOps.get(ref)).version)
        path = f"/v1/datasets/{segment(dataset)}/models/{segment(name)}/aliases/{segment(alias)}"
        call = Call("PUT", path, json={"version": int(selector)})
        return AliasMoved.model_validate((yield from json_call(call)))

    @staticmethod
    def delete_alias(ref: str, alias: str) -> Op[AliasEvent]:
        dataset, name, _ = yield from ModelNameOps._named(ref)
        path = f"/v1/datasets/{segment(dataset)}/models/{segment(name)}/aliases/{segment(alias)}"
        return AliasEvent.model_validate((yield from json_call(Call("DELETE", path))))

    @staticmethod
    def set_tags(ref: str, tags: dict[str, str], remove: list[str]) -> Op[dict[str, str]]:
        if split_ref(ref) is None:
            model = yield from ModelNameOps.get(ref)
            path = f"/v1/datasets/{segment(model.dataset_id)}/models/{segment(model.id)}/tags"
        else:
            path = f"{model_path(ref)}/tags"
        call = Call("PATCH", path, json={"set": dict(tags), "remove": list(remove)})
        answer: dict[str, Any] = yield from json_call(call)
        return dict(answer["tags"])


class ModelNames:
    """The sync client's ``models`` methods for names (mixed into ``Models``)."""

    _c: Any

    def aliases(self, model: str) -> Aliases:
        """The aliases of every version of ``DATASET/NAME``, with their history."""
        result: Aliases = self._c.run(ModelNameOps.aliases(model))
        return result

    def set_alias(self, model: str, alias: str) -> AliasMoved:
        """Point ``alias`` at ``DATASET/NAME@VERSION``; deployments following it re-target
        (``retargets``: their jobs)."""
        result: AliasMoved = self._c.run(ModelNameOps.set_alias(model, alias))
        return result

    def delete_alias(self, model: str, alias: str) -> AliasEvent:
        result: AliasEvent = self._c.run(ModelNameOps.delete_alias(model, alias))
        return result

    def set_tags(
        self, model: str, tags: dict[str, str] | None = None, *, remove: list[str] | None = None
    ) -> dict[str, str]:
        """Set (a label: value "") and remove tags of one version; its tags after."""
        result: dict[str, str] = self._c.run(ModelNameOps.set_tags(model, tags or {}, remove or []))
        return result


class AsyncModelNames:
    """The async client's ``models`` methods for names (mixed into ``Models``)."""

    _c: Any

    async def aliases(self, model: str) -> Aliases:
        result: Aliases = await self._c.run(ModelNameOps.aliases(model))
        return result

    async def set_alias(self, model: str, alias: str) -> AliasMoved:
        result: AliasMoved = await self._c.run(ModelNameOps.set_alias(model, alias))
        return result

    async def delete_alias(self, model: str, alias: str) -> AliasEvent:
        result: AliasEvent = await self._c.run(ModelNameOps.delete_alias(model, alias))
        return result

    async def set_tags(
        self, model: str, tags: dict[str, str] | None = None, *, remove: list[str] | None = None
    ) -> dict[str, str]:
        result: dict[str, str] = await self._c.run(
            ModelNameOps.set_tags(model, tags or {}, remove or [])
        )
        return result

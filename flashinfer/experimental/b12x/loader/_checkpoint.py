"""A checkpoint = validated shards + an optional index, with every tensor name mapped to one entry."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ._format import SafetensorsFile, TensorEntry, read_safetensors_header
from .errors import CheckpointFormatError

INDEX_SUFFIX = ".safetensors.index.json"


@dataclass(frozen=True)
class Checkpoint:
    """Shards in load order and `entries[name]`; built only when every header and the index agree."""

    files: tuple[SafetensorsFile, ...]
    entries: Mapping[str, TensorEntry] = field(hash=False, compare=False)
    index_path: str | None = None

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())


class HeaderCache:
    """Parsed headers keyed by path and file identity (size, mtime), so a rewritten file is re-read."""

    def __init__(self):
        self._files: dict[str, SafetensorsFile] = {}

    def get(self, path: str) -> SafetensorsFile:
        path = os.path.abspath(path)
        cached = self._files.get(path)
        if cached is not None:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is not None and (st.st_size, st.st_mtime_ns) == (cached.size, cached.mtime_ns):
                return cached
        parsed = read_safetensors_header(path)
        self._files[path] = parsed
        return parsed


def _read_index(index_path: str) -> dict[str, str]:
    """weight_map of an index json, names -> absolute shard paths."""
    try:
        with open(index_path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointFormatError(f"{index_path}: no such index file", file=index_path) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CheckpointFormatError(f"{index_path}: index is not valid JSON: {exc}", file=index_path) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointFormatError(
            f"{index_path}: expected an object with a 'weight_map' of tensor name -> shard file name",
            file=index_path,
        )
    base = os.path.dirname(os.path.abspath(index_path))
    return {name: os.path.abspath(os.path.join(base, shard)) for name, shard in weight_map.items()}


def _shards_of_directory(directory: str) -> tuple[list[str], str | None]:
    indexes = sorted(glob.glob(os.path.join(glob.escape(directory), "*" + INDEX_SUFFIX)))
    if len(indexes) > 1:
        raise CheckpointFormatError(
            f"{directory}: several index files ({', '.join(os.path.basename(i) for i in indexes)}); "
            "pass index_path= to choose one",
            file=directory,
        )
    if indexes:
        return [], indexes[0]
    shards = sorted(glob.glob(os.path.join(glob.escape(directory), "*.safetensors")))
    if not shards:
        raise CheckpointFormatError(f"{directory}: no *.safetensors files and no index", file=directory)
    return shards, None


def resolve_checkpoint(
    files: str | os.PathLike | Iterable[str | os.PathLike],
    index_path: str | os.PathLike | None = None,
    cache: HeaderCache | None = None,
) -> Checkpoint:
    """Validate a checkpoint given as a directory, an index json, one file or a list of shard files."""
    cache = cache or HeaderCache()
    index = os.fspath(index_path) if index_path is not None else None
    shards: list[str] = []
    if isinstance(files, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(files))
        if os.path.isdir(path):
            shards, found = _shards_of_directory(path)
            index = index or found
        elif path.endswith(".json"):
            index = index or path
            if os.path.abspath(index) != path:
                raise CheckpointFormatError(f"got index {path} and index_path={index}; pass one", file=path)
        else:
            shards = [path]
    else:
        shards = [os.path.abspath(os.fspath(f)) for f in files]
        if not shards and index is None:
            raise CheckpointFormatError("no checkpoint files given")

    weight_map = None
    if index is not None:
        index = os.path.abspath(index)
        weight_map = _read_index(index)
        listed = list(dict.fromkeys(weight_map.values()))
        if shards and set(shards) != set(listed):
            extra = sorted(set(shards) ^ set(listed))
            raise CheckpointFormatError(
                f"{index}: the index lists shards {sorted(map(os.path.basename, listed))} but files "
                f"{sorted(map(os.path.basename, shards))} were given (differ in {extra})",
                file=index,
            )
        shards = shards or sorted(listed)
        for name, shard in weight_map.items():
            if not os.path.isfile(shard):
                raise CheckpointFormatError(
                    f"{index}: tensor {name!r} is mapped to {shard}, which does not exist", file=shard, tensor=name
                )

    parsed = [cache.get(s) for s in dict.fromkeys(shards)]
    entries: dict[str, TensorEntry] = {}
    for shard in parsed:
        for entry in shard.entries:
            other = entries.get(entry.name)
            if other is not None:
                raise CheckpointFormatError(
                    f"tensor {entry.name!r} is in both {other.file} and {shard.path}; names must be unique "
                    "across shards",
                    file=shard.path,
                    tensor=entry.name,
                )
            if weight_map is not None and weight_map.get(entry.name) != shard.path:
                where = weight_map.get(entry.name)
                raise CheckpointFormatError(
                    f"{index}: tensor {entry.name!r} is stored in {shard.path} but the index "
                    + (f"maps it to {where}" if where else "does not list it"),
                    file=shard.path,
                    tensor=entry.name,
                )
            entries[entry.name] = entry
    if weight_map is not None:
        for name, shard in weight_map.items():
            if name not in entries:
                raise CheckpointFormatError(
                    f"{index}: tensor {name!r} is mapped to {shard}, whose header does not have it",
                    file=shard,
                    tensor=name,
                )
    return Checkpoint(tuple(parsed), entries, index)

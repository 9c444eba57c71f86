"""Errors of the checkpoint loader. Each message names the file and tensor, what was expected and what came."""

from __future__ import annotations


class CheckpointFormatError(ValueError):
    """A checkpoint is malformed: bad safetensors header, inconsistent index, duplicate tensor names.

    Raised before any byte of tensor data is delivered, so a malformed checkpoint never loads partially.
    `file` and `tensor` name the culprit where one is known.
    """

    def __init__(self, message: str, *, file: str | None = None, tensor: str | None = None):
        super().__init__(message)
        self.file = file
        self.tensor = tensor


class CheckpointReadError(OSError):
    """Reading tensor bytes failed (I/O error, file truncated or changed after its header was read).

    Destinations of the failed flush hold undefined bytes; the load must be treated as failed.
    """

    def __init__(self, message: str, *, file: str | None = None, tensor: str | None = None):
        super().__init__(message)
        self.file = file
        self.tensor = tensor


class SharedReadError(RuntimeError):
    """A rank of a SharedReadGroup failed; every rank of the group raises this, naming the failed rank."""

    def __init__(self, message: str, *, rank: int | None = None):
        super().__init__(message)
        self.rank = rank

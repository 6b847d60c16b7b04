"""Tensor handles and the manager's record of each tensor.

A `TensorHandle` is an indirect handle: it names a tensor by id, never by card address, so the
manager may evict and move tensors freely; `need_in_device` gives the current addresses. The
`_Entry` is the manager's private record of where the tensor's bytes are valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyhost.memory.codec import Codec, PrecisionReport
from pyhost.memory.hoststore import HostHome


@dataclass(frozen=True, eq=False, slots=True)
class TensorHandle:
    """Handle returned by `allocate_tensor`. Compare by identity; `id` is unique per manager."""

    id: int
    size: int                 # bytes on the host (the allocation)
    name: str | None
    _owner: object            # the manager's token: a handle works only with its manager
    #: the manager's record of the tensor (_Entry) while it lives, None once freed: a call
    #: finds it without a lookup in the manager's map (with 100k tensors, a cache miss or two)
    _entry: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"TensorHandle(#{self.id}{label}, {self.size} bytes)"


class _Entry:
    """Where a tensor's bytes are valid. Invariants (checked by MemoryManager.check):

    - `addr is not None` iff the tensor holds card space (`resident`); a resident tensor's card
      copy is valid (or, if never written, there is nothing to preserve);
    - `dirty` (the card copy is newer than the host copy) implies resident and not host_valid;
    - a written tensor is host_valid or dirty: its current bytes are somewhere.
    """

    # (the fields every need call reads first: with 100k tensors the record is a cache miss,
    # and the first of its three cache lines holds these)
    __slots__ = ("handle", "id", "card_size", "addr", "pin", "spec", "discarded", "dirty",
                 "written", "host_valid", "home", "codec", "key", "size", "report", "useq",
                 "gathered")

    def __init__(self, handle: TensorHandle, key: str, card_size: int, home: HostHome | None,
                 codec: Codec | None) -> None:
        self.handle = handle
        self.id = handle.id
        self.key = key
        self.size = handle.size
        self.card_size = card_size
        self.home = home
        self.codec = codec
        self.addr: int | None = None
        self.written = False
        self.host_valid = False
        self.dirty = False
        self.pin = -1
        self.report: PrecisionReport | None = None
        self.discarded = False    # dropped dirty as dead (complete schedule): bytes are gone
        self.spec = False         # uploaded with a batch of deferred writes, not yet needed
        self.useq = -1            # order of its last tensor_updated (read gathering)
        self.gathered = False     # written back with a gathered read, not yet read

    @property
    def resident(self) -> bool:
        return self.addr is not None

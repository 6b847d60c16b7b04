"""The PCIe driver's errors: one base class, and the DMA and card-information errors (the
accelerator's own are in pyhost.accel.control). `pyhost.driver` re-exports them all."""

from __future__ import annotations

from collections.abc import Callable

from pyhost.spec.regs import Channel, DmaError


def cleanup_note(what: str, fn: Callable[[], object]) -> str:
    """Run ``fn`` (a reset, an abort, a read) on an error path. If it fails too, its error
    becomes a note to put in the error being reported, instead of replacing that error."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported inside the original error
        return f" ({what} failed as well: {type(e).__name__}: {e})"
    return ""


class DriverError(Exception):
    """Base class of PcieDriver errors."""


class CardInfoError(DriverError):
    """The card's identification registers do not describe a card this driver can drive."""


class CardNotFound(CardInfoError):
    """CARD_ID does not read as this card's ID (wrong device, or BAR0 not mapped)."""


class CardVersionError(CardInfoError):
    """The card's register map has a major version this driver does not know."""


class TransferSizeError(DriverError, ValueError):
    """A transfer size is not a positive integer."""


class CardRangeError(DriverError, ValueError):
    """A card memory range is negative or reaches beyond the card's capacity."""


class DmaTimeout(DriverError, TimeoutError):
    """No interrupt arrived for a chain within the driver's timeout."""

    def __init__(self, message: str, channel: Channel, descriptors: int, completed: int) -> None:
        super().__init__(message)
        self.channel = channel
        self.descriptors = descriptors
        self.completed = completed


class DmaTransferError(DriverError):
    """A DMA chain stopped on an error (not the spec's DmaError enum, which is `code`)."""

    def __init__(self, message: str, channel: Channel, descriptor: int, code: DmaError,
                 transfer: int | None) -> None:
        super().__init__(message)
        self.channel = channel
        #: Index of the failing descriptor among the descriptors of the call.
        self.descriptor = descriptor
        self.code = code
        #: Index of the failing transfer in the call's transfer list (None: the write-back).
        self.transfer = transfer


class DmaProtocolError(DriverError):
    """The card broke the DMA contract (status, write-back and interrupt disagree)."""


class RequestLimitError(DriverError, ValueError):
    """A max payload / read request size or tag count outside what the engine accepts."""


class RegisterValueError(DriverError, ValueError):
    """A value for a 32-bit register that is not an integer in 0..2**32-1 (the driver never
    truncates: a truncated address would make the card use another one)."""

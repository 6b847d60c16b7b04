"""The pass interface: a named graph transformation that reports how much it changed."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from compiler.xir import Graph


@dataclass
class PassResult:
    """What a pass did: number of ops changed and pass-specific counters."""

    changed: int = 0
    details: dict[str, Any] = field(default_factory=dict)


class Pass(ABC):
    """A graph-to-graph transformation, run in place."""

    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def run(self, graph: Graph) -> PassResult:
        """Transform ``graph`` in place."""

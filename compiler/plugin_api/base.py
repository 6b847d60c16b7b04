"""The plugin interface, after ``Plugin.hpp`` in UG1414 (Vitis AI).

A plugin claims ops for a device: ``partition(graph)`` picks unassigned children of the root
subgraph (with the helpers in :mod:`compiler.plugin_api.helpers`), merges them into device-level
subgraphs and returns them; ``compile(subgraph)`` is then called for each and attaches whatever
the runtime needs (parameters, instruction streams) as subgraph attributes. The compiler sets
``device``, ``runner`` and ``plugin`` on each returned subgraph after compile. A plugin module
provides ``get_plugin() -> Plugin``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from compiler.errors import OptionsError
from compiler.xir import Graph, Subgraph


class Plugin(ABC):
    """Base class of compiler plugins."""

    #: After partition, move each constant (weights) read only by a claimed subgraph into it, so
    #: a device subgraph carries its own weights. Set False to manage constants yourself.
    absorb_constants: ClassVar[bool] = True

    @abstractmethod
    def get_plugin_name(self) -> str:
        """A unique name (used in options, reports and the ``plugin`` attribute)."""

    @abstractmethod
    def get_device(self) -> str:
        """The ``device`` attribute given to the claimed subgraphs (e.g. ``"SOFTMAX_IP"``)."""

    @abstractmethod
    def get_runner(self) -> str:
        """The ``runner`` attribute: the name the runtime resolves to a Runner for them."""

    @abstractmethod
    def partition(self, graph: Graph) -> set[Subgraph]:
        """Claim ops: return unassigned children of the root, merged as the device wants."""

    @abstractmethod
    def compile(self, subgraph: Subgraph) -> None:
        """Attach what the runtime needs to one claimed subgraph."""

    def reasons(self) -> Mapping[str, str]:
        """Op name -> why the last partition left that op to others (a plugin that knows says
        so: the compile report lists, for every op that ends on the CPU, the reasons of the
        plugins before it). Default: none."""
        return {}

    def set_options(self, options: Mapping[str, Any]) -> None:
        """Receive ``plugin_options[<name>]`` from the compile options; default: accept none."""
        if options:
            raise OptionsError(f"plugin {self.get_plugin_name()!r} takes no options, got "
                               f"{sorted(options)}")

    def __repr__(self) -> str:
        return f"<plugin {self.get_plugin_name()!r} device={self.get_device()!r}>"

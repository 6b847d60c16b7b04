"""XIR: the compiler's framework-independent graph (after Xilinx XIR, with Pythonic names).

``Graph`` owns ``Op``s (each with at most one output ``Tensor``) and the ``Subgraph`` tree that
plugins partition; ``GraphTemplate`` describes op patterns for template matching.
"""

from compiler.xir.attrs import AttrMap, values_equal
from compiler.xir.graph import CONST, DATA, Graph
from compiler.xir.op import Op
from compiler.xir.subgraph import Subgraph, creates_cycle
from compiler.xir.template import GraphTemplate, OpTemplate
from compiler.xir.tensor import Tensor, canonical_dtype

__all__ = [
    "CONST",
    "DATA",
    "AttrMap",
    "Graph",
    "GraphTemplate",
    "Op",
    "OpTemplate",
    "Subgraph",
    "Tensor",
    "canonical_dtype",
    "creates_cycle",
    "values_equal",
]

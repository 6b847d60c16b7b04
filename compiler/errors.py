"""Exception classes of the compiler: one per stage; each message says what was wrong and what to
do.

Every error the compiler raises on purpose derives from :class:`CompilerError`, so a caller (the
CLI, a test, the runtime) can catch the family and still tell the stages apart.
"""

from __future__ import annotations


class CompilerError(Exception):
    """Base class of every deliberate compiler error."""


class XirError(CompilerError):
    """An operation on the XIR graph or its subgraphs would break an invariant."""


class FrontendError(CompilerError):
    """The input model cannot be imported (malformed, or uses a feature the frontend lacks)."""


class UnsupportedOpError(FrontendError):
    """An op neither the frontend nor the CPU target can handle."""


class ShapeInferenceError(CompilerError):
    """An op's output shape or type cannot be determined, or disagrees with the model."""


class KernelError(CompilerError):
    """A CPU kernel was given inputs or attributes it cannot execute."""


class PassError(CompilerError):
    """A graph pass is unknown, misconfigured, or failed."""


class OptionsError(CompilerError):
    """The compile options (``--options`` JSON) are malformed."""


class QuantizationError(CompilerError):
    """Calibration or int8 quantization failed."""


class PluginError(CompilerError):
    """Base class of plugin errors."""


class PluginLoadError(PluginError):
    """A plugin named in the options cannot be found, imported or instantiated."""


class PartitionError(PluginError):
    """A plugin's partition() or compile() broke the plugin contract."""


class XmodelError(CompilerError):
    """An .xmodel file cannot be written or read (bad container, version or content)."""


class RunnerError(CompilerError):
    """A compiled model cannot be executed (missing runner, bad inputs, failing subgraph)."""


class UntrustedRunnerError(RunnerError):
    """A model names a runner that is neither built in nor installed, and was not trusted."""


class CalibrationFileError(OptionsError, QuantizationError):
    """The calibration file the options name cannot be used (missing arrays, wrong shapes,
    non-finite samples, not an .npz): an options error, found when calibration reads it."""


class InputShapesError(OptionsError, FrontendError):
    """The ``input_shapes`` option names inputs the model does not have."""

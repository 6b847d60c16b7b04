"""Accelerator kernels: instruction streams for quantized Conv2d, Gemm, MaxPool, Add,
GlobalAveragePool and a standalone requantization (ReLU), the code generator of the
accelerator's compiler plugin.

Each layer function takes shapes, the quantizer's parameters (the ``attrs["quant"]`` dict of
compiler/quantize/quantizer.py) and where its tensors live (`Ref`: a slot register and a byte
offset from its base, so programs are position independent), and returns a `Kernel`: the
instructions (without END), the constant blob the program loads (packed weights, bias and
requantization rows) and the tensors it reads and writes. `join` concatenates kernels into one
stream with the token hand-off between them and appends END. The layouts are in
`pyhost.accel.layout`; the tiling and the token scheme are described in docs/accel-kernels.md.

Every kernel is a software pipeline of *steps* (a tile of work): the load unit fills the next
region of each scratchpad (INP and WGT halves, ACC thirds) while the compute unit works on the
current one and the store unit drains the previous tile, ordered by the dependency tokens as in
VTA (see `_pipeline`).
The static cycle estimate of a stream is `pyhost.accel.timing.estimate` (the functional model's
timing rules); the race checker that proves every conflicting pair ordered by tokens is
`tb.accel.races`, which the tests apply to every stream the kernels emit.

The package follows the kernels' own sections: `base` (values, errors, field limits),
`pipeline` (the software pipeline and tiling helpers), `conv` (Conv2d and Gemm), `pool`
(MaxPool, GlobalAveragePool), `eltwise` (residual Add, standalone requantization) and `join`.
"""

from compiler.plugins.accel.kernels import encoder
from compiler.plugins.accel.kernels.base import (
    DEFAULT_CFG,
    AccelKernelError,
    ConstBlob,
    Kernel,
    Quant,
    Ref,
    TensorInfo,
    clip_bounds,
    relu_bounds,
)
from compiler.plugins.accel.kernels.binary import Operand, binary, binary_params
from compiler.plugins.accel.kernels.conv import conv2d, conv2d_output_shape, gemm, gemm_int32
from compiler.plugins.accel.kernels.eltwise import ADD_BITS, add, add_multipliers, requant_act
from compiler.plugins.accel.kernels.join import barrier, join
from compiler.plugins.accel.kernels.pipeline import BIAS_COPIES
from compiler.plugins.accel.kernels.pool import avgpool2d, global_avgpool, maxpool2d
from compiler.plugins.accel.kernels.relayout import (
    ConcatPart,
    concat,
    concat_offsets,
    nop,
    permute_channels,
)

__all__ = ["ADD_BITS", "BIAS_COPIES", "DEFAULT_CFG", "AccelKernelError", "ConcatPart",
           "ConstBlob", "Kernel", "Quant", "Ref", "TensorInfo", "add", "add_multipliers",
           "avgpool2d", "barrier", "binary", "binary_params", "clip_bounds", "concat",
           "concat_offsets", "conv2d", "encoder", "conv2d_output_shape", "gemm", "gemm_int32",
           "global_avgpool", "join", "maxpool2d", "nop", "Operand", "permute_channels",
           "relu_bounds", "requant_act"]

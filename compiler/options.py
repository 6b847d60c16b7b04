"""Compile options: the ``--options`` JSON of the CLI, parsed and checked once.

Keys: ``plugin``/``plugins`` (plugin names, in order), ``plugin_options`` (per plugin name),
``passes`` (pass name -> enabled), ``input_shapes`` (input name -> static shape), ``quantize``
(false, true, or a dict of :class:`QuantizeOptions` fields), ``name`` (graph name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from compiler.errors import OptionsError, PassError
from compiler.passes import check_switches
from compiler.plugin_api.loader import plugin_names

KEYS = ("plugin", "plugins", "plugin_options", "passes", "input_shapes", "quantize", "name")


@dataclass(frozen=True)
class QuantizeOptions:
    """Post-training int8 quantization settings (see docs/compiler.md)."""

    #: "random" (seeded normal samples; for tests and benchmarks) or a path to an .npz file
    #: holding, per model input, an array of shape (samples, *input_shape)
    calibration: str = "random"
    samples: int = 4
    seed: int = 0
    #: "minmax" or "percentile" (clip the range at the given percentile of |x|)
    method: str = "minmax"
    percentile: float = 99.99
    #: symmetric activations (zero point 0) instead of asymmetric ones
    symmetric_activations: bool = False

    @classmethod
    def from_value(cls, v: Any) -> QuantizeOptions | None:
        if v is False or v is None:
            return None
        if v is True:
            return cls()
        if not isinstance(v, Mapping):
            raise OptionsError(f'"quantize" must be true, false or an object, got {v!r}')
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(v) - names)
        if unknown:
            raise OptionsError(f'unknown "quantize" option(s) {unknown}; valid: {sorted(names)}')
        d = dict(v)
        _typed(d, "calibration", str, 'a string: "random" or a path to an .npz file')
        _typed(d, "samples", int, "a positive integer", lo=1)
        _typed(d, "seed", int, "an integer >= 0", lo=0)
        _typed(d, "method", str, '"minmax" or "percentile"')
        _typed(d, "percentile", (int, float), "a number in (50, 100]")
        _typed(d, "symmetric_activations", bool, "true or false")
        q = cls(**d)
        if q.method not in ("minmax", "percentile"):
            raise OptionsError(f'"quantize.method" must be "minmax" or "percentile", got '
                               f"{q.method!r}")
        if not 50.0 < float(q.percentile) <= 100.0:
            raise OptionsError(f'"quantize.percentile" must be in (50, 100], got '
                               f"{q.percentile!r}")
        if q.calibration != "random":
            path = Path(q.calibration)
            if not path.is_file():
                raise OptionsError(f'"quantize.calibration" {q.calibration!r} is not a file '
                                   "(it does not exist); give an .npz holding one (samples, "
                                   '*shape) array per model input, or "random"')
        return q


def _typed(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], expected: str,
           lo: int | None = None) -> None:
    """OptionsError unless ``d[key]`` (if given) has the JSON type ``kind``: a bool is not a
    number, a number is not a bool, a string is neither."""
    if key not in d:
        return
    v = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(v, kinds) and (bool in kinds or not isinstance(v, bool))
    if ok and lo is not None and v < lo:
        ok = False
    if not ok:
        raise OptionsError(f'"quantize.{key}" must be {expected}, got {json.dumps(v)}')


@dataclass(frozen=True)
class CompileOptions:
    plugins: tuple[str, ...] = ()
    plugin_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    passes: Mapping[str, bool] = field(default_factory=dict)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    quantize: QuantizeOptions | None = None
    name: str | None = None

    @classmethod
    def parse(cls, options: CompileOptions | Mapping[str, Any] | str | None) -> CompileOptions:
        """From a dict, a JSON string, ``@path.json``, or None (defaults)."""
        if options is None:
            return cls()
        if isinstance(options, CompileOptions):
            return options
        if isinstance(options, str):
            options = _load_json(options)
        if not isinstance(options, Mapping):
            raise OptionsError(f"options must be a JSON object, got {type(options).__name__}")
        unknown = sorted(set(options) - set(KEYS))
        if unknown:
            raise OptionsError(f"unknown option(s) {unknown}; valid keys: {list(KEYS)}")
        passes = options.get("passes", {})
        if not isinstance(passes, Mapping):
            raise OptionsError('"passes" must map pass names to true/false')
        try:
            check_switches(passes)
        except PassError as e:
            raise OptionsError(str(e)) from None
        shapes = options.get("input_shapes", {})
        if not isinstance(shapes, Mapping) or not all(
                isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 0 for d in s)
                for s in shapes.values()):
            raise OptionsError('"input_shapes" must map input names to lists of non-negative '
                               'ints, e.g. {"data": [1, 3, 224, 224]}')
        popts = options.get("plugin_options", {})
        if not isinstance(popts, Mapping) or not all(isinstance(v, Mapping)
                                                     for v in popts.values()):
            raise OptionsError('"plugin_options" must map plugin names to objects')
        name = options.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise OptionsError('"name" must be a non-empty string')
        return cls(
            plugins=tuple(plugin_names(options)),
            plugin_options={k: dict(v) for k, v in popts.items()},
            passes=dict(passes),
            input_shapes={k: tuple(v) for k, v in shapes.items()},
            quantize=QuantizeOptions.from_value(options.get("quantize")),
            name=name,
        )


def _load_json(text: str) -> Any:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise OptionsError(f"cannot read options file {str(path)!r}: {e}") from None
        except UnicodeDecodeError as e:
            raise OptionsError(f"options file {str(path)!r} is not UTF-8 text ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionsError(f"options are not valid JSON ({e}); example: "
                           '\'{"plugin": "softmax_ip"}\'') from None

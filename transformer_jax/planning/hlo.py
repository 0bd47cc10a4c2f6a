"""What a compiled program does, read from its HLO modules: the FLOPs of its matrix products
(``dot`` instructions, the GPU's cuBLAS calls, the convolutions a TPU turns them into, each
times the trip count of the loops it sits in), which is what :mod:`transformer_jax.model.counts`
counts (6 FLOPs a parameter a token, and attention's two products); XLA's own cost analysis,
with the elementwise work too; and the elements its all-reduces sum over devices.
``Compiled.cost_analysis()`` gives nothing for a compile-only GPU executable, so XLA's figure is
its HLO cost analysis of the compiled module run through the CPU client."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import jax

# cuBLAS's matrix products as the GPU compiler writes them (custom calls).
GEMM_CALLS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")


def hlo_modules(compiled: Any) -> list[Any]:
    return compiled.runtime_executable().hlo_modules()


def _dims(shape: Any) -> tuple[int, ...]:
    return tuple(shape.dimensions())


def _contracting(text: str, key: str) -> list[int]:
    """Dimension numbers of ``key`` in an instruction's text (HLO attribute or JSON)."""
    match = re.search(rf"{key}=\{{([\d,]*)\}}", text)
    if match:
        return [int(d) for d in match.group(1).split(",") if d]
    match = re.search(rf'"{key}ensions"\s*:\s*\[([^\]]*)\]', text)
    if match:
        return [int(d.strip().strip('"')) for d in match.group(1).split(",") if d.strip()]
    raise ValueError(f"no {key} in {text[:200]}")


_CALLS = re.compile(r"\b(calls|to_apply|body|condition)=%?([\w.\-]+)")
_CALL_LISTS = re.compile(r"\b(?:branch_computations|called_computations)=\{([^}]*)\}")


def _trip_counts(module: Any) -> dict[str, int]:
    """{computation name: how many times a step runs it}: a while loop's body runs its known
    trip count times its caller's count, and whatever a computation calls (fusions, calls,
    reductions, branches) as often as the computation itself. A computation nobody calls
    (the entry) runs once; a loop without a known trip count is counted once."""
    calls: dict[str, list[tuple[str, int]]] = {}  # callee: [(caller, times a caller's run)]
    names = []
    for computation in module.computations():
        names.append(computation.name)
        for instruction in computation.instructions():
            text = instruction.to_string()
            trips = 1
            if instruction.opcode.name == "kWhile":
                found = re.search(r'"known_trip_count":\{"n":"(\d+)"', text)
                trips = int(found.group(1)) if found else 1
            for key, callee in _CALLS.findall(text):
                calls.setdefault(callee, []).append(
                    (computation.name, trips if key == "body" else 1))
            for group in _CALL_LISTS.findall(text):
                for callee in re.findall(r"%?([\w.\-]+)", group):
                    calls.setdefault(callee, []).append((computation.name, 1))
    counts: dict[str, int] = {}

    def count(name: str, seen: frozenset = frozenset()) -> int:
        if name not in counts:
            callers = [(c, t) for c, t in calls.get(name, []) if c not in seen]
            counts[name] = (sum(count(c, seen | {name}) * t for c, t in callers)
                            if callers else 1)
        return counts[name]

    return {name: count(name) for name in names}


def matmul_flops(modules: Sequence[Any]) -> float:
    """FLOPs of the matrix products of compiled HLO modules (one device's program): 2 x the
    output's elements x the contracted size, for every ``dot``, cuBLAS call and convolution
    (a TPU compiles its products to convolutions), times the trip count of a loop body it
    sits in (however deeply: a fusion inside a loop's body runs as often as the body)."""
    total = 0.0
    for module in modules:
        trips = _trip_counts(module)
        for computation in module.computations():
            repeat = trips.get(computation.name, 1)
            for instruction in computation.instructions():
                opcode = instruction.opcode.name
                text = None
                if opcode == "kConvolution":  # a TPU's matrix products
                    text = instruction.to_string()
                    labels = re.search(r"dim_labels=\w+_(\w+)->", text).group(1)
                    rhs = _dims(instruction.operands()[1].shape)
                    # Each output element sums the kernel's entries of one output feature.
                    total += (repeat * 2.0 * math.prod(_dims(instruction.shape))
                              * math.prod(rhs) / rhs[labels.index("o")])
                    continue
                if opcode == "kDot":
                    text = instruction.to_string()
                    key = "lhs_contracting_dims"
                elif opcode == "kCustomCall":
                    text = instruction.to_string()
                    if not any(f'custom_call_target="{t}"' in text for t in GEMM_CALLS):
                        continue
                    key = "lhs_contracting_dim"
                else:
                    continue
                lhs = _dims(instruction.operands()[0].shape)
                out = instruction.shape
                if out.is_tuple():  # cuBLAS returns (result, workspace)
                    out = out.tuple_shapes()[0]
                contracted = math.prod(lhs[d] for d in _contracting(text, key))
                total += repeat * 2.0 * math.prod(_dims(out)) * contracted
    return total


def xla_flops(modules: Sequence[Any]) -> float:
    """XLA's HLO cost analysis of the modules (every instruction), run by the CPU client."""
    from jax._src.lib import _jax

    client = jax.devices("cpu")[0].client
    return sum(_jax.hlo_module_cost_analysis(client, m).get("flops", 0.0) for m in modules)


ALL_REDUCES = ("kAllReduce", "kAllReduceStart")


def all_reduced_elements(modules: Sequence[Any]) -> int:
    """Elements the modules' all-reduces sum over devices (each operand's elements, once)."""
    total = 0
    for m in modules:
        for c in m.computations():
            for i in c.instructions():
                if i.opcode.name in ALL_REDUCES:
                    total += sum(math.prod(_dims(o.shape)) for o in i.operands()
                                 if o.shape.is_array())
    return total

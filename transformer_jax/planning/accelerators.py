"""Named accelerators to compile for without having one: compile-only devices of an H100 (or
another NVIDIA GPU XLA describes) or a TPU slice, on a machine with only a CPU.

    devices = accelerators.compile_only_devices(accelerators.parse("h100:8"))

Compiling for NVIDIA GPUs needs JAX's CUDA plugin at JAX's own version with ptxas and
libdevice (the ``aot`` extra: ``pip install -e '.[aot]'``); TPUs need ``libtpu`` (the same
extra). JAX_PLATFORMS=cpu must be set before JAX starts a backend (the commands and the tests
do): the plugins then only compile, and a machine without a GPU does not try to start CUDA.

The description of a GPU (its memory, cores, clocks, compute capability) is XLA's own: the
CUDA plugin carries XLA's target descriptions (``xla/backends/gpu/target_config/specs/*.txtpb``
in openxla/xla) for the GPUs it knows, and the compiler reads the same text with
``--xla_gpu_target_config_filename`` or as the ``target_config`` of a PJRT topology. No
Python API hands them out, so :func:`gpu_target_config` reads the plugin's own copy, which is
the one its compiler was built with, from its symbol table.

A compile-only device has no memory to ask (``memory_stats`` needs an addressable device),
so :attr:`Accelerator.memory_bytes` is the GPU description's ``device_memory_size``, or for
a TPU the chip's HBM from its data sheet (``TPU_HBM_BYTES``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import mmap
import os
import re
import struct
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from transformer_jax.errors import UserError, shown

GiB = 2 ** 30

# HBM per TPU device, from Cloud TPU's data sheets (a v5e or v6e chip is one device).
TPU_HBM_BYTES = {"v5e": 16 * GiB, "v6e": 32 * GiB}


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """A kind of accelerator to compile for: ``target`` is the GPU description's name in
    XLA (``platform`` "cuda") or the TPU's topology prefix (``platform`` "tpu")."""

    name: str
    platform: str
    target: str
    description: str


ACCELERATORS: dict[str, Accelerator] = {a.name: a for a in (
    Accelerator("h100", "cuda", "h100_sxm", "NVIDIA H100 SXM 80GB"),
    Accelerator("h100-pcie", "cuda", "h100_pcie", "NVIDIA H100 PCIe 80GB"),
    Accelerator("h200", "cuda", "h200", "NVIDIA H200 141GB"),
    Accelerator("a100", "cuda", "a100_sxm_80", "NVIDIA A100 SXM 80GB"),
    Accelerator("a100-40", "cuda", "a100_sxm_40", "NVIDIA A100 SXM 40GB"),
    Accelerator("b200", "cuda", "b200", "NVIDIA B200"),
    Accelerator("v5e", "tpu", "v5e", "TPU v5e (one chip a device)"),
    Accelerator("v6e", "tpu", "v6e", "TPU v6e (one chip a device)"),
)}
# TPU slice shapes (chips) by chip count.
TPU_SHAPES = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
              256: "16x16"}
MAX_GPUS_PER_HOST = 8
# Hosts of a plan: the compile-only topology has a device object per GPU, so a mistyped
# count (h100:100000x8) would be built rather than refused; 1,024 hosts are 8,192 GPUs.
MAX_HOSTS = 1024


@dataclasses.dataclass(frozen=True)
class Target:
    """``count`` devices of ``accelerator`` over ``processes`` hosts (as many on each)."""

    accelerator: Accelerator
    count: int
    processes: int = 1

    def __str__(self) -> str:
        hosts = f"{self.processes}x{self.count // self.processes}" if self.processes > 1 \
            else str(self.count)
        return f"{self.accelerator.name}:{hosts}"

    @property
    def memory_bytes(self) -> int:
        """Memory of one device, in bytes."""
        a = self.accelerator
        if a.platform == "tpu":
            return TPU_HBM_BYTES[a.target]
        match = re.search(r"device_memory_size:\s*(\d+)", gpu_target_config(a.target))
        if not match:
            raise UserError(f"the CUDA plugin's description of {a.description} gives no "
                            "device_memory_size")
        return int(match.group(1))


def parse(text: str) -> Target:
    """``NAME:COUNT`` (``h100:8``) or ``NAME:HOSTSxCOUNT`` (``h100:2x4``, 2 processes of 4
    devices each) -> Target; anything else is a UserError naming what is wrong."""
    names = ", ".join(sorted(ACCELERATORS))
    given = shown(text)  # quoted in one line
    match = re.fullmatch(r"([\w-]+):(?:(\d+)x)?(\d+)", text.strip().lower())
    if not match:
        raise UserError(f"--devices={given}: expected NAME:COUNT or NAME:HOSTSxCOUNT, e.g. "
                        f"h100:8 or h100:2x4 (names: {names})")
    name, hosts, per_host = match.group(1), int(match.group(2) or 1), int(match.group(3))
    if name not in ACCELERATORS:
        raise UserError(f"--devices={given}: unknown accelerator {name!r} (known: {names})")
    accelerator = ACCELERATORS[name]
    if hosts < 1 or per_host < 1:
        raise UserError(f"--devices={given}: the count must be at least 1")
    if accelerator.platform == "cuda" and per_host > MAX_GPUS_PER_HOST:
        raise UserError(f"--devices={given}: at most {MAX_GPUS_PER_HOST} GPUs a host; write "
                        f"HOSTSxCOUNT, e.g. {name}:{max(per_host // MAX_GPUS_PER_HOST, 2)}x8")
    if hosts > MAX_HOSTS:
        raise UserError(f"--devices={given}: at most {MAX_HOSTS:,} hosts a plan")
    count = hosts * per_host
    if accelerator.platform == "tpu" and hosts > 1:
        raise UserError(f"--devices={given}: name a TPU slice by its chips, e.g. {name}:8")
    if accelerator.platform == "tpu" and count not in TPU_SHAPES:
        raise UserError(f"--devices={given}: a {accelerator.description} slice has "
                        f"{', '.join(map(str, TPU_SHAPES))} chips")
    return Target(accelerator, count, hosts)


def _plugin_library(platform: str) -> Path:
    """The shared library of the installed CUDA plugin, or a UserError saying how to get it."""
    for module in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        try:
            plugin = importlib.import_module(module)
        except ImportError:
            continue
        library = Path(plugin.__file__).parent / "xla_cuda_plugin.so"
        if library.is_file():
            return library
    raise UserError(f"compiling for {platform} needs JAX's CUDA plugin: "
                    "pip install -e '.[aot]'")


SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("section", "<u2"),
                   ("value", "<u8"), ("size", "<u8")])  # an ELF64 symbol table entry


@functools.cache
def _embedded_specs(library: Path) -> dict[str, str]:
    """{name: text} of the GPU descriptions embedded in the plugin ``library``: the
    ``.rodata`` objects its symbol table names ``..._target_config_specs_NAME_txtpb``."""
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise UserError(f"{library}: not a 64-bit little-endian ELF library")
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        # Section headers: (type, address, file offset, size, link, entry size).
        sections = [struct.unpack_from("<4xI8xQQQI4x8xQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        specs = {}
        for kind, _, offset, size, link, entsize in sections:
            if kind != 2 or entsize != SYMBOL.itemsize:  # SHT_SYMTAB
                continue
            _, _, names_at, names_size, _, _ = sections[link]
            names = data[names_at:names_at + names_size]
            # Each name's offset: from the NUL before it.
            found = {names.rfind(b"\0", 0, m.start()) + 1: m.group(1).decode()
                     for m in re.finditer(rb"target_config_specs_(\w+?)_txtpbE\0", names)}
            symbols = np.frombuffer(data, SYMBOL, size // entsize, offset)
            for symbol in symbols[np.isin(symbols["name"], list(found))]:
                _, address, section_offset, *_ = sections[symbol["section"]]
                start = section_offset + int(symbol["value"]) - address
                text = data[start:start + int(symbol["size"])].decode().rstrip("\0")
                specs[found[int(symbol["name"])]] = text
            del symbols
        return specs


def gpu_target_config(name: str) -> str:
    """XLA's description of the GPU ``name`` (``h100_sxm``), as GpuTargetConfigProto text,
    from the installed CUDA plugin."""
    library = _plugin_library("cuda")
    specs = _embedded_specs(library)
    if name not in specs:
        known = ", ".join(sorted(specs)) or "none"
        raise UserError(f"{library} describes no GPU {name!r} (it describes: {known})")
    return specs[name]


def named(device_kind: str) -> Accelerator | None:
    """The GPU accelerator whose XLA description names ``device_kind`` (a real device's
    ``device_kind``, "NVIDIA H100 80GB HBM3"), or None."""
    for a in ACCELERATORS.values():
        if a.platform != "cuda":
            continue
        match = re.search(r'device_description_str:\s*"([^"]*)"', gpu_target_config(a.target))
        if match and match.group(1) == device_kind:
            return a
    return None


def _check_platforms() -> None:
    platforms = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")
    if platforms != "cpu":
        raise UserError("compile-only devices need JAX_PLATFORMS=cpu set before JAX starts "
                        f"(it is {platforms!r}); the planner and the tests set it")


@functools.cache
def compile_only_devices(target: Target) -> tuple[jax.Device, ...]:
    """The ``target.count`` compile-only devices of ``target``: they compile (and lower)
    programs for it and run nothing. Devices i*n .. (i+1)*n-1 belong to process i."""
    from jax.experimental import topologies

    _check_platforms()
    a = target.accelerator
    if a.platform == "tpu":
        if importlib.util.find_spec("libtpu") is None:
            raise UserError(f"compiling for {a.description} needs libtpu: "
                            "pip install -e '.[aot]'")
        # libtpu takes a lock file so that one process drives a host's chips; compiling
        # only, several processes (the planner, pytest's workers) may load it at once.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        topology = topologies.get_topology_desc(f"{a.target}:{TPU_SHAPES[target.count]}",
                                                platform="tpu")
        devices = sorted(topology.devices, key=lambda d: (d.process_index, d.id))
    else:
        per_host = target.count // target.processes
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=gpu_target_config(a.target),
            topology=f"1x{target.processes}x{per_host}")
        devices = sorted(topology.devices, key=lambda d: (d.process_index, d.id))
    if len(devices) != target.count:
        raise UserError(f"{target}: the compiler made {len(devices)} devices, not "
                        f"{target.count}")
    return tuple(devices)


def devices_of(target: Target) -> Sequence[jax.Device]:
    """:func:`compile_only_devices` as a list."""
    return list(compile_only_devices(target))

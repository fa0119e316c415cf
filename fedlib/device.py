"""Which machine and device a run uses, and the record of it kept with every result.

``device: auto | cpu | cuda`` in a config (or ``device=cuda`` as an override); ``auto``
resolves to ``cuda`` when a CUDA device is present, else ``cpu``. The resolved kind is part
of the run's identity (``cuda`` runs get their own run ids; ``cpu`` ids are those of runs
made before devices existed), so a CPU result is never served for a CUDA request or the
other way round: float kernels differ between the two, as they do between CPU families
(the record names the CPU model and the instruction set torch's kernels use).
"""

from __future__ import annotations

import argparse

import os
import platform

import torch

from fedlib.validation import ConfigError

KINDS = ("auto", "cpu", "cuda")


def resolve(kind: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without a GPU is an error."""
    if kind not in KINDS:
        raise ConfigError("device", kind, "one of " + ", ".join(KINDS))
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", kind, "cpu or auto: this machine has no CUDA device")
    return kind


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_record(device: str = "cpu") -> dict:
    """What made a number: CPU model and kernel capability, torch (and CUDA) versions, threads."""
    rec = {"device": device, "cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "cpu_count": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
           "python": platform.python_version()}
    if device == "cuda":
        idx = torch.cuda.current_device()
        rec.update(gpu=torch.cuda.get_device_name(idx), cuda=torch.version.cuda,
                   gpu_capability=".".join(map(str, torch.cuda.get_device_capability(idx))))
    return rec


def deterministic_cuda() -> None:
    """Deterministic CUDA kernels: the same (config, seed) gives the same numbers run after run."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.benchmark = False


def device_arg(text: str) -> str:
    """An argparse ``type`` for ``--device``: auto, cpu, or cuda where this machine has one."""
    try:
        resolve(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {exc.allowed}") from None
    return text

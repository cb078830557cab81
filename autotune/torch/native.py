"""The eager path in C++ (native.cpp): the autograd node, the plan table and the launch of
products of CUDA tensors, which in Python cost more host time than a small product's kernel.

It is built once per machine and torch version with torch.utils.cpp_extension (a C++ compiler
and ninja), into the user cache, and loaded in a background thread when autotune.torch first
serves a CUDA tensor, so no call waits for the compiler: until it is ready, and wherever it
cannot be built (a one-time note says why), products take the Python path, which also computes
every product whose plan the C++ table lacks. Under MMTUNE_WAIT=1 the first CUDA product waits for
it, as it waits for its kernel. MMTUNE_NATIVE=0 keeps everything in Python.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import threading
import warnings
from pathlib import Path
from typing import Callable

from autotune.call import recording
from autotune.memos import MEMOS
from autotune.store import paths

ENV = "MMTUNE_NATIVE"
SOURCE = "native.cpp"

#: the loaded extension once it is ready, else None (the products take the Python path)
extension = None
_started = threading.Event()
_done = threading.Event()
_lock = threading.Lock()


def wanted() -> bool:
    return os.environ.get(ENV, "1") not in ("", "0")


def start(fallback: Callable) -> None:
    """Load (building first if need be) in a background thread, once per process. `fallback(a,
    b, bias, precision)` -> (C, its launches or None, their plan) computes a product the C++
    table lacks."""
    if _started.is_set() or not wanted():
        return
    with _lock:
        if _started.is_set():
            return
        _started.set()
    threading.Thread(target=_load_noting_failure, args=(fallback,), name="mmtune-native", daemon=True).start()


def load(fallback: Callable):
    """The extension, loaded now (built first if need be), or once the background load is done;
    None where that could not build it, or with MMTUNE_NATIVE=0. Raises what the build raised if
    it runs here."""
    if not wanted():
        return None
    start_now = not _started.is_set()
    if start_now:
        with _lock:
            start_now = not _started.is_set()
            _started.set()
    if start_now:
        try:
            _load(fallback)
        finally:
            _done.set()
    _done.wait()
    return extension


def _load_noting_failure(fallback: Callable) -> None:
    try:
        _load(fallback)
    except Exception as error:  # no compiler, no ninja, headers missing: the Python path serves
        said = str(error).strip().splitlines()
        warnings.warn(f"mmtune: the C++ eager path could not be built ({type(error).__name__}: "
                      f"{said[-1][:300] if said else ''}); products of CUDA tensors run through Python "
                      f"(set {ENV}=0 to skip the build)", stacklevel=1)
    finally:
        _done.set()


def _load(fallback: Callable) -> None:
    global extension
    import torch
    from torch.utils import cpp_extension

    source = importlib.resources.files("autotune.torch") / SOURCE
    text = source.read_bytes()
    digest = hashlib.sha256(text + torch.__version__.encode()).hexdigest()[:16]
    directory = build_directory() / digest
    directory.mkdir(parents=True, exist_ok=True)
    copied = directory / SOURCE  # the source beside its build, wherever the package lies
    if not copied.exists() or copied.read_bytes() != text:
        paths.write_atomically(copied, text)
    module = cpp_extension.load(name=f"mmtune_native_{digest}", sources=[str(copied)], build_directory=str(directory),
                                extra_cflags=["-O2"], verbose=False)
    module.set_fallback(fallback)
    MEMOS.on_clear(module.clear)
    recording.counters.append(module)  # a recording.Counter
    module.counting(recording.counts is not None)
    extension = module


def build_directory() -> Path:
    return paths.user_cache() / "native"

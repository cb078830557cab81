"""The eager path in C++ (native.cpp): the autograd node, the plan table and the launch of
products of CUDA tensors, which in Python cost more host time than a small product's kernel.

It is built once per machine, torch version and Python ABI with torch.utils.cpp_extension (a C++ compiler
and ninja), into the user cache, and loaded in a background thread when autotune.torch first
serves a CUDA tensor, so no call waits for the compiler: until it is ready, and wherever it
cannot be built (a one-time note says why), products take the Python path, which also computes
every product whose plan the C++ table lacks. Under MMTUNE_WAIT=1 the first CUDA product waits for
it, as it waits for its kernel. MMTUNE_NATIVE=0 keeps everything in Python.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import os
import shutil
import sysconfig
import tempfile
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


def finished() -> bool:
    """Whether a load ran its course (`extension` then says how it ended): no call need ask again."""
    return _done.is_set()


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
    """Import the extension built for this source and torch, building it first if it is not. A
    build runs in a directory of its own and its library is then moved into place, so that a
    process that exits mid-build leaves no lock behind for the next one to wait on."""
    global extension
    import torch

    text = (importlib.resources.files("autotune.torch") / SOURCE).read_bytes()
    built_for = f"{torch.__version__} {sysconfig.get_config_var('EXT_SUFFIX')}"  # torch's and Python's ABI
    digest = hashlib.sha256(text + built_for.encode()).hexdigest()[:16]
    name = f"mmtune_native_{digest}"
    library = build_directory() / f"{name}.so"
    module = _imported(name, library) if library.exists() else _built(name, text, library)
    module.set_fallback(fallback)
    MEMOS.on_clear(module.clear)
    recording.add_counter(module)  # a recording.Counter
    extension = module


def _built(name: str, text: bytes, library: Path):
    from torch.utils import cpp_extension

    library.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=library.parent))
    try:
        source = scratch / SOURCE
        source.write_bytes(text)
        module = cpp_extension.load(name=name, sources=[str(source)], build_directory=str(scratch),
                                    extra_cflags=["-O2"], verbose=False)
        paths.write_atomically(library, Path(module.__file__).read_bytes())
        return module
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _imported(name: str, library: Path):
    spec = importlib.util.spec_from_file_location(name, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_directory() -> Path:
    return paths.user_cache() / "native"

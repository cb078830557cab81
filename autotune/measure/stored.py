"""Measuring the binary the call path launches: a kernel's build taken from the kernel store
(autotune.store.cubins; compiled and stored there first when missing), loaded and launched
through the CUDA driver as `matmul` launches it.

So a build is compiled once per machine, not once per trial: a later trial of the same build, at
any shape and in any worker process, the finalists' re-timing, the kernel a tune keeps and
`mmtune warm` all load the stored cubin. Under the simulator there are no cubins, and the kernel
runs through Numba's dispatcher as before.
"""

from __future__ import annotations

from autotune import backends
from autotune.backends import launch
from autotune.store import cubins
from kernels import Config, Kernel, outside_families
from kernels.rules import Arch


def launched(kernel: Kernel):
    """What measuring runs for `kernel`: on a GPU its stored build, where the store's key names
    its code; else (the simulator, a kernel written outside the families) the kernel itself."""
    if backends.simulated() or not stored_code(kernel):
        return kernel
    return StoredKernel(kernel, Arch.of(backends.current().device().cc).native)


def stored_code(kernel: Kernel) -> bool:
    """Whether the kernel's code is what a store entry's key hashes (autotune.store.cubins): a
    function of the kernels package or of a family MMTUNE_FAMILIES registers. Any other function
    would be measured as the stored build of its config, which is not its code."""
    module = getattr(kernel.py_func, "__module__", None) or ""
    return module == "kernels" or module.startswith("kernels.") or module in outside_families()


def pointer(array) -> int:
    """The device address of a Numba device array (or any CUDA-array-interface array)."""
    return array.__cuda_array_interface__["data"][0]


class StoredKernel:
    """A kernel's build from the kernel store, launched as kernels.Kernel launches (same
    arguments, same zeroing of C first where it adds into C) on the default stream."""

    def __init__(self, kernel: Kernel, arch: Arch):
        self.kernel, self.arch = kernel, arch
        self.entry: cubins.Entry | None = None
        self._loaded = None
        self._plans: dict[tuple, launch.Plan] = {}

    def __getattr__(self, name: str):  # family, config, dtype, layout, ...: the build's
        if "kernel" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["kernel"], name)

    @property
    def key(self) -> cubins.BuildKey:
        kernel = self.kernel
        return cubins.BuildKey(Config.of(kernel.family, kernel.config), kernel.dtype, self.arch, layout=kernel.layout,
                               offset_bits=kernel.offset_bits, unaligned=kernel.unaligned, bias=kernel.bias)

    def compile(self) -> cubins.Entry:
        """Take the build from the store (compiling and storing it first if missing) and load it."""
        if self._loaded is None:
            self.entry = cubins.get(self.key)
            self._loaded = cubins.load(self.entry)
        return self.entry

    def launch(self, A, B, C, stream=0, bias=None) -> None:
        m, n = C.shape
        if m == 0 or n == 0:
            return
        k = A.shape[0] if self.kernel.layout[0] == "T" else A.shape[1]
        self.compile()
        found = self._plans.get((m, n, k))
        if found is None:
            device = launch.device(launch.current_device())
            found = self._plans[m, n, k] = cubins.plan(self.entry, self._loaded, device, (m, n, k), self.kernel.dtype,
                                                       self.kernel.layout)
        found.launch(pointer(A), pointer(B), pointer(C), launch.stream_handle(stream),
                     0 if bias is None else pointer(bias))

    __call__ = launch

// mmtune's eager path for CUDA tensors in C++ (autotune/torch/native.py builds and loads it).
//
// In Python, one autograd.Function call costs as much as torch's whole F.linear, and so does
// the call path's own work for a product (reading operands, finding the plan, a new C, the
// launch): a small batch's training step is bound by the host. Here the autograd node, the plan
// table and the launch are C++, as torch's own addmm is.
//
// The plans come from Python: a product whose key (shapes, strides, dtype, device, bias,
// precision, torch's float32 precision, deterministic mode) is not in the table goes to the
// Python call path (`fallback`), which computes it and returns its launches once they are final
// (not while a stand-in kernel serves); the table keeps them, and later calls launch them here
// with cuLaunchKernel on the current stream. `clear` forgets them (autotune.memos). While
// autotune.record counts calls (`counting`), each entry counts its own, and `counted` hands them
// to autotune.call.recording under the Python plan they came from.

#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
using MemsetD32Async = int (*)(uint64_t, unsigned, size_t, void*);
using CtxGetCurrent = int (*)(void**);
using CtxSetCurrent = int (*)(void*);
using PrimaryCtxRetain = int (*)(void**, int);

struct Driver {
  LaunchKernel launch = nullptr;
  MemsetD32Async memset = nullptr;
  CtxGetCurrent get_context = nullptr;
  CtxSetCurrent set_context = nullptr;
  PrimaryCtxRetain primary_context = nullptr;
};

const Driver& driver() {
  static const Driver found = [] {
    Driver d;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      d.launch = reinterpret_cast<LaunchKernel>(dlsym(library, "cuLaunchKernel"));
      d.memset = reinterpret_cast<MemsetD32Async>(dlsym(library, "cuMemsetD32Async"));
      d.get_context = reinterpret_cast<CtxGetCurrent>(dlsym(library, "cuCtxGetCurrent"));
      d.set_context = reinterpret_cast<CtxSetCurrent>(dlsym(library, "cuCtxSetCurrent"));
      d.primary_context = reinterpret_cast<PrimaryCtxRetain>(dlsym(library, "cuDevicePrimaryCtxRetain"));
    }
    return d;
  }();
  return found;
}

// The device's primary context made current for the launches and the caller's put back, as
// autotune.backends.launch.GpuContext does: an autograd thread may have none current, and
// torch's device guard does not make one current where the device is already the current one.
class ContextGuard {
 public:
  explicit ContextGuard(int device) {
    const Driver& cuda = driver();
    TORCH_CHECK(cuda.get_context && cuda.set_context && cuda.primary_context,
                "mmtune: libcuda.so.1 lacks the context calls");
    static std::mutex lock;
    static std::unordered_map<int, void*> primaries;
    void* primary;
    {
      std::lock_guard<std::mutex> guard(lock);
      auto found = primaries.find(device);
      if (found == primaries.end()) {
        void* context = nullptr;
        int err = cuda.primary_context(&context, device);
        TORCH_CHECK(err == 0, "mmtune: cuDevicePrimaryCtxRetain failed with CUDA error ", err);
        found = primaries.emplace(device, context).first;
      }
      primary = found->second;
    }
    cuda.get_context(&previous_);
    if (previous_ != primary) {
      int err = cuda.set_context(primary);
      TORCH_CHECK(err == 0, "mmtune: cuCtxSetCurrent failed with CUDA error ", err);
      switched_ = true;
    }
  }
  ~ContextGuard() {
    if (switched_) driver().set_context(previous_);
  }

 private:
  void* previous_ = nullptr;
  bool switched_ = false;
};

// One kernel launch of a plan: autotune.backends.launch.Plan, at byte offsets into A and C
// (autotune.backends.launch.RowParts).
struct Part {
  void* function;
  std::array<unsigned, 3> grid, block;
  unsigned shared;
  size_t zero_words;
  std::vector<uint64_t> words;
  std::vector<int64_t> slots;  // the data words of A, B, C (and the bias)
  int64_t a_offset, c_offset;
};

using Launches = std::vector<Part>;

// A product's launches, the Python call path's plan they came from, and its calls while counting.
struct Entry {
  Launches launches;
  py::object plan;
  std::atomic<int64_t> calls{0};

  // the last holder may be a backward's thread, which does not hold the GIL
  ~Entry() {
    py::gil_scoped_acquire gil;
    plan = py::object();
  }
};
using Key = std::array<int64_t, 16>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : key) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

std::mutex table_lock;
// never destroyed, as its Python objects may outlive the interpreter
auto& table = *new std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash>();
// (a, b, bias, precision) -> (C, launches or None, their plan); never destroyed, as Python may be
// gone by then
py::object* python_fallback = new py::object();
std::atomic<bool> counting_on{false};  // autotune.record counts calls
std::atomic<uint64_t> generation{0};   // bumped by `clear`: a plan planned before it is not kept
// counts of entries `clear` dropped, until `counted` hands them over (never destroyed, as table)
auto& orphaned = *new std::vector<std::pair<py::object, int64_t>>();
const std::array<const char*, 3> PRECISIONS = {"", "ieee", "tf32x3"};

bool keyed(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias, int64_t precision,
           Key& key) {
  if (!a.is_cuda() || a.dim() != 2 || b.dim() != 2) return false;
  if (bias && (!bias->is_contiguous() || bias->dim() != 1 || bias->size(0) != b.size(1))) return false;
  // a dispatch mode or a tensor subclass (fake tensors included) must see the op: Python calls it
  auto python = c10::DispatchKey::Python;
  if (c10::impl::dispatch_mode_enabled() || a.key_set().has(python) || b.key_set().has(python) ||
      (bias && bias->key_set().has(python)))
    return false;
  auto& context = at::globalContext();
  key = {a.size(0),      a.size(1),      b.size(0),      b.size(1),
         a.stride(0),    a.stride(1),    b.stride(0),    b.stride(1),
         static_cast<int64_t>(a.scalar_type()), static_cast<int64_t>(b.scalar_type()),
         a.get_device(), b.get_device(), bias ? static_cast<int64_t>(bias->scalar_type()) + 1 : 0,
         precision,      static_cast<int64_t>(context.float32MatmulPrecision()),
         context.deterministicAlgorithms() ? 1 : 0};
  return !bias || bias->get_device() == a.get_device();
}

Launches parsed(const py::handle& launches) {
  Launches parts;
  for (const auto& item : launches) {
    auto t = item.cast<py::tuple>();
    Part part;
    part.function = reinterpret_cast<void*>(t[0].cast<uintptr_t>());
    part.grid = t[1].cast<std::array<unsigned, 3>>();
    part.block = t[2].cast<std::array<unsigned, 3>>();
    part.shared = t[3].cast<unsigned>();
    part.zero_words = t[4].cast<size_t>();
    part.words = t[5].cast<std::vector<uint64_t>>();
    part.slots = t[6].cast<std::vector<int64_t>>();
    part.a_offset = t[7].cast<int64_t>();
    part.c_offset = t[8].cast<int64_t>();
    parts.push_back(std::move(part));
  }
  return parts;
}

void launch(const Part& part, uint64_t a, uint64_t b, uint64_t c, uint64_t bias, void* stream) {
  const Driver& cuda = driver();
  TORCH_CHECK(cuda.launch != nullptr, "mmtune: libcuda.so.1 has no cuLaunchKernel");
  std::vector<uint64_t> words(part.words);
  std::vector<void*> pointers(words.size());
  words[part.slots[0]] = a + part.a_offset;
  words[part.slots[1]] = b;
  words[part.slots[2]] = c + part.c_offset;
  if (bias != 0 && part.slots.size() > 3) words[part.slots[3]] = bias;
  for (size_t i = 0; i < words.size(); ++i) pointers[i] = &words[i];
  if (part.zero_words != 0) {
    TORCH_CHECK(cuda.memset != nullptr, "mmtune: libcuda.so.1 has no cuMemsetD32Async");
    int err = cuda.memset(c + part.c_offset, 0, part.zero_words, stream);
    TORCH_CHECK(err == 0, "mmtune: cuMemsetD32Async failed with CUDA error ", err);
  }
  int err = cuda.launch(part.function, part.grid[0], part.grid[1], part.grid[2], part.block[0], part.block[1],
                        part.block[2], part.shared, stream, pointers.data(), nullptr);
  TORCH_CHECK(err == 0, "mmtune: cuLaunchKernel failed with CUDA error ", err);
}

at::Tensor fallback(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                    int64_t precision, const Key* key) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(*python_fallback, "mmtune: the native path was not given its Python call path");
  uint64_t planned_in = generation.load();
  py::tuple result = (*python_fallback)(a, b, bias, PRECISIONS.at(precision));
  if (key != nullptr && !result[1].is_none()) {
    auto entry = std::make_shared<Entry>();
    entry->launches = parsed(result[1]);
    entry->plan = result[2];
    std::lock_guard<std::mutex> guard(table_lock);
    if (generation.load() == planned_in) table.try_emplace(*key, std::move(entry));  // the first stays
  }
  return result[0].cast<at::Tensor>();
}

// a @ b (+ bias) for 2-D operands, without autograd.
at::Tensor product(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                   int64_t precision) {
  Key key;
  bool has_key = keyed(a, b, bias, precision, key);
  std::shared_ptr<Entry> entry;
  if (has_key) {
    std::lock_guard<std::mutex> guard(table_lock);
    auto found = table.find(key);
    if (found != table.end()) entry = found->second;
  }
  if (!entry) return fallback(a, b, bias, precision, has_key ? &key : nullptr);
  if (counting_on.load(std::memory_order_relaxed)) entry->calls.fetch_add(1, std::memory_order_relaxed);
  auto c = at::empty({a.size(0), b.size(1)}, a.options());
  c10::DeviceGuard device(a.device());
  ContextGuard context(a.get_device());
  auto guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* stream = guard->getStream(a.device()).native_handle();
  auto pointer = [](const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); };
  uint64_t bias_pointer = bias ? pointer(*bias) : 0;
  for (const Part& part : entry->launches) launch(part, pointer(a), pointer(b), pointer(c), bias_pointer, stream);
  return c;
}

// Whether x is the transpose of a C-contiguous matrix (layout T), as nn.Linear's W.t() is.
bool transposed(const at::Tensor& x) { return x.size(0) > 1 && x.stride(0) == 1 && !x.is_contiguous(); }

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                  int64_t precision);

// The product with autograd: dA = dC @ B.T, dB = A.T @ dC, dbias = dC's column sums, each only
// where needed and in its operand's layout (autotune/torch/ops.py's _backward, which this mirrors),
// each through `matmul`, so that a backward that builds a graph (double backward) is
// differentiable too.
struct Product : public torch::autograd::Function<Product> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const c10::optional<at::Tensor>& bias, int64_t precision) {
    ctx->saved_data["precision"] = precision;
    ctx->saved_data["a_transposed"] = transposed(a);
    ctx->saved_data["b_transposed"] = transposed(b);
    ctx->saved_data["bias"] = bias.has_value();  // an absent bias has no input edge
    // needs_input_grad is the running backward's, not this node's, when this forward runs in one
    ctx->save_for_backward({b.requires_grad() ? a : at::Tensor(), a.requires_grad() ? b : at::Tensor()});
    return product(a, b, bias, precision);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &grad = grads[0];
    int64_t precision = ctx->saved_data["precision"].toInt();
    at::Tensor grad_a, grad_b, grad_bias;
    if (ctx->needs_input_grad(0)) {
      grad_a = ctx->saved_data["a_transposed"].toBool() ? matmul(b, grad.t(), c10::nullopt, precision).t()
                                                        : matmul(grad, b.t(), c10::nullopt, precision);
    }
    if (ctx->needs_input_grad(1)) {
      grad_b = ctx->saved_data["b_transposed"].toBool() ? matmul(grad.t(), a, c10::nullopt, precision).t()
                                                        : matmul(a.t(), grad, c10::nullopt, precision);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = grad.sum(0);
    return {grad_a, grad_b, grad_bias, at::Tensor()};
  }
};

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                  int64_t precision) {
  TORCH_CHECK(precision >= 0 && precision < static_cast<int64_t>(PRECISIONS.size()), "mmtune: no precision ",
              precision);
  bool needs_grad = at::GradMode::is_enabled() &&
                    (a.requires_grad() || b.requires_grad() || (bias && bias->requires_grad()));
  return needs_grad ? Product::apply(a, b, bias, precision) : product(a, b, bias, precision);
}

void set_fallback(py::object fallback) { *python_fallback = std::move(fallback); }

void counting(bool on) { counting_on.store(on); }

// (plan, calls) of every entry called since the last time, its count back to 0.
py::list counted() {
  py::list found;
  std::lock_guard<std::mutex> guard(table_lock);
  for (auto& item : orphaned) found.append(py::make_tuple(item.first, item.second));
  orphaned.clear();
  for (auto& item : table) {
    int64_t calls = item.second->calls.exchange(0);
    if (calls != 0) found.append(py::make_tuple(item.second->plan, calls));
  }
  return found;
}

// Forget every plan (their calls so far kept for `counted`); the entries are released after the
// lock, since releasing a plan runs Python.
void clear() {
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> dropped;
  {
    std::lock_guard<std::mutex> guard(table_lock);
    generation.fetch_add(1);
    for (auto& item : table) {
      int64_t calls = item.second->calls.exchange(0);
      if (calls != 0) orphaned.emplace_back(item.second->plan, calls);
    }
    dropped.swap(table);
  }
}

size_t size() {
  std::lock_guard<std::mutex> guard(table_lock);
  return table.size();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("matmul", &matmul, "a @ b (+ bias) through mmtune's kernels, differentiable; precision indexes PRECISIONS");
  m.def("set_fallback", &set_fallback, "the Python call path for products the table lacks");
  m.def("counting", &counting, "whether each entry counts its calls (autotune.call.recording.Counter)");
  m.def("counted", &counted, "(plan, calls) of the entries called since the last time");
  m.def("clear", &clear, "forget every plan");
  m.def("size", &size, "how many plans the table holds");
  m.attr("PRECISIONS") = py::make_tuple(PRECISIONS[0], PRECISIONS[1], PRECISIONS[2]);
}

// The built-in task functions every worker has.
//
//   noop()                      nothing
//   echo(args...)               its arguments, unchanged
//   fill(n, value[, dtype])     a tensor of n elements equal to value (f32
//   default) add(a, b)                   elementwise a + b (tensors of one
//   shape and dtype),
//                               or the sum of two numbers
//   scale(t, factor)            t * factor, elementwise
//   sum(t)                      the sum of t's elements, as a float
//   matmul(a, b)                a (m×k) · b (k×n), f32 or f64
//   sleep(seconds)              sleeps, honouring cancellation and timeouts
//   fail([message])             fails with Unknown and the message
//   crash()                     aborts the worker process (tests supervision)
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/registry.h"
#include "worker/task.h"

namespace shoal::worker {
namespace {

// Calls fn(T*) with the C++ type of a numeric dtype.
template <typename Fn>
absl::Status WithNumeric(DType t, Fn fn) {
  switch (t) {
    case DType::kF32:
      return fn(static_cast<float*>(nullptr));
    case DType::kF64:
      return fn(static_cast<double*>(nullptr));
    case DType::kI32:
      return fn(static_cast<int32_t*>(nullptr));
    case DType::kI64:
      return fn(static_cast<int64_t*>(nullptr));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", DTypeName(t),
                       " is not supported here (f32, f64, i32, i64)"));
  }
}

absl::Status RequireContiguous(const TensorView& t, absl::string_view what) {
  if (!t.meta.IsContiguous() || !t.meta.device.is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a contiguous CPU tensor, got ", t.meta.ToString()));
  }
  return absl::OkStatus();
}

absl::Status Noop(TaskContext&) { return absl::OkStatus(); }

absl::Status Echo(TaskContext& ctx) {
  for (size_t i = 0; i < ctx.num_args(); ++i) ctx.AddOutput(ctx.arg(i));
  return absl::OkStatus();
}

absl::Status Fill(TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const int64_t n, ctx.IntArg(0));
  SHOAL_ASSIGN_OR_RETURN(const double value, ctx.FloatArg(1));
  DType dtype = DType::kF32;
  if (ctx.num_args() > 2) {
    SHOAL_ASSIGN_OR_RETURN(const std::string name, ctx.StringArg(2));
    SHOAL_ASSIGN_OR_RETURN(dtype, ParseDType(name));
  }
  if (n < 0) return absl::InvalidArgumentError("fill: n must be ≥ 0");
  SHOAL_ASSIGN_OR_RETURN(
      MutableTensorView out,
      ctx.NewTensorOutput(TensorMeta::Contiguous(dtype, {n})));
  return WithNumeric(dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    T* p = reinterpret_cast<T*>(out.data);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value);
    return absl::OkStatus();
  });
}

absl::Status Add(TaskContext& ctx) {
  if (ctx.num_args() == 2 && !std::holds_alternative<TensorValue>(ctx.arg(0)) &&
      !std::holds_alternative<ObjectValue>(ctx.arg(0))) {
    if (std::holds_alternative<int64_t>(ctx.arg(0)) &&
        std::holds_alternative<int64_t>(ctx.arg(1))) {
      ctx.AddOutput(std::get<int64_t>(ctx.arg(0)) +
                    std::get<int64_t>(ctx.arg(1)));
      return absl::OkStatus();
    }
    SHOAL_ASSIGN_OR_RETURN(const double a, ctx.FloatArg(0));
    SHOAL_ASSIGN_OR_RETURN(const double b, ctx.FloatArg(1));
    ctx.AddOutput(a + b);
    return absl::OkStatus();
  }
  SHOAL_ASSIGN_OR_RETURN(const TensorView a, ctx.TensorArg(0));
  SHOAL_ASSIGN_OR_RETURN(const TensorView b, ctx.TensorArg(1));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(a, "add's first argument"));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(b, "add's second argument"));
  if (a.meta.dtype != b.meta.dtype || a.meta.shape != b.meta.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "add: ", a.meta.ToString(), " and ", b.meta.ToString(), " differ"));
  }
  SHOAL_ASSIGN_OR_RETURN(
      MutableTensorView out,
      ctx.NewTensorOutput(TensorMeta::Contiguous(a.meta.dtype, a.meta.shape)));
  return WithNumeric(a.meta.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* x = reinterpret_cast<const T*>(a.data);
    const T* y = reinterpret_cast<const T*>(b.data);
    T* z = reinterpret_cast<T*>(out.data);
    const int64_t n = a.meta.NumElements();
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
    return absl::OkStatus();
  });
}

absl::Status Scale(TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const TensorView t, ctx.TensorArg(0));
  SHOAL_ASSIGN_OR_RETURN(const double factor, ctx.FloatArg(1));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(t, "scale's tensor"));
  SHOAL_ASSIGN_OR_RETURN(
      MutableTensorView out,
      ctx.NewTensorOutput(TensorMeta::Contiguous(t.meta.dtype, t.meta.shape)));
  return WithNumeric(t.meta.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* x = reinterpret_cast<const T*>(t.data);
    T* z = reinterpret_cast<T*>(out.data);
    const int64_t n = t.meta.NumElements();
    for (int64_t i = 0; i < n; ++i) z[i] = static_cast<T>(x[i] * factor);
    return absl::OkStatus();
  });
}

absl::Status Sum(TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const TensorView t, ctx.TensorArg(0));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(t, "sum's tensor"));
  double total = 0;
  SHOAL_RETURN_IF_ERROR(WithNumeric(t.meta.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* x = reinterpret_cast<const T*>(t.data);
    const int64_t n = t.meta.NumElements();
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(x[i]);
    return absl::OkStatus();
  }));
  ctx.AddOutput(total);
  return absl::OkStatus();
}

absl::Status Matmul(TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const TensorView a, ctx.TensorArg(0));
  SHOAL_ASSIGN_OR_RETURN(const TensorView b, ctx.TensorArg(1));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(a, "matmul's first argument"));
  SHOAL_RETURN_IF_ERROR(RequireContiguous(b, "matmul's second argument"));
  if (a.meta.shape.size() != 2 || b.meta.shape.size() != 2 ||
      a.meta.shape[1] != b.meta.shape[0] || a.meta.dtype != b.meta.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul needs (m×k)·(k×n) of one dtype, got ",
                     a.meta.ToString(), " and ", b.meta.ToString()));
  }
  const int64_t m = a.meta.shape[0], k = a.meta.shape[1], n = b.meta.shape[1];
  if (a.meta.dtype != DType::kF32 && a.meta.dtype != DType::kF64) {
    return absl::InvalidArgumentError("matmul supports f32 and f64");
  }
  SHOAL_ASSIGN_OR_RETURN(
      MutableTensorView out,
      ctx.NewTensorOutput(TensorMeta::Contiguous(a.meta.dtype, {m, n})));
  return WithNumeric(a.meta.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* x = reinterpret_cast<const T*>(a.data);
    const T* y = reinterpret_cast<const T*>(b.data);
    T* z = reinterpret_cast<T*>(out.data);
    std::memset(z, 0, sizeof(T) * m * n);
    // i-k-j order: the inner loop runs along rows of y and z (vectorises).
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const T xv = x[i * k + p];
        const T* yr = y + p * n;
        T* zr = z + i * n;
        for (int64_t j = 0; j < n; ++j) zr[j] += xv * yr[j];
      }
      if (ctx.cancelled()) return absl::CancelledError("matmul cancelled");
    }
    return absl::OkStatus();
  });
}

absl::Status Sleep(TaskContext& ctx) {
  SHOAL_ASSIGN_OR_RETURN(const double seconds, ctx.FloatArg(0));
  const absl::Time until = absl::Now() + absl::Seconds(seconds);
  while (absl::Now() < until) {
    if (ctx.cancelled()) return absl::CancelledError("sleep cancelled");
    absl::SleepFor(std::min(absl::Milliseconds(2), until - absl::Now()));
  }
  return absl::OkStatus();
}

absl::Status Fail(TaskContext& ctx) {
  std::string message = "fail() called";
  if (ctx.num_args() > 0) {
    SHOAL_ASSIGN_OR_RETURN(message, ctx.StringArg(0));
  }
  return absl::UnknownError(message);
}

absl::Status Crash(TaskContext&) { std::abort(); }

}  // namespace

void RegisterBuiltins() {
  static const bool once = [] {
    RegisterTask("noop", Noop);
    RegisterTask("echo", Echo);
    RegisterTask("fill", Fill);
    RegisterTask("add", Add);
    RegisterTask("scale", Scale);
    RegisterTask("sum", Sum);
    RegisterTask("matmul", Matmul);
    RegisterTask("sleep", Sleep);
    RegisterTask("fail", Fail);
    RegisterTask("crash", Crash);
    return true;
  }();
  (void)once;
}

}  // namespace shoal::worker

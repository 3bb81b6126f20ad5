// The reduction loops behind ReduceN and DivideInPlace (reduce_kernels.cc)
// and the 16-bit float conversions they inline (HalfToFloat and the others are
// defined here too): everything compiled once per target, see reduce_kernels.h
// ("Speed").
#include "collectives/reduce/reduce_loops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

// Everything a hot loop calls is forced inline, so that it is compiled with
// the instruction set of the multiversioned function it lands in.
#define SHOAL_KERNEL_INLINE inline __attribute__((always_inline))
// ThreadSanitizer builds get the portable code only: an ifunc resolver runs
// during relocation, before the TSan runtime is up, and crashes there.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define SHOAL_KERNEL_DISPATCH 1
#else
#define SHOAL_KERNEL_DISPATCH 0
#endif
#if SHOAL_KERNEL_DISPATCH
// The concrete entry points: GCC compiles one clone per target and resolves
// the symbol once, at load time, through an ifunc.
#define SHOAL_MULTIVERSION \
  __attribute__((target_clones("avx512f", "avx2", "default")))
// The portable version of a function multiversioned by hand.
#define SHOAL_TARGET_DEFAULT __attribute__((target("default")))
#else
#define SHOAL_MULTIVERSION
#define SHOAL_TARGET_DEFAULT
#endif

namespace shoal::collectives {
namespace {

// Native types with more than four inputs (or kAvg): `out` is processed in
// blocks of this many bytes, which stay in L1 while the inputs are folded in.
constexpr int64_t kBlockBytes = 8192;
// bf16: elements per f32 accumulator block (4 KiB on the stack).
constexpr int64_t kHalfBlock = 1024;
// f16: elements per block. Each input's block is converted in one go, so the
// blocks are kept small for the inputs' memory streams to advance together
// (256 reads faster than 1024 at large sizes).
constexpr int64_t kF16Block = 256;

// ---- 16-bit floats, branch-free so that the loops using them vectorise ----
// (after M. Dukhan's FP16 library: the rebiasing is done by an exact f32
// multiplication, subnormals by an exact f32 subtraction or addition).

SHOAL_KERNEL_INLINE float HalfToFloatImpl(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent in bits 27..31, mantissa below
  // Exponent 1..31: place exponent and mantissa in an f32 whose exponent is
  // 112 too large, then scale by 2^-112 (exact; exponent 31 lands on 255, so
  // inf stays inf and NaN stays NaN).
  const float normalized =
      std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Exponent 0: 0.5 + m * 2^-24 is exact in f32; subtracting 0.5 leaves
  // m * 2^-24.
  const float denormalized =
      std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27)
                            ? std::bit_cast<uint32_t>(denormalized)
                            : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | bits);
}

SHOAL_KERNEL_INLINE uint16_t FloatToHalfImpl(float f) {
  // Scaling by 2^112 then 2^-110 sends values too large for f16 to infinity
  // and keeps the others (times 4) exact.
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;  // sign shifted out
  const uint32_t sign = w & 0x80000000u;
  // Adding 2^(e+15) (at least 2^-9 for f16 subnormals) makes the f32 adder
  // round the value to f16's precision, ties to even.
  const uint32_t bias = std::max(shl1_w & 0xFF000000u, 0x71000000u);
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  // NaN: quiet, keeping the top payload bits (as F16C's vcvtps2ph does).
  const uint32_t nan = 0x7E00u | ((w >> 13) & 0x03FFu);
  return static_cast<uint16_t>((sign >> 16) |
                               (shl1_w > 0xFF000000u ? nan : nonsign));
}

SHOAL_KERNEL_INLINE float BF16ToFloatImpl(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

SHOAL_KERNEL_INLINE uint16_t FloatToBF16Impl(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Round to nearest even on the low 16 bits; a carry into the exponent is
  // right (up to infinity).
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  // NaN: truncating could clear every payload bit (giving inf): quiet it.
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// ---- f16 <-> f32 over a block. GCC's vectoriser does not use the F16C or
// AVX-512F conversion instructions by itself, and the branch-free code above
// is several times slower than memory, so these are written with intrinsics
// and multiversioned by hand (GCC function multiversioning: the best version
// for the CPU is resolved once, at load time). All versions give the same
// bits, NaNs included. ----

SHOAL_TARGET_DEFAULT void HalfToFloatBlock(const uint16_t* __restrict in,
                                           float* __restrict out, int64_t len) {
  for (int64_t i = 0; i < len; ++i) out[i] = HalfToFloatImpl(in[i]);
}

SHOAL_TARGET_DEFAULT void FloatToHalfBlock(const float* __restrict in,
                                           uint16_t* __restrict out,
                                           int64_t len) {
  for (int64_t i = 0; i < len; ++i) out[i] = FloatToHalfImpl(in[i]);
}

#if SHOAL_KERNEL_DISPATCH
// All 16 lanes. (The maskz forms: GCC 12's plain _mm512_cvtph_ps and
// _mm512_cvtps_ph trip -Wmaybe-uninitialized inside their headers.)
constexpr __mmask16 kAll16 = 0xFFFF;

__attribute__((target("avx2,f16c"))) void HalfToFloatBlock(
    const uint16_t* __restrict in, float* __restrict out, int64_t len) {
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < len; ++i) out[i] = HalfToFloatImpl(in[i]);
}

__attribute__((target("avx512f"))) void HalfToFloatBlock(
    const uint16_t* __restrict in, float* __restrict out, int64_t len) {
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(kAll16, h));
  }
  for (; i < len; ++i) out[i] = HalfToFloatImpl(in[i]);
}

__attribute__((target("avx2,f16c"))) void FloatToHalfBlock(
    const float* __restrict in, uint16_t* __restrict out, int64_t len) {
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < len; ++i) out[i] = FloatToHalfImpl(in[i]);
}

__attribute__((target("avx512f"))) void FloatToHalfBlock(
    const float* __restrict in, uint16_t* __restrict out, int64_t len) {
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m256i h = _mm512_maskz_cvtps_ph(kAll16, _mm512_loadu_ps(in + i),
                                            _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  for (; i < len; ++i) out[i] = FloatToHalfImpl(in[i]);
}
#endif  // SHOAL_KERNEL_DISPATCH

// ---- How elements are stored and computed ----

template <typename T>
struct Native {
  using Storage = T;
  using Compute = T;
  static SHOAL_KERNEL_INLINE T Load(T x) { return x; }
  static SHOAL_KERNEL_INLINE T Store(T x) { return x; }
};

// Converted a block at a time (HalfToFloatBlock, FloatToHalfBlock).
struct Half {
  using Storage = uint16_t;
  using Compute = float;
};

struct BFloat {
  using Storage = uint16_t;
  using Compute = float;
  static SHOAL_KERNEL_INLINE float Load(uint16_t x) {
    return BF16ToFloatImpl(x);
  }
  static SHOAL_KERNEL_INLINE uint16_t Store(float x) {
    return FloatToBF16Impl(x);
  }
};

// ---- The operators: Apply(accumulated, next input) ----

struct SumOp {
  template <typename T>
  static SHOAL_KERNEL_INLINE T Apply(T acc, T x) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(acc) + static_cast<U>(x));
    } else {
      return acc + x;
    }
  }
};

struct ProdOp {
  template <typename T>
  static SHOAL_KERNEL_INLINE T Apply(T acc, T x) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(acc) * static_cast<U>(x));
    } else {
      return acc * x;
    }
  }
};

// Floats: take x if it is smaller or NaN, so a NaN accumulator stays (x < NaN
// is false) and a NaN input is taken; on ties the earlier input stays.
struct MinOp {
  template <typename T>
  static SHOAL_KERNEL_INLINE T Apply(T acc, T x) {
    if constexpr (std::is_integral_v<T>) {
      return x < acc ? x : acc;
    } else {
      return ((x < acc) | (x != x)) ? x : acc;
    }
  }
};

struct MaxOp {
  template <typename T>
  static SHOAL_KERNEL_INLINE T Apply(T acc, T x) {
    if constexpr (std::is_integral_v<T>) {
      return x > acc ? x : acc;
    } else {
      return ((x > acc) | (x != x)) ? x : acc;
    }
  }
};

// ---- Loops over one range. `o` never aliases an input (restrict): in place
// reductions use the Fold* loops, which read and write `o`. ----

template <typename C>
using StorageOf = typename C::Storage;
template <typename C>
using ComputeOf = typename C::Compute;

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Start1(ComputeOf<C>* __restrict o,
                                const StorageOf<C>* __restrict a, int64_t len) {
  for (int64_t i = 0; i < len; ++i) o[i] = C::Load(a[i]);
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Start2(ComputeOf<C>* __restrict o,
                                const StorageOf<C>* __restrict a,
                                const StorageOf<C>* __restrict b, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    o[i] = Op::Apply(C::Load(a[i]), C::Load(b[i]));
  }
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Start3(ComputeOf<C>* __restrict o,
                                const StorageOf<C>* __restrict a,
                                const StorageOf<C>* __restrict b,
                                const StorageOf<C>* __restrict c, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    o[i] = Op::Apply(Op::Apply(C::Load(a[i]), C::Load(b[i])), C::Load(c[i]));
  }
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Start4(ComputeOf<C>* __restrict o,
                                const StorageOf<C>* __restrict a,
                                const StorageOf<C>* __restrict b,
                                const StorageOf<C>* __restrict c,
                                const StorageOf<C>* __restrict d, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    o[i] = Op::Apply(
        Op::Apply(Op::Apply(C::Load(a[i]), C::Load(b[i])), C::Load(c[i])),
        C::Load(d[i]));
  }
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Fold1(ComputeOf<C>* __restrict o,
                               const StorageOf<C>* __restrict a, int64_t len) {
  for (int64_t i = 0; i < len; ++i) o[i] = Op::Apply(o[i], C::Load(a[i]));
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Fold2(ComputeOf<C>* __restrict o,
                               const StorageOf<C>* __restrict a,
                               const StorageOf<C>* __restrict b, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    o[i] = Op::Apply(Op::Apply(o[i], C::Load(a[i])), C::Load(b[i]));
  }
}

template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Fold3(ComputeOf<C>* __restrict o,
                               const StorageOf<C>* __restrict a,
                               const StorageOf<C>* __restrict b,
                               const StorageOf<C>* __restrict c, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    o[i] = Op::Apply(Op::Apply(Op::Apply(o[i], C::Load(a[i])), C::Load(b[i])),
                     C::Load(c[i]));
  }
}

// o[0, len) = op over in[k][begin, begin + len). If `o_is_in0`, o already
// holds in[0]'s elements (an in-place reduction) and only in[1..] are folded.
template <typename Op, typename C>
SHOAL_KERNEL_INLINE void CombineRange(const StorageOf<C>* const* in, int n,
                                      int64_t begin, int64_t len,
                                      ComputeOf<C>* o, bool o_is_in0) {
  int k;
  if (o_is_in0) {
    k = 1;
  } else if (n == 1) {
    Start1<Op, C>(o, in[0] + begin, len);
    k = 1;
  } else if (n == 2) {
    Start2<Op, C>(o, in[0] + begin, in[1] + begin, len);
    k = 2;
  } else if (n == 3) {
    Start3<Op, C>(o, in[0] + begin, in[1] + begin, in[2] + begin, len);
    k = 3;
  } else {
    Start4<Op, C>(o, in[0] + begin, in[1] + begin, in[2] + begin, in[3] + begin,
                  len);
    k = 4;
  }
  for (; k + 3 <= n; k += 3) {
    Fold3<Op, C>(o, in[k] + begin, in[k + 1] + begin, in[k + 2] + begin, len);
  }
  if (n - k == 2) {
    Fold2<Op, C>(o, in[k] + begin, in[k + 1] + begin, len);
  } else if (n - k == 1) {
    Fold1<Op, C>(o, in[k] + begin, len);
  }
}

// o[i] /= divisor for native types.
template <typename T>
SHOAL_KERNEL_INLINE void DivideNative(T* __restrict o, int64_t len,
                                      int divisor) {
  if constexpr (std::is_same_v<T, int32_t>) {
    // Exact: the double quotient of two ints below 2^31 is never rounded
    // across an integer, and this form vectorises (integer division does
    // not).
    const double d = divisor;
    for (int64_t i = 0; i < len; ++i) {
      o[i] = static_cast<int32_t>(static_cast<double>(o[i]) / d);
    }
  } else if constexpr (std::is_integral_v<T>) {
    const T d = divisor;
    for (int64_t i = 0; i < len; ++i) o[i] /= d;
  } else {
    const T d = static_cast<T>(divisor);
    for (int64_t i = 0; i < len; ++i) o[i] = o[i] / d;
  }
}

// o[i] = Store(acc[i] / divisor) (no division when divisor == 1).
template <typename C>
SHOAL_KERNEL_INLINE void Finish(uint16_t* __restrict o,
                                const float* __restrict acc, int64_t len,
                                int divisor) {
  if (divisor == 1) {
    for (int64_t i = 0; i < len; ++i) o[i] = C::Store(acc[i]);
  } else {
    const float d = static_cast<float>(divisor);
    for (int64_t i = 0; i < len; ++i) o[i] = C::Store(acc[i] / d);
  }
}

// The whole reduction. divisor == 1: no division.
template <typename Op, typename C>
SHOAL_KERNEL_INLINE void Reduce(const void* const* in_v, int n, void* out_v,
                                int64_t count, int divisor) {
  using T = StorageOf<C>;
  const T* in[kMaxReduceInputs];
  for (int k = 0; k < n; ++k) in[k] = static_cast<const T*>(in_v[k]);
  T* out = static_cast<T*>(out_v);
  const bool divide = divisor != 1;
  if constexpr (std::is_same_v<typename C::Storage, typename C::Compute>) {
    // Straight into `out`; in blocks only when it is visited more than once.
    const bool in_place = out == in[0];
    const int64_t block =
        n > 4 || divide ? kBlockBytes / static_cast<int64_t>(sizeof(T)) : count;
    for (int64_t begin = 0; begin < count; begin += block) {
      const int64_t len = std::min(block, count - begin);
      CombineRange<Op, C>(in, n, begin, len, out + begin, in_place);
      if (divide) DivideNative(out + begin, len, divisor);
    }
  } else if constexpr (std::is_same_v<C, Half>) {
    // Each block of each input is converted to f32 and folded into an f32
    // block, which is rounded to 16 bits once when written to `out` (which
    // may be in[0]: each block of it is read before it is written).
    using F = Native<float>;
    alignas(64) float acc[kF16Block];
    alignas(64) float tmp[3][kF16Block];
    for (int64_t begin = 0; begin < count; begin += kF16Block) {
      const int64_t len = std::min(kF16Block, count - begin);
      HalfToFloatBlock(in[0] + begin, acc, len);
      int k = 1;
      for (; k + 3 <= n; k += 3) {
        for (int j = 0; j < 3; ++j) {
          HalfToFloatBlock(in[k + j] + begin, tmp[j], len);
        }
        Fold3<Op, F>(acc, tmp[0], tmp[1], tmp[2], len);
      }
      if (n - k == 2) {
        HalfToFloatBlock(in[k] + begin, tmp[0], len);
        HalfToFloatBlock(in[k + 1] + begin, tmp[1], len);
        Fold2<Op, F>(acc, tmp[0], tmp[1], len);
      } else if (n - k == 1) {
        HalfToFloatBlock(in[k] + begin, tmp[0], len);
        Fold1<Op, F>(acc, tmp[0], len);
      }
      if (divide) DivideNative(acc, len, divisor);
      FloatToHalfBlock(acc, out + begin, len);
    }
  } else {
    // bf16: converted in the loops (a shift and a rounding add, which
    // vectorise well), through an f32 block rounded to 16 bits once when
    // written to `out` (which may be in[0], as above).
    alignas(64) float acc[kHalfBlock];
    for (int64_t begin = 0; begin < count; begin += kHalfBlock) {
      const int64_t len = std::min(kHalfBlock, count - begin);
      CombineRange<Op, C>(in, n, begin, len, acc, /*o_is_in0=*/false);
      Finish<C>(out + begin, acc, len, divisor);
    }
  }
}

template <typename C>
SHOAL_KERNEL_INLINE void ReduceAnyOp(ReduceOp op, const void* const* in, int n,
                                     void* out, int64_t count, int divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      Reduce<SumOp, C>(in, n, out, count, divisor);
      return;
    case ReduceOp::kProd:
      Reduce<ProdOp, C>(in, n, out, count, divisor);
      return;
    case ReduceOp::kMin:
      Reduce<MinOp, C>(in, n, out, count, divisor);
      return;
    case ReduceOp::kMax:
      Reduce<MaxOp, C>(in, n, out, count, divisor);
      return;
  }
}

template <typename C>
SHOAL_KERNEL_INLINE void DivideAll(void* data, int64_t count, int divisor) {
  using T = typename C::Storage;
  T* o = static_cast<T*>(data);
  if constexpr (std::is_same_v<typename C::Storage, typename C::Compute>) {
    DivideNative(o, count, divisor);
  } else if constexpr (std::is_same_v<C, Half>) {
    alignas(64) float acc[kF16Block];
    for (int64_t begin = 0; begin < count; begin += kF16Block) {
      const int64_t len = std::min(kF16Block, count - begin);
      HalfToFloatBlock(o + begin, acc, len);
      DivideNative(acc, len, divisor);
      FloatToHalfBlock(acc, o + begin, len);
    }
  } else {
    const float d = static_cast<float>(divisor);
    for (int64_t i = 0; i < count; ++i) o[i] = C::Store(C::Load(o[i]) / d);
  }
}

// ---- The multiversioned entry points, one per dtype ----

SHOAL_MULTIVERSION void ReduceF16(ReduceOp op, const void* const* in, int n,
                                  void* out, int64_t count, int divisor) {
  ReduceAnyOp<Half>(op, in, n, out, count, divisor);
}
SHOAL_MULTIVERSION void ReduceBF16(ReduceOp op, const void* const* in, int n,
                                   void* out, int64_t count, int divisor) {
  ReduceAnyOp<BFloat>(op, in, n, out, count, divisor);
}
SHOAL_MULTIVERSION void ReduceF32(ReduceOp op, const void* const* in, int n,
                                  void* out, int64_t count, int divisor) {
  ReduceAnyOp<Native<float>>(op, in, n, out, count, divisor);
}
SHOAL_MULTIVERSION void ReduceF64(ReduceOp op, const void* const* in, int n,
                                  void* out, int64_t count, int divisor) {
  ReduceAnyOp<Native<double>>(op, in, n, out, count, divisor);
}
SHOAL_MULTIVERSION void ReduceI32(ReduceOp op, const void* const* in, int n,
                                  void* out, int64_t count, int divisor) {
  ReduceAnyOp<Native<int32_t>>(op, in, n, out, count, divisor);
}
SHOAL_MULTIVERSION void ReduceI64(ReduceOp op, const void* const* in, int n,
                                  void* out, int64_t count, int divisor) {
  ReduceAnyOp<Native<int64_t>>(op, in, n, out, count, divisor);
}

SHOAL_MULTIVERSION void DivideF16(void* data, int64_t count, int divisor) {
  DivideAll<Half>(data, count, divisor);
}
SHOAL_MULTIVERSION void DivideBF16(void* data, int64_t count, int divisor) {
  DivideAll<BFloat>(data, count, divisor);
}
SHOAL_MULTIVERSION void DivideF32(void* data, int64_t count, int divisor) {
  DivideAll<Native<float>>(data, count, divisor);
}
SHOAL_MULTIVERSION void DivideF64(void* data, int64_t count, int divisor) {
  DivideAll<Native<double>>(data, count, divisor);
}
SHOAL_MULTIVERSION void DivideI32(void* data, int64_t count, int divisor) {
  DivideAll<Native<int32_t>>(data, count, divisor);
}
SHOAL_MULTIVERSION void DivideI64(void* data, int64_t count, int divisor) {
  DivideAll<Native<int64_t>>(data, count, divisor);
}

}  // namespace

namespace reduce_internal {

bool ReduceChecked(DType dtype, ReduceOp op, const void* const* in, int n,
                   void* out, int64_t count, int divisor) {
  switch (dtype) {
    case DType::kF16:
      ReduceF16(op, in, n, out, count, divisor);
      break;
    case DType::kBF16:
      ReduceBF16(op, in, n, out, count, divisor);
      break;
    case DType::kF32:
      ReduceF32(op, in, n, out, count, divisor);
      break;
    case DType::kF64:
      ReduceF64(op, in, n, out, count, divisor);
      break;
    case DType::kI32:
      ReduceI32(op, in, n, out, count, divisor);
      break;
    case DType::kI64:
      ReduceI64(op, in, n, out, count, divisor);
      break;
    default:
      return false;
  }
  return true;
}

bool DivideChecked(DType dtype, void* data, int64_t count, int divisor) {
  switch (dtype) {
    case DType::kF16:
      DivideF16(data, count, divisor);
      break;
    case DType::kBF16:
      DivideBF16(data, count, divisor);
      break;
    case DType::kF32:
      DivideF32(data, count, divisor);
      break;
    case DType::kF64:
      DivideF64(data, count, divisor);
      break;
    case DType::kI32:
      DivideI32(data, count, divisor);
      break;
    case DType::kI64:
      DivideI64(data, count, divisor);
      break;
    default:
      return false;
  }
  return true;
}

}  // namespace reduce_internal

float HalfToFloat(uint16_t h) { return HalfToFloatImpl(h); }
uint16_t FloatToHalf(float f) { return FloatToHalfImpl(f); }
float BF16ToFloat(uint16_t b) { return BF16ToFloatImpl(b); }
uint16_t FloatToBF16(float f) { return FloatToBF16Impl(f); }

}  // namespace shoal::collectives

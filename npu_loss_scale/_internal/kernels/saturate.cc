// Saturation-mode arithmetic in one pass over a tensor (see npu_loss_scale/device/saturate.py).
//
// NlsSaturate(x: T) -> (y: T, flags: bool[2]): y is x with every inf replaced by the dtype's
// largest finite value of the same sign and every NaN by +0; flags[0] says whether x held an
// inf, flags[1] whether it held a NaN.
//
// NlsRoundHalfSaturate(x: float) -> (y: float, flags: bool[2]): x rounded to float16 (to
// nearest, ties to even: TensorFlow's Cast), saturated as above in float16 (an overflow to inf
// becomes +-65504) and handed back as float32; flags as above, of the float16 values. It is the
// Cast, the saturation and the Cast back of the precision emulation's rounding in one pass.
//
// NlsRoundHalf(x: float) -> (y: float, flags: bool[2]): the same rounding without the
// saturation, as in INF/NaN mode (an overflow stays +-inf, a NaN stays NaN); flags as above.
//
// NlsMagnitude(x: T, when: bool) -> (m: double): when `when` holds, max |x| over x's elements
// (0 for an empty x; inf when x holds an inf; NaN when it holds a NaN and no inf); else 0
// without reading x. The magnitude overflow localisation notes for a site that overflowed.
//
// The values are what those TensorFlow ops give, bit for bit: the conversions are Eigen's, as
// TensorFlow's Cast kernels use them, and run under the same floating-point environment.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tf_compat.h"

namespace nls {
namespace {  // the saturation kernels' own names

tensorflow::Status SameShapeAndTwoFlags(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->input(0));
  c->set_output(1, c->Vector(2));
  return NLS_OK();
}

REGISTER_OP("NlsSaturate")
    .Input("x: T")
    .Output("y: T")
    .Output("flags: bool")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn(SameShapeAndTwoFlags);

REGISTER_OP("NlsRoundHalfSaturate")
    .Input("x: float")
    .Output("y: float")
    .Output("flags: bool")
    .SetShapeFn(SameShapeAndTwoFlags);

REGISTER_OP("NlsRoundHalf")
    .Input("x: float")
    .Output("y: float")
    .Output("flags: bool")
    .SetShapeFn(SameShapeAndTwoFlags);

REGISTER_OP("NlsMagnitude")
    .Input("x: T")
    .Input("when: bool")
    .Output("m: double")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return NLS_OK();
    });

// A value widened exactly, for the tests of inf and NaN (TensorFlow 1.15's bfloat16 has none
// of its own).
template <typename T>
inline float Wide(T v) { return static_cast<float>(v); }
inline double Wide(double v) { return v; }

// One element: the saturated value of v (in its own type T) and the flags it raises.
template <typename T>
inline T SaturateOne(T v, bool* inf, bool* nan) {
  const auto wide = Wide(v);
  if (std::isnan(wide)) {
    *nan = true;
    return T(0.0f);
  }
  if (std::isinf(wide)) {
    *inf = true;
    return wide > 0 ? Eigen::NumTraits<T>::highest() : Eigen::NumTraits<T>::lowest();
  }
  return v;
}

// Saturates src[begin, end) into dst, one element at a time; ORs in the flags it raises.
template <typename T>
void SaturateRange(const T* src, T* dst, int64_t begin, int64_t end, bool* inf, bool* nan) {
  for (int64_t i = begin; i < end; ++i) dst[i] = SaturateOne(src[i], inf, nan);
}

// The flags one float16 value raises, the value kept (INF/NaN mode).
inline Eigen::half FlagOne(Eigen::half v, bool* inf, bool* nan) {
  const float wide = static_cast<float>(v);
  if (std::isnan(wide)) *nan = true;
  if (std::isinf(wide)) *inf = true;
  return v;
}

// Rounds src[begin, end) to float16 (Eigen's conversion, TensorFlow's Cast), saturates when
// Saturate, and writes the float32 values back; ORs in the flags.
template <bool Saturate>
void RoundHalfRange(const float* src, float* dst, int64_t begin, int64_t end, bool* inf,
                    bool* nan) {
  for (int64_t i = begin; i < end; ++i) {
    const Eigen::half low = static_cast<Eigen::half>(src[i]);
    dst[i] = static_cast<float>(Saturate ? SaturateOne(low, inf, nan) : FlagOne(low, inf, nan));
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NLS_SAT_F16C 1
// RoundHalfRange eight values at a time with the CPU's own conversions (F16C, round to
// nearest with ties to even, as Eigen's; float16 subnormals kept) and the saturation on the
// float16 bits when Saturate: an all-ones exponent is an inf (fraction 0: becomes
// sign | 0x7bff, +-65504) or a NaN (becomes +0). Else a NaN becomes sign | 0x7e00 (the CPU
// keeps its payload, Eigen's conversion does not).
template <bool Saturate>
__attribute__((target("avx,f16c"))) void RoundHalfRangeF16C(const float* src, float* dst,
                                                            int64_t begin, int64_t end,
                                                            bool* inf, bool* nan) {
  const __m128i exponent = _mm_set1_epi16(0x7c00), fraction = _mm_set1_epi16(0x03ff),
                sign = _mm_set1_epi16(static_cast<short>(0x8000)),
                largest = _mm_set1_epi16(0x7bff), quiet = _mm_set1_epi16(0x7e00),
                zero = _mm_setzero_si128();
  __m128i any_inf = zero, any_nan = zero;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i special = _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent);
    const __m128i whole = _mm_cmpeq_epi16(_mm_and_si128(h, fraction), zero);
    const __m128i is_inf = _mm_and_si128(special, whole);
    const __m128i is_nan = _mm_andnot_si128(whole, special);
    any_inf = _mm_or_si128(any_inf, is_inf);
    any_nan = _mm_or_si128(any_nan, is_nan);
    const __m128i out = !Saturate
        ? _mm_or_si128(_mm_andnot_si128(is_nan, h),   // a NaN as Eigen makes it: sign | 0x7e00
                       _mm_and_si128(is_nan, _mm_or_si128(_mm_and_si128(h, sign), quiet)))
        : _mm_or_si128(_mm_andnot_si128(special, h),
                       _mm_and_si128(is_inf, _mm_or_si128(_mm_and_si128(h, sign), largest)));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(out));
  }
  if (_mm_movemask_epi8(any_inf)) *inf = true;
  if (_mm_movemask_epi8(any_nan)) *nan = true;
  RoundHalfRange<Saturate>(src, dst, i, end, inf, nan);
}

bool HasF16C() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

// Runs range(begin, end, &inf, &nan) over n elements, in parallel shards for large tensors;
// writes the ORed flags of the shards.
template <typename Range>
void Run(OpKernelContext* ctx, int64_t n, Range range, bool* flags) {
  std::atomic<bool> any_inf(false), any_nan(false);
  auto work = [&](int64_t begin, int64_t end) {
    bool inf = false, nan = false;
    range(begin, end, &inf, &nan);
    if (inf) any_inf.store(true, std::memory_order_relaxed);
    if (nan) any_nan.store(true, std::memory_order_relaxed);
  };
  nls::ForShards(ctx, n, work);
  flags[0] = any_inf.load();
  flags[1] = any_nan.load();
}

// Computes y (in x's buffer when TensorFlow lets it) and the flags of input 0 with
// range(src, dst, begin, end, &inf, &nan).
template <typename T>
void SaturateInto(OpKernelContext* ctx,
                  void (*range)(const T*, T*, int64_t, int64_t, bool*, bool*)) {
  const Tensor& in = ctx->input(0);
  Tensor* out = nullptr;
  OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out));
  Tensor* flags = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({2}), &flags));
  const T* src = in.flat<T>().data();
  T* dst = out->flat<T>().data();
  bool result[2];
  Run(ctx, in.NumElements(),
      [src, dst, range](int64_t begin, int64_t end, bool* inf, bool* nan) {
        range(src, dst, begin, end, inf, nan);
      },
      result);
  flags->flat<bool>()(0) = result[0];
  flags->flat<bool>()(1) = result[1];
}

template <typename T>
class SaturateOp : public OpKernel {
 public:
  explicit SaturateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override { SaturateInto<T>(ctx, SaturateRange<T>); }
};

template <bool Saturate>
class RoundHalfOp : public OpKernel {
 public:
  explicit RoundHalfOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
#ifdef NLS_SAT_F16C
    SaturateInto<float>(ctx, HasF16C() ? RoundHalfRangeF16C<Saturate> : RoundHalfRange<Saturate>);
#else
    SaturateInto<float>(ctx, RoundHalfRange<Saturate>);
#endif
  }
};

// max |v| over src[begin, end), NaNs left out (each seen setting *nan); 0 for none.
template <typename T>
double MagnitudeRange(const T* src, int64_t begin, int64_t end, bool* nan) {
  decltype(Wide(src[begin])) best = 0;
  for (int64_t i = begin; i < end; ++i) {
    const auto a = std::fabs(Wide(src[i]));
    if (std::isnan(a)) {
      *nan = true;
    } else if (a > best) {
      best = a;
    }
  }
  return static_cast<double>(best);
}

template <typename T>
class MagnitudeOp : public OpKernel {
 public:
  explicit MagnitudeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& when = ctx->input(1);
    OP_REQUIRES(ctx, when.NumElements() == 1,
                NLS_INVALID_ARGUMENT("NlsMagnitude: `when` must be one bool"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    double result = 0.0;
    if (when.flat<bool>()(0) && in.NumElements() > 0) {
      const T* src = in.flat<T>().data();
      std::mutex lock;
      bool any_nan = false;
      nls::ForShards(ctx, in.NumElements(), [&](int64_t begin, int64_t end) {
        bool nan = false;
        const double m = MagnitudeRange(src, begin, end, &nan);
        std::lock_guard<std::mutex> hold(lock);
        if (m > result) result = m;
        any_nan = any_nan || nan;
      });
      if (any_nan && !std::isinf(result)) result = std::numeric_limits<double>::quiet_NaN();
    }
    out->scalar<double>()() = result;
  }
};

#define NLS_REGISTER_SATURATE(T) \
  REGISTER_KERNEL_BUILDER(       \
      Name("NlsSaturate").Device(DEVICE_CPU).TypeConstraint<T>("T"), SaturateOp<T>)
NLS_REGISTER_SATURATE(float);
NLS_REGISTER_SATURATE(double);
NLS_REGISTER_SATURATE(Eigen::half);
NLS_REGISTER_SATURATE(tensorflow::bfloat16);
#undef NLS_REGISTER_SATURATE

REGISTER_KERNEL_BUILDER(Name("NlsRoundHalfSaturate").Device(DEVICE_CPU), RoundHalfOp<true>);
REGISTER_KERNEL_BUILDER(Name("NlsRoundHalf").Device(DEVICE_CPU), RoundHalfOp<false>);

#define NLS_REGISTER_MAGNITUDE(T) \
  REGISTER_KERNEL_BUILDER(        \
      Name("NlsMagnitude").Device(DEVICE_CPU).TypeConstraint<T>("T"), MagnitudeOp<T>)
NLS_REGISTER_MAGNITUDE(float);
NLS_REGISTER_MAGNITUDE(double);
NLS_REGISTER_MAGNITUDE(Eigen::half);
NLS_REGISTER_MAGNITUDE(tensorflow::bfloat16);
#undef NLS_REGISTER_MAGNITUDE

}  // namespace
}  // namespace nls

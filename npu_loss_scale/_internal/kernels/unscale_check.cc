// One pass over a scaled gradient: writes the unscaled values (in place when TensorFlow lets
// the kernel reuse the input buffer) and says whether any scaled value was an inf or a NaN.
// The reciprocal of the loss scale comes as two normal float32 factors (first, second), see
// npu_loss_scale/_unscale.py: first is 1 unless the scale is above 2**126, where one factor
// would be a subnormal that the CPU flushes to zero. With first == 1 the loop multiplies once.
#include <atomic>
#include <cstdint>
#include <cstring>

#include "tf_compat.h"

namespace nls {

REGISTER_OP("NlsUnscaleAndCheck")
    .Input("scaled: T")
    .Input("factors: float")
    .Output("unscaled: T")
    .Output("check: float")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->Scalar());
      return NLS_OK();
    });

// Exponent field of each type, and the bit pattern that marks an inf or a NaN.
template <typename T> struct Bits;
template <> struct Bits<float> {
  using U = uint32_t;
  static constexpr U kExp = 0x7f800000u, kStep = 0x00800000u, kTop = 0x80000000u;
};
template <> struct Bits<double> {
  using U = uint64_t;
  static constexpr U kExp = 0x7ff0000000000000ull, kStep = 0x0010000000000000ull,
                     kTop = 0x8000000000000000ull;
};
template <> struct Bits<Eigen::half> {
  using U = uint16_t;
  static constexpr U kExp = 0x7c00u, kStep = 0x0400u, kTop = 0x8000u;
};
template <> struct Bits<tensorflow::bfloat16> {
  using U = uint16_t;
  static constexpr U kExp = 0x7f80u, kStep = 0x0080u, kTop = 0x8000u;
};

// x * first * second, multiplied left to right; with kSplit false, x * second (first is 1).
template <typename T, bool kSplit> inline T Times(T x, float first, float second) {
  float wide = static_cast<float>(x);
  if (kSplit) wide *= first;
  return static_cast<T>(wide * second);
}
template <> inline float Times<float, false>(float x, float, float second) { return x * second; }
template <> inline float Times<float, true>(float x, float first, float second) {
  return x * first * second;
}
template <> inline double Times<double, false>(double x, float, float second) {
  return x * static_cast<double>(second);
}
template <> inline double Times<double, true>(double x, float first, float second) {
  return x * static_cast<double>(first) * static_cast<double>(second);
}

template <typename T>
class UnscaleAndCheckOp : public OpKernel {
 public:
  explicit UnscaleAndCheckOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& ft = ctx->input(1);
    OP_REQUIRES(ctx, ft.NumElements() == 2,
                NLS_INVALID_ARGUMENT(
                    "factors must hold two float32 values (first, second) whose product is "
                    "1 / loss scale; got " + ft.shape().DebugString()));
    const float first = ft.flat<float>()(0), second = ft.flat<float>()(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out));
    Tensor* check = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &check));
    const T* src = in.flat<T>().data();
    T* dst = out->flat<T>().data();
    const int64_t n = in.NumElements();
    std::atomic<bool> bad(false);
    if (first == 1.0f) {
      Run<false>(ctx, src, dst, n, first, second, &bad);
    } else {
      Run<true>(ctx, src, dst, n, first, second, &bad);
    }
    check->scalar<float>()() = bad.load() ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  }

 private:
  template <bool kSplit>
  static void Run(OpKernelContext* ctx, const T* src, T* dst, int64_t n, float first,
                  float second, std::atomic<bool>* bad) {
    using U = typename Bits<T>::U;
    auto work = [&](int64_t begin, int64_t end) {
      U acc = 0;
      for (int64_t i = begin; i < end; ++i) {
        const T x = src[i];
        U bits;
        std::memcpy(&bits, &x, sizeof(U));
        acc |= static_cast<U>(static_cast<U>((bits & Bits<T>::kExp) + Bits<T>::kStep) &
                              Bits<T>::kTop);
        dst[i] = Times<T, kSplit>(x, first, second);
      }
      if (acc) bad->store(true, std::memory_order_relaxed);
    };
    ForShards(ctx, n, work);
  }
};

#define NLS_REGISTER(T)                                                        \
  REGISTER_KERNEL_BUILDER(                                                     \
      Name("NlsUnscaleAndCheck").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      UnscaleAndCheckOp<T>)
NLS_REGISTER(float);
NLS_REGISTER(double);
NLS_REGISTER(Eigen::half);
NLS_REGISTER(tensorflow::bfloat16);
#undef NLS_REGISTER

}  // namespace nls

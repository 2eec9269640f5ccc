// What the package's kernels share: TensorFlow's headers, the differences between the releases
// they are built for (1.15 to 2.21), and running a loop over a tensor in parallel shards.
#ifndef NPU_LOSS_SCALE_KERNELS_TF_COMPAT_H_
#define NPU_LOSS_SCALE_KERNELS_TF_COMPAT_H_

#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/public/version.h"
// version.h defines TF_MAJOR_VERSION / TF_MINOR_VERSION up to TensorFlow 2.20; later releases
// (2.21) no longer do, and have every newer API used below.
#if defined(TF_MAJOR_VERSION)
#define NLS_TF_BEFORE(major, minor) \
  (TF_MAJOR_VERSION < (major) || (TF_MAJOR_VERSION == (major) && TF_MINOR_VERSION < (minor)))
#else
#define NLS_TF_BEFORE(major, minor) 0
#endif

// ThreadPool's header moved from lib/core (TensorFlow 1.x) to platform (2.x).
#if NLS_TF_BEFORE(2, 0)
#include "tensorflow/core/lib/core/threadpool.h"
#else
#include "tensorflow/core/platform/threadpool.h"
#endif

// TensorFlow's Status became absl::Status in 2.13; 1.15 and 2.6 (the releases of Ascend's TF1
// and TF2 adapters) have its own class.
#if NLS_TF_BEFORE(2, 13)
#define NLS_OK() ::tensorflow::Status::OK()
#define NLS_INVALID_ARGUMENT(message) ::tensorflow::errors::InvalidArgument(message)
#else
#define NLS_OK() ::absl::OkStatus()
#define NLS_INVALID_ARGUMENT(message) ::absl::InvalidArgumentError(message)
#endif

namespace nls {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// work(begin, end) over [0, n): in one call for small tensors (or without worker threads),
// else in shards on TensorFlow's CPU worker threads.
template <typename Work>
void ForShards(tensorflow::OpKernelContext* ctx, int64_t n, Work work) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  if (n < 32768 || threads == nullptr || threads->num_threads <= 1) {
    work(0, n);
  } else {
    threads->workers->ParallelFor(n, /*cost_per_unit=*/4, work);
  }
}

}  // namespace nls

#endif  // NPU_LOSS_SCALE_KERNELS_TF_COMPAT_H_

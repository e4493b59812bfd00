// One CUTLASS GEMM (its 2.x device API): C = A @ B, fp32 row-major A, B, C, TF32 mma.sync
// (SM80 m16n8k8, what step 13 tensorizes onto), fp32 accumulation. A yardstick for step 13:
// what NVIDIA's hand-written mma.sync kernels reach on the same GPU. build.sh compiles it once
// per tile config (-DNAME -DBM -DBN -DBK -DWM -DWN -DST) into one shared library.
#include <cstdio>
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"

#ifndef SWZ
#define SWZ 8
#endif

using Row = cutlass::layout::RowMajor;
using Gemm = cutlass::gemm::device::Gemm<
    float, Row, float, Row, float, Row, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WM, WN, BK>,
    cutlass::gemm::GemmShape<16, 8, 8>,
    cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<SWZ>, ST>;

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
static Gemm op;
// prepare: arguments and the shared-memory attribute, outside any stream capture; launch: the
// kernel alone (what a CUDA graph captures).
extern "C" int CAT(prepare_, NAME)(int M, int N, int K, const float* A, const float* B, float* C, void* stream) {
  typename Gemm::Arguments args({M, N, K}, {A, K}, {B, N}, {C, N}, {C, N}, {1.0f, 0.0f});
  if (op.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (op.initialize(args, nullptr, (cudaStream_t)stream) != cutlass::Status::kSuccess) return 2;
  return op.run((cudaStream_t)stream) == cutlass::Status::kSuccess ? 0 : 3;
}
extern "C" int CAT(launch_, NAME)(void* stream) {
  return op.run((cudaStream_t)stream) == cutlass::Status::kSuccess ? 0 : 3;
}
extern "C" int CAT(smem_, NAME)() { return int(sizeof(typename Gemm::GemmKernel::SharedStorage)); }

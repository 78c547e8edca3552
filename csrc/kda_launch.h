// kda_launch.h: the launchers the binding (kda_binding.cpp) calls, one per kernel, each on the caller's
// stream. They take the launch configuration from the arguments alone (the choice of path, fused or K1 + K2
// or K3, and of pipeline steps, is kda_nb.plan's, in Python). Plain C++ with the CUDA runtime's headers: the
// binding compiles without nvcc.
// Files: kda_fwd_layout.cu (the layout kernel), kda_fwd_prepare.cu (K1), kda_fwd_recurrence.cu (K2),
// kda_fwd_fused.cu (K1 and K2 in one kernel), kda_decode.cu (K3); kda_chunk_prep.cuh is the per-chunk
// preparation K1 and the fused kernel share, kda_recurrence.cuh the chunk loop K2 and the fused kernel share.
// kda_bwd_states.cu: the backward's two sequential passes over each sequence's chunks; kda_bwd_chunk.cu: the
// token-parallel kernels before them (the chunk factors) and after them (the rest of the gradient).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#include "kda_args.h"
#include "kda_layout.cuh"

namespace kda {

// The launchers' per-device state (and the binding's second streams) live in arrays of MAX_DEVICES.
// current_device: the calling thread's device, checked against that bound; sm_count: its SM count, read once
// per device (the one SM-count query: K1's persistent grid and K2's choice of stages use it).
constexpr int MAX_DEVICES = 64;
inline cudaError_t current_device(int& device) {
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    return device < MAX_DEVICES ? cudaSuccess : cudaErrorInvalidDevice;
}
inline int sm_count(int device) {
    static int sms[MAX_DEVICES] = {};
    if (sms[device] == 0) cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device);
    return sms[device];
}

size_t record_bytes();                                     // bytes K1 leaves per (chunk, head)
// The layout tables of FwdArgs for a variable-length batch, in one launch, from the caller's cu_seqlens
// [N + 1] (any values). seq_order may be null (not wanted). Rows of out (row_bytes each, a multiple of
// 16) that no sequence covers are zeroed.
cudaError_t launch_layout(const int64_t* cu_in, int n_seq, int64_t total, int64_t* cu_seqlens, int64_t* cu_chunks,
                          int* seq_order, void* out, int64_t row_bytes, cudaStream_t stream);
cudaError_t launch_prepare(const FwdArgs& a, cudaStream_t stream);     // K1
cudaError_t launch_recurrence(const FwdArgs& a, cudaStream_t stream);  // K2
// K1 and K2 in one kernel, for the whole batch (no pipeline step) and with no workspace: one block per
// (sequence, head), whose preparing warps make each chunk's record in shared memory for its recurrence warps
cudaError_t launch_fused(const FwdArgs& a, cudaStream_t stream);
cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t stream);    // K3
// the backward: the forward's chunk loop keeping each chunk's entering state, and the reverse loop of dS
cudaError_t launch_bwd_states(const StatesArgs& a, cudaStream_t stream);
cudaError_t launch_bwd_dstates(const DStatesArgs& a, cudaStream_t stream);
// the backward's token-parallel kernels: the chunk factors before the passes, the rest of the gradient after
cudaError_t launch_bwd_prepare(const PrepArgs& a, cudaStream_t stream);
cudaError_t launch_bwd_adjoint(const AdjointArgs& a, cudaStream_t stream);

}  // namespace kda

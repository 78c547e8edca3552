// kda_launch.h: the launchers the binding (kda_binding.cpp) calls, one per kernel, each on the caller's
// stream. Every choice of how to launch (the path, the pipeline's steps and growth, K1's grid, K2's stages, the
// SM count they were made for; the backward's k-split and state dtype) is kda_nb.plan's, in Python: a launcher
// takes it as an argument and obeys it. Plain C++ with the CUDA runtime's headers: the binding compiles without nvcc.
// Files: kda_fwd_layout.cu (the layout kernel), kda_fwd_prepare.cu (K1), kda_fwd_recurrence.cu (K2),
// kda_fwd_fused.cu (K1 and K2 in one kernel), kda_decode.cu (K3); kda_chunk_prep.cuh is the per-chunk
// preparation K1 and the fused kernel share, kda_recurrence.cuh the chunk loop K2 and the fused kernel share.
// kda_bwd_states.cu: the backward's two sequential passes over each sequence's chunks; kda_bwd_chunk.cu: the
// token-parallel kernels before them (the chunk factors) and after them (the rest of the gradient).
// kda_entry_scan.cu: the chain of entry states between the passes over segments (kda_nb.segments);
// kda_switch.h turns the runtime flags into the kernels' template parameters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#include "kda_args.h"
#include "kda_layout.cuh"
#include "kda_switch.h"

namespace kda {

// The launchers' per-device state (and the binding's second streams) live in arrays of MAX_DEVICES.
// current_device: the calling thread's device, checked against that bound.
constexpr int MAX_DEVICES = 64;
inline cudaError_t current_device(int& device) {
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    return device < MAX_DEVICES ? cudaSuccess : cudaErrorInvalidDevice;
}

// The forward's launch choices, as kda_nb.plan.Plan made them (its fields of the same names); the binding fills
// this from the plan's keywords and the launchers obey it.
struct FwdPlan {
    int steps = 1;              // K1 + K2 in this many pipeline steps (1: the whole batch at once)
    double growth = 1.0;        // each step this many times as long as the one before (1: equal steps)
    int k2_stages = 4;          // K2's stages: 4, or 3 (more resident blocks, for a grid of many waves)
    bool k1_persistent = true;  // K1's grid: as many blocks as fit at once, each warp striding over the items; else
                                // about two items a warp, so that blocks come and go beside K2's (a pipeline step)
    int sms = 0;                // the SM count the plan was made for: sizes K1's persistent grid
};

size_t record_bytes();                                     // bytes K1 leaves per (chunk, head)
// The layout tables of FwdArgs for a variable-length batch, in one launch, from the caller's cu_seqlens
// [N + 1] (any values). seq_order may be null (not wanted). Rows of out (row_bytes each, a multiple of
// 16) that no sequence covers are zeroed.
cudaError_t launch_layout(const int64_t* cu_in, int n_seq, int64_t total, int64_t* cu_seqlens, int64_t* cu_chunks,
                          int* seq_order, void* out, int64_t row_bytes, cudaStream_t stream);
cudaError_t launch_prepare(const FwdArgs& a, bool persistent, int sms, cudaStream_t stream);  // K1: the grid as FwdPlan says
cudaError_t launch_recurrence(const FwdArgs& a, int stages, cudaStream_t stream);                // K2: 3 or 4 stages
// K1 and K2 in one kernel, for the whole batch (no pipeline step) and with no workspace: one block per
// (sequence, head), whose preparing warps make each chunk's record in shared memory for its recurrence warps
cudaError_t launch_fused(const FwdArgs& a, cudaStream_t stream);
cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t stream);    // K3
// the backward: the forward's chunk loop keeping each chunk's entering state, and the reverse loop of dS
// (input_kind: the inputs' element type, InputKind: v's for the states pass, a 16-bit dO's for the dstates pass)
cudaError_t launch_bwd_states(const StatesArgs& a, int input_kind, cudaStream_t stream);
cudaError_t launch_bwd_dstates(const DStatesArgs& a, int input_kind, cudaStream_t stream);
// the backward's token-parallel kernels: the chunk factors before the passes, the rest of the gradient after
cudaError_t launch_bwd_prepare(const PrepArgs& a, cudaStream_t stream);
cudaError_t launch_bwd_adjoint(const AdjointArgs& a, cudaStream_t stream);

// the chain of entry states of sequences cut into segments (kda_entry_scan.cu), fp32, every tensor contiguous:
// E[grid[p, n]] = the state entering sequence n's segment p, E[grid[0, n]] = initial[n], then E M + X of the segment
// before; a grid value outside [0, P) ends its sequence. `rows`, the state rows of a block: 8, 16 or 32.
struct ScanArgs {
    const float* initial;       // [N, HV, V, K]
    const float* X;             // [P, HV, V, K]: each segment's state from zero
    const float* M;             // [P, HV, K, K]: each segment's transition
    const int64_t* grid;        // [S, N]
    float* E;                   // [P, HV, V, K]
    int64_t P, S, N;
    int HV, V, K, rows;         // V, K: 1 to 128
};
cudaError_t launch_entry_scan(const ScanArgs& a, cudaStream_t stream);

}  // namespace kda

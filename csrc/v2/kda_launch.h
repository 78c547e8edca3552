// kda_launch.h: the C interface between the torch binding (kda_binding.cpp) and the kernels.
// Plain pointers and sizes only, so that the kernels compile with nvcc alone.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace kda {

enum StateKind : int { STATE_NONE = 0, STATE_BF16 = 1, STATE_FP32 = 2 };

struct FwdArgs {
    const void* q;            // [total_tokens, H, 128] bf16 (B*T tokens, or the varlen concatenation)
    const void* k;            // same
    const void* v;            // same
    const void* g;            // same: raw gate
    const void* beta;         // [total_tokens, H] bf16 logits
    const float* A_log;       // [H]
    const float* dt_bias;     // [H, 128]
    void* out;                // [total_tokens, H, 128] bf16
    const void* state_in;     // [N, H, 128, 128] (V-first), kind state_in_kind, or null
    void* state_out;          // same layout, kind state_out_kind, or null
    int state_in_kind;
    int state_out_kind;
    const int64_t* cu_seqlens;  // [N + 1] token offsets of the sequences
    const int64_t* cu_chunks;   // [N + 1] chunk offsets: cu_chunks[n+1] - cu_chunks[n] = ceil(len_n / 16)
    const int* seq_order;     // [N] int32: K2 visits the sequences in this order (longest first), or null
    int n_seq;                // N
    int H;
    int64_t n_chunks;         // cu_chunks[N]
    float scale;
    float lower_bound;
    void* workspace;          // n_chunks * H * record_bytes() bytes, written by K1, read by K2
};

size_t record_bytes();                                     // bytes K1 leaves per (chunk, head)
cudaError_t launch_prepare(const FwdArgs& a, cudaStream_t stream);     // K1
cudaError_t launch_recurrence(const FwdArgs& a, cudaStream_t stream);  // K2

}  // namespace kda

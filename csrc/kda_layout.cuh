// kda_layout.cuh: the batch layout's rules, written once for every kernel and the binding.
//   CHUNK                tokens per chunk (16)
//   chunk_count(len)     the chunks of a sequence of `len` tokens: ceil(len / 16)
//   max_chunks_varlen    an upper bound on a variable-length batch's chunks, known on the host without reading
//                        the device: N lengths that add up to at most `total` have at most (total + 15 N) / 16
//                        chunks (each sequence adds at most one partial chunk)
//   max_chunks_fixed     the chunks of a fixed-length batch, B rows of T: B ceil(T / 16)
//   safe_offset          the safe-offset rule: safe[i] = min(total, max(0, cu[0], ..., cu[i])), the running
//                        maximum of the caller's offsets (started at 0) capped at the tokens there are. For a
//                        valid cu_seqlens it is cu itself; for any other values it is still non-decreasing and
//                        inside [0, total], so no kernel reads or writes outside its tensors.
// The same rules in PyTorch are kda_nb.layout's (`safe_cu_seqlens`, `chunk_offsets`); the tests hold the two
// to each other. Plain C++ as well as CUDA: the binding, compiled by the host compiler alone, includes it.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define KDA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KDA_HOST_DEVICE inline
#endif

namespace kda {

constexpr int CHUNK = 16;                                   // tokens per chunk

KDA_HOST_DEVICE constexpr int64_t chunk_count(int64_t len) { return (len + CHUNK - 1) / CHUNK; }

KDA_HOST_DEVICE constexpr int64_t max_chunks_varlen(int64_t total, int64_t n_seq) {
    return (total + (CHUNK - 1) * n_seq) / CHUNK;
}
KDA_HOST_DEVICE constexpr int64_t max_chunks_fixed(int64_t B, int64_t T) { return B * chunk_count(T); }

// an offset given by the caller, clamped at 0 (the running maximum of such values starts at 0)
KDA_HOST_DEVICE constexpr int64_t offset_at_least_zero(int64_t given) { return given > 0 ? given : 0; }
// the running maximum of the offsets up to i (each clamped at 0), capped at total: safe[i]
KDA_HOST_DEVICE constexpr int64_t safe_offset(int64_t running_max, int64_t total) {
    return running_max < total ? running_max : total;
}

}  // namespace kda

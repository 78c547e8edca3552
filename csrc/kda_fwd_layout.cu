// kda_fwd_layout.cu: the layout kernel, the batch layout built on the device in one launch, so that a call
// copies nothing to the host and a CUDA graph that captured it replays correctly after new lengths are
// written into the same cu_seqlens buffer (fixed-length batches need none: K1 and K2 find their chunks by
// division). One block walks the N + 1 offsets in tiles of LAYOUT_THREADS and writes, for K1 and K2, by the
// rules of kda_layout.cuh:
//   cu_seqlens  the safe offsets (safe_offset). Tokens that no sequence covers (before the first offset,
//               after the last) get zero outputs, here, as in the reference.
//   cu_chunks   chunk offsets, cu_chunks[n + 1] - cu_chunks[n] = chunk_count(len_n); their total is at most
//               max_chunks_varlen, the bound the host sizes K1's grid and the workspace by.
//   seq_order   the sequences longest first, for K2: a counting sort on a bucket of the chunk count
//               (exact below 1024 chunks, 8 buckets per power of two above). Ties land in any order:
//               the order only changes which block starts first, never a result.
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {

constexpr int LAYOUT_THREADS = 1024;
constexpr int EXACT_BUCKETS = 1024;                       // chunk counts 0 .. 1023 have a bucket each
constexpr int N_BUCKETS = EXACT_BUCKETS + 8 * 54;         // then 8 per power of two, up to 2^63

__device__ __forceinline__ int order_bucket(int64_t chunks) {
    if (chunks < EXACT_BUCKETS) return static_cast<int>(chunks);
    const int e = 63 - __clzll(chunks);                   // >= 10
    return EXACT_BUCKETS + 8 * (e - 10) + static_cast<int>((chunks >> (e - 3)) & 7);
}

// Inclusive scan of one value per thread across the block, with `op` (sum or max); `carry` (the
// result of the previous tiles) is folded in. Returns this thread's result; `tile_total` gets the last.
template <typename Op>
__device__ int64_t block_scan(int64_t x, int64_t carry, Op op, int64_t* warp_sums, int64_t& tile_total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int64_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x = op(x, y);
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int64_t w = lane < LAYOUT_THREADS / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int64_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w = op(w, y);
        }
        warp_sums[lane] = w;
    }
    __syncthreads();
    if (warp > 0) x = op(x, warp_sums[warp - 1]);
    x = op(x, carry);
    tile_total = op(warp_sums[LAYOUT_THREADS / 32 - 1], carry);
    __syncthreads();                                      // warp_sums is reused by the next call
    return x;
}

__global__ void __launch_bounds__(LAYOUT_THREADS) kda_fwd_layout(const int64_t* cu_in, int n_seq,
                                                                  int64_t total, int64_t* safe, int64_t* cu_chunks,
                                                                  int* order, uint4* out, int64_t row_pieces) {
    __shared__ int64_t warp_sums[32];
    __shared__ int bucket_start[N_BUCKETS];
    auto max_op = [](int64_t a, int64_t b) { return a > b ? a : b; };
    auto sum_op = [](int64_t a, int64_t b) { return a + b; };
    const int n_off = n_seq + 1;

    // §safe offsets: a running maximum of the offsets clamped at 0, then capped at total
    int64_t carry = 0;
    for (int base = 0; base < n_off; base += LAYOUT_THREADS) {
        const int i = base + threadIdx.x;
        const int64_t given = i >= n_off ? 0 : cu_in[i];
        const int64_t x = offset_at_least_zero(given);
        int64_t tile;
        const int64_t run = block_scan(x, carry, max_op, warp_sums, tile);
        if (i < n_off) safe[i] = safe_offset(run, total);
        carry = tile;
    }
    __syncthreads();                                      // safe[] is read across threads below

    // §uncovered rows: zero outputs for the tokens before safe[0] and after safe[N] (none if cu is valid)
    for (int64_t i = threadIdx.x; i < safe[0] * row_pieces; i += LAYOUT_THREADS) out[i] = make_uint4(0, 0, 0, 0);
    for (int64_t i = safe[n_seq] * row_pieces + threadIdx.x; i < total * row_pieces; i += LAYOUT_THREADS)
        out[i] = make_uint4(0, 0, 0, 0);

    // §chunk offsets: exclusive sum of chunk_count(len); and the histogram of the order's buckets
    for (int b = threadIdx.x; b < N_BUCKETS; b += LAYOUT_THREADS) bucket_start[b] = 0;
    __syncthreads();
    carry = 0;
    for (int base = 0; base < n_seq; base += LAYOUT_THREADS) {
        const int i = base + threadIdx.x;
        const int64_t chunks = i < n_seq ? chunk_count(safe[i + 1] - safe[i]) : 0;
        if (i < n_seq) atomicAdd(&bucket_start[order_bucket(chunks)], 1);
        int64_t tile;
        const int64_t run = block_scan(chunks, carry, sum_op, warp_sums, tile);
        if (i < n_seq) cu_chunks[i + 1] = run;
        carry = tile;
    }
    if (threadIdx.x == 0) cu_chunks[0] = 0;
    __syncthreads();
    if (order == nullptr) return;

    // §order: where each bucket starts in the longest-first order (buckets counted from the top), then
    // every sequence takes the next place in its bucket
    carry = 0;
    for (int base = 0; base < N_BUCKETS; base += LAYOUT_THREADS) {
        const int r = base + threadIdx.x;                 // r-th bucket from the top
        const int b = N_BUCKETS - 1 - r;
        const int64_t count = r < N_BUCKETS ? bucket_start[b] : 0;
        int64_t tile;
        const int64_t run = block_scan(count, carry, sum_op, warp_sums, tile);
        if (r < N_BUCKETS) bucket_start[b] = static_cast<int>(run - count);   // exclusive
        carry = tile;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_seq; i += LAYOUT_THREADS) {
        const int64_t chunks = cu_chunks[i + 1] - cu_chunks[i];
        order[atomicAdd(&bucket_start[order_bucket(chunks)], 1)] = i;
    }
}

cudaError_t launch_layout(const int64_t* cu_in, int n_seq, int64_t total, int64_t* cu_seqlens, int64_t* cu_chunks,
                           int* seq_order, void* out, int64_t row_bytes, cudaStream_t stream) {
    if (cu_in == nullptr || n_seq <= 0 || row_bytes % 16 != 0) return cudaErrorInvalidValue;
    kda_fwd_layout<<<1, LAYOUT_THREADS, 0, stream>>>(cu_in, n_seq, total, cu_seqlens, cu_chunks, seq_order,
                                                     static_cast<uint4*>(out), row_bytes / 16);
    return cudaGetLastError();
}

}  // namespace kda

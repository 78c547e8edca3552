// kda_fwd_prepare.cu: K1 "prepare". The state-free part of the chunked form (kda_chunk_prep.cuh) for every
// (chunk of 16 tokens, head) of the batch, one record per item left in the workspace for K2 (layout in
// kda_common.cuh), already in K2's shared-memory layout.
//
// One warp per (chunk, head) item, and no synchronisation between warps: a block is just four
// independent warps, each striding over the items with its own scratch (K1Warp).
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_chunk_prep.cuh"
#include "kda_layout.cuh"

namespace kda {

constexpr int K1_WARPS = 4;                 // items per block
constexpr int K1_THREADS = 32 * K1_WARPS;
constexpr int K1_STEP_ITEMS = 2;            // items per warp in one step of a pipeline (launch_prepare)

// §locate: item = chunk * H + head. Which sequence the chunk belongs to (a division for a fixed-length
// batch, a binary search in cu_chunks otherwise), where the chunk starts, and how many of its 16 tokens
// are real.
__device__ __forceinline__ Item locate(const FwdArgs& p, int64_t item) {
    Item it;
    const int64_t chunk = item / p.H;
    it.h = static_cast<int>(item - chunk * p.H);
    int64_t left;
    if (p.seq_len > 0) {
        const int64_t per = chunk_count(p.seq_len), n = chunk / per;
        it.t0 = n * p.seq_len + (chunk - n * per) * CHUNK;
        left = (n + 1) * p.seq_len - it.t0;
    } else {
        const int n = find_sequence(p.cu_chunks, p.n_seq, chunk);
        it.t0 = p.cu_seqlens[n] + (chunk - p.cu_chunks[n]) * CHUNK;
        left = p.cu_seqlens[n + 1] - it.t0;
    }
    it.len = static_cast<int>(left < CHUNK ? left : CHUNK);
    return it;
}

template <GateForm GF, bool FORMS, bool DIMS, int IN>
__global__ void __launch_bounds__(K1_THREADS, 3) kda_fwd_prepare(FwdArgs p) {
    extern __shared__ __align__(16) uint8_t smem_raw[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    K1Warp& sm = reinterpret_cast<K1Warp*>(smem_raw)[warp];
    const int H = p.H;
    const int64_t per_seq = p.seq_len > 0 ? chunk_count(p.seq_len) : 0;
    const int64_t n_chunks = p.seq_len > 0 ? p.n_seq * per_seq : p.cu_chunks[p.n_seq];    // <= max_chunks
    // this launch's items: the chunks [chunk_lo, chunk_hi) of the batch, all heads (one step of a pipeline)
    const int64_t item_end = (p.chunk_hi < n_chunks ? p.chunk_hi : n_chunks) * H;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * K1_WARPS;

    // A warp walks items with a stride of the grid's warps, fetching each next item's loads while it
    // computes the current one (prep_item).
    int64_t item = p.chunk_lo * H + static_cast<int64_t>(blockIdx.x) * K1_WARPS + warp;
    if (item >= item_end) return;                       // the whole warp: nothing below waits for other warps
    Fetched<IN> f;
    f.it = locate(p, item);
    prep_fetch<GF, DIMS, IN>(p, f, lane);
    prep_fetch_qk<FORMS, DIMS, IN>(p, f.it, sm, lane);
#pragma unroll 1
    for (; item < item_end; item += stride) {
        const int64_t next = item + stride;
        prep_item<GF, FORMS, DIMS, IN>(p, f, sm, static_cast<uint8_t*>(p.workspace) + item * REC_BYTES,
                  [&](Item& nx) { if (next >= item_end) return false; nx = locate(p, next); return true; }, lane);
    }
    cp_async_wait<0>();
}

size_t record_bytes() { return REC_BYTES; }

// blocks_per_sm: the form's own, per device, set on its first launch (launch_prepare keeps them: a template's static
// would be one object for every build loaded in a process)
template <GateForm GF, bool FORMS, bool DIMS, int IN>
cudaError_t launch_prepare_form(const FwdArgs& a, bool persistent, int sms, cudaStream_t stream, int* blocks_per_sm) {
    constexpr int smem = K1_WARPS * sizeof(K1Warp);
    int device = 0;
    cudaError_t err = current_device(device);
    if (err != cudaSuccess) return err;
    if (blocks_per_sm[device] == 0) {
        err = cudaFuncSetAttribute(kda_fwd_prepare<GF, FORMS, DIMS, IN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        int bps = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kda_fwd_prepare<GF, FORMS, DIMS, IN>, K1_THREADS, smem);
        blocks_per_sm[device] = bps > 0 ? bps : 1;
    }
    // The grid is the plan's (kda_nb.plan, FwdPlan::k1_persistent): persistent, as many blocks as fit at once on
    // `sms` SMs, each warp striding over the (chunk, head) items; or about two items per warp, so that blocks come
    // and go and K2's blocks of the step before (on their own stream) find room beside them. Either way sized by
    // the bound on the chunks, since the count itself is on the device.
    const int64_t hi = a.chunk_hi < a.max_chunks ? a.chunk_hi : a.max_chunks;
    if (hi <= a.chunk_lo) return cudaSuccess;
    if (persistent && sms <= 0) return cudaErrorInvalidValue;
    const int64_t resident = static_cast<int64_t>(blocks_per_sm[device]) * sms;
    const int64_t needed = ((hi - a.chunk_lo) * a.H + K1_WARPS - 1) / K1_WARPS;
    const int64_t grid = persistent ? (needed < resident ? needed : resident) : (needed + K1_STEP_ITEMS - 1) / K1_STEP_ITEMS;
    kda_fwd_prepare<GF, FORMS, DIMS, IN><<<static_cast<unsigned>(grid), K1_THREADS, smem, stream>>>(a);
    return cudaGetLastError();
}

// the call's form, the inputs' type and the head dims pick the instantiation (kda_switch.h: dispatch_fwd_dims)
cudaError_t launch_prepare(const FwdArgs& a, bool persistent, int sms, cudaStream_t stream) {
    if (a.max_chunks == 0) return cudaSuccess;
    if (!dims_valid(a.dim_k, a.dim_v)) return cudaErrorInvalidValue;
    static int blocks_per_sm[FWD_DIMS_INSTANCES][MAX_DEVICES] = {};     // per instance and device
    return dispatch_fwd_dims(a.gate_form, a.beta_form, a.norm_form, a.group_shift, a.input_kind,
                             native_dims(a.dim_k, a.dim_v), [&](auto gf, auto forms, auto in, auto dims) {
        constexpr int F = decltype(gf)::value, IN = decltype(in)::value;
        constexpr bool FORMS = decltype(forms)::value, DIMS = decltype(dims)::value;
        return launch_prepare_form<static_cast<GateForm>(F), FORMS, DIMS, IN>(
            a, persistent, sms, stream, blocks_per_sm[fwd_dims_instance(F, FORMS, IN, DIMS)]);
    });
}

}  // namespace kda

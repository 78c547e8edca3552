// kda_segment_fixup.cu: the outputs of one long sequence run in passes over segments (kda_nb.segments, *Two passes
// and a fix-up*). The first two passes leave, for every token t of segment p (tokens [cu[p], cu[p + 1]) of the
// flattened token axis) and value head h, its output from a zero entry state o0[t] and the output of the segment's
// transition c[t] (a state started at the identity with zero values), both in fp32 (K2's fp32 outputs,
// kda_recurrence.cuh §out32); the chain of entry states (kda_entry_scan.cu) leaves the state entering the segment,
// E_p [V, K]. The output is then
//   o[t] = o0[t] + E_p c[t]          (rounded once, to the inputs' type)
// with no dependence between tokens. K = V = 128.
//
// One block per (segment p, value head h, slice of ROWS = 64 state rows, span j of SPAN = 256 of the segment's tokens), 4
// warps, so that a long segment's tokens are spread over many blocks (FixupArgs::seg_tokens bounds a segment's tokens:
// ceil(seg_tokens / SPAN) spans; tokens past it in a longer segment are not written): E_p's 64 rows in shared memory
// (every span of the segment reads them, from L2 after the first), and the span's tokens TILE = 32 at a time, c's rows
// of the tile copied into one of two shared buffers (cp.async) while the tile before is summed. Rows of both are
// padded to PAD = 132 floats, so that a warp's fragment reads (8 rows x 4 columns) fall in 32 distinct banks.
// The sums are tensor-core products at about fp32's accuracy: the tile's outputs [32 tokens x 64 rows] are c [32 x K]
// times E^T [K x 64], each warp 16 tokens x 32 rows (four C fragments of mma.sync m16n8k8), every operand split into
// two tf32 parts and three products summed (3xTF32, kda_common.cuh's mma3), K in steps of 8. Each lane adds o0 of its
// fragments' outputs (loaded before the sums, so that its latency hides behind them) and stores them rounded. The
// offsets follow kda_layout.cuh's safe-offset rule (the running maximum of cu[0..p], clamped to [0, L]), so no value
// of cu sends an access outside the tensors; tokens that no segment covers are not written.
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {
namespace fixup {

constexpr int ROWS = 64;                   // state rows of a block
constexpr int WARPS = 4;                   // warp w: tokens 16 (w & 1) .. + 15 of a tile, rows 32 (w >> 1) .. + 31
constexpr int THREADS = 32 * WARPS;
constexpr int TILE = 32;                   // tokens staged at a time
constexpr int SPAN = FIXUP_SPAN;           // 256 tokens a block (kda_launch.h)
static_assert(SPAN % TILE == 0, "whole tiles a span");
constexpr int PAD = D + 4;                 // a padded row of E or c, floats (16-byte aligned for cp.async)
constexpr int SMEM = (ROWS * PAD + 2 * TILE * PAD) * static_cast<int>(sizeof(float));   // 67,584 bytes
static_assert(D == 128 && ROWS == 64 && TILE == 32 && WARPS == 4, "K = V = 128; the warps' tiles cover the block's");

template <int IN>
__global__ void __launch_bounds__(THREADS) kda_segment_fixup(FixupArgs a) {
    extern __shared__ __align__(16) float fix_smem[];
    float* Es = fix_smem;                              // [ROWS][PAD]
    float* cs = fix_smem + ROWS * PAD;                 // [2][TILE][PAD]
    __shared__ int64_t red[WARPS];
    using T = typename In<IN>::T;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t spans = (a.seg_tokens + SPAN - 1) / SPAN, per_head = D / ROWS;
    const int64_t span = blockIdx.x % spans, b = blockIdx.x / spans;
    const int row0 = static_cast<int>(b % per_head) * ROWS;
    const int h = static_cast<int>((b / per_head) % a.HV);
    const int64_t p = b / (per_head * a.HV);
    // §bounds: segment p's tokens [t0, t1), the running maximum of cu[0..p] (clamped at 0) capped at L
    int64_t m = 0;
    for (int64_t j = threadIdx.x; j <= p; j += THREADS) m = max(m, __ldg(a.cu + j));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < WARPS; ++w) m = max(m, red[w]);
    const int64_t s0 = safe_offset(m, a.L), s1 = safe_offset(max(m, __ldg(a.cu + p + 1)), a.L);
    const int64_t end = min(s1, s0 + a.seg_tokens);                   // (a segment's tokens past seg_tokens: not written)
    const int64_t t0 = s0 + span * SPAN, t1 = min(end, t0 + SPAN);    // this block's span of them
    if (t0 >= t1) return;
    const int64_t stride = static_cast<int64_t>(a.HV) * D;    // from one token's row of a head to the next token's
    // c's rows of tokens [tb, tb + TILE) ∩ [t0, t1) into buffer buf, one commit group
    auto stage = [&](int64_t tb, int buf) {
        const int nt = static_cast<int>(t1 - tb < TILE ? t1 - tb : TILE);
        float* dst = cs + buf * TILE * PAD;
        for (int i = threadIdx.x; i < nt * (D / 4); i += THREADS) {
            const int j = i / (D / 4), q4 = i % (D / 4);
            cp_async16(dst + j * PAD + 4 * q4, a.c + (tb + j) * stride + h * D + 4 * q4);
        }
        cp_async_commit();
    };
    stage(t0, 0);
    const float* Ep = a.E + ((p * a.HV + h) * D + row0) * D;
    for (int i = threadIdx.x; i < ROWS * (D / 4); i += THREADS) {
        const int r = i / (D / 4), q4 = i % (D / 4);
        *reinterpret_cast<float4*>(Es + r * PAD + 4 * q4) = __ldg(reinterpret_cast<const float4*>(Ep + r * D + 4 * q4));
    }
    T* out = static_cast<T*>(a.out);
    const int g = lane >> 2, t = lane & 3;                     // the fragments' group and thread in group
    const int m0 = 16 * (warp & 1), r0 = 32 * (warp >> 1);     // the warp's first token of a tile, first row of the slice
    const float* ew = Es + r0 * PAD;
#pragma unroll 1
    for (int64_t tb = t0, it = 0; tb < t1; tb += TILE, ++it) {
        const int buf = static_cast<int>(it & 1), nt = static_cast<int>(t1 - tb < TILE ? t1 - tb : TILE);
        if (tb + TILE < t1) stage(tb + TILE, buf ^ 1);
        else cp_async_commit();                        // (an empty group: the wait below counts the same)
        // o0 at the lane's outputs, before the sums: tokens m0 + g (i = 0) and m0 + g + 8 (i = 1), rows 8 n + 2 t, + 1
        float2 prev[4][2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int tok = m0 + g + 8 * i;
            const int64_t e = (tb + (tok < nt ? tok : 0)) * stride + h * D + row0 + r0 + 2 * t;
#pragma unroll
            for (int n = 0; n < 4; ++n)
                prev[n][i] = tok < nt ? __ldg(reinterpret_cast<const float2*>(a.o0 + e + 8 * n)) : make_float2(0.f, 0.f);
        }
        cp_async_wait<1>();                            // this tile's rows of c have landed (this thread's copies)
        __syncthreads();                               // (and everyone's; E staged)
        // rows of c past the tile's nt tokens hold what an earlier tile left: their outputs (rows of C) are not stored
        const float* cw = cs + buf * TILE * PAD + m0 * PAD;
        float acc[4][4] = {};
#pragma unroll 4
        for (int k = 0; k < D; k += 8) {
            uint32_t ah[4], al[4];
            split_tf32(cw[g * PAD + k + t], ah[0], al[0]);
            split_tf32(cw[(g + 8) * PAD + k + t], ah[1], al[1]);
            split_tf32(cw[g * PAD + k + t + 4], ah[2], al[2]);
            split_tf32(cw[(g + 8) * PAD + k + t + 4], ah[3], al[3]);
#pragma unroll
            for (int n = 0; n < 4; ++n) {               // B = E^T: (k = t, n = g) is E's row 8 n + g, column k + t
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(ew[(8 * n + g) * PAD + k + t], bh0, bl0);
                split_tf32(ew[(8 * n + g) * PAD + k + t + 4], bh1, bl1);
                mma3(acc[n], ah, al, bh0, bl0, bh1, bl1);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int tok = m0 + g + 8 * i;
            if (tok < nt) {
                const int64_t e = (tb + tok) * stride + h * D + row0 + r0 + 2 * t;
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    out[e + 8 * n] = In<IN>::round(prev[n][i].x + acc[n][2 * i]);
                    out[e + 8 * n + 1] = In<IN>::round(prev[n][i].y + acc[n][2 * i + 1]);
                }
            }
        }
        __syncthreads();                               // the tile's buffer is read before the next stage refills it
    }
}

// whether the shared-memory attribute of each instance is set, per device (a variable of the file: see
// kda_fwd_recurrence.cu's k2_attribute_set)
namespace { bool attribute_set[2][MAX_DEVICES] = {}; }

}  // namespace fixup

cudaError_t launch_segment_fixup(const FixupArgs& a, cudaStream_t stream) {
    if (a.P <= 0 || a.L <= 0 || a.HV <= 0 || a.seg_tokens <= 0) return cudaSuccess;
    const int64_t blocks = a.P * a.HV * (D / fixup::ROWS) * ((a.seg_tokens + fixup::SPAN - 1) / fixup::SPAN);
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    int device = 0;
    const cudaError_t err = current_device(device);
    if (err != cudaSuccess) return err;
    return dispatch_input(a.input_kind, [&](auto in) {
        constexpr int I = decltype(in)::value;
        bool& ready = fixup::attribute_set[I][device];
        if (!ready) {
            const cudaError_t e = cudaFuncSetAttribute(fixup::kda_segment_fixup<I>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       fixup::SMEM);
            if (e != cudaSuccess) return e;
            ready = true;
        }
        fixup::kda_segment_fixup<I><<<static_cast<unsigned>(blocks), fixup::THREADS, fixup::SMEM, stream>>>(a);
        return cudaGetLastError();
    });
}

}  // namespace kda

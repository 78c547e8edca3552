// kda_bwd_states.cu: the two sequential passes of the backward (kda_nb.backward's chunk_states and
// chunk_state_adjoint), one block per (sequence, head, slice of state rows) walking that sequence's chunks;
// everything between them (the chunk factors before, the token-parallel adjoint after) runs over all chunks at once.
//
// Chunks sit in step-major rows, as kda_nb.backward lays them out: sequences sorted by chunk count (most
// first), row step_off[i] + n holds chunk i of sorted sequence n, which has chunks[n] chunks. The state is
// [V][K] (S^T of the math), fp32, with the head dimension K = V = 128. Rows of the state never mix (each row's
// update reads only that row), so a block owns a slice of VB = 64 rows, blockIdx.z, and each group of 16 of them is
// held by KS warps (the k-split, §ksplit: each warp 16 rows by 128 / KS columns), in registers as the C fragments of
// mma.sync (as K2 holds the forward's state, kda_recurrence.cuh).
// Per chunk:
//
//   forward  (kda_bwd_states):   Sc = S;  R = V - kd S^T;  U = INVb R;  S <- S diag(decay) + U^T kr
//   backward (kda_bwd_dstates):  dSo = dS;  dU += kr dS^T;  dR = INVb^T dU;
//                                dS <- dS diag(decay) + dP^T qd - dR^T kd
//
// Every product runs on the tensor cores in tf32 (m16n8k8: fp32's range, an 11-bit significand, each operand
// rounded to nearest), accumulating in fp32. The chunk tiles qd, kd and kr come from kda_bwd_prepare in fp16 (their
// values are at most 1 in size, and fp16 has tf32's significand: half the bytes of fp32 tiles, and the same operands
// but at ties and below fp16's normal range, under 6e-5); INVb comes rounded to tf32. The values and the upstream
// gradient are read from the caller's own tensors (v in the inputs' type, bf16 or fp16; dO in that type or fp32;
// [tokens, H, 128]) through the rows' token table, the way kda_bwd_prepare reads them, with no copy in between.
// §input: the inputs' type IN is both passes' template parameter, and reaches only slice_in, where v's and a 16-bit
// dO's elements are widened to fp32 (exact for both types) as they become C fragments: V - kd S^T and scale dO are then
// rounded to tf32 as operands, the same instructions for either type. The fragments made here (the state, R, U, dU,
// dR) are rounded as they become operands. The products' results become the next product's left operand without
// leaving registers: a C fragment (rows g, g + 8; columns 2t, 2t + 1) is, permuted, an A fragment whose k-slots t and
// t + 4 stand for columns 2t and 2t + 1, and the right operand is read from shared memory in the same order (b0 =
// column 2t, b1 = column 2t + 1). The tiles arrive in shared memory through NSTAGE stages (cp.async), each tile's rows
// padded so that the warp's reads hit 32 different banks.
#include "kda_common.cuh"
#include "kda_layout.cuh"

namespace kda {
namespace bwd {

constexpr int ROW_WARPS = 4;                // warps along the block's state rows, 16 rows each
constexpr int VB = 16 * ROW_WARPS;          // state rows per block
constexpr int SLICES = D / VB;              // blocks per (sequence, head)
constexpr int NSTAGE = 3;                   // chunks in flight: this one and the next two
// KS warps share each group of 16 state rows, each owning D / KS of its columns (the k-split): a chunk's products
// over k (S kd^T, dS kr^T) add KS partial sums through shared memory, and each warp updates its own columns. KS = 1 is
// one warp per 16 rows; the library runs KS = 2 (kda_nb.backward_kernels.PASS_KSPLIT), eight warps a block: on the H200
// (backward alone, bf16 states and gradients) 3% faster than KS = 1 at T = 8192, H = 64 and 9% at one sequence of
// 32768, H = 32. KS = 4 (16 warps) is slower than KS = 2 in both: the exchange and the barriers of 16 warps cost more
// than the latency they hide.
template <int KS> struct Split {
    static constexpr int WARPS = ROW_WARPS * KS, THREADS = 32 * WARPS;
    static constexpr int NJ = 16 / KS;       // 8-column blocks of the state a warp holds
    static constexpr int KW = D / KS;        // state columns a warp holds
    static constexpr int OUT_LD = KW + 8;    // a warp's 16 rows of a bf16 state on their way out (stmatrix)
    static constexpr int OUT_BYTES = WARPS * 16 * OUT_LD * 2;
    static constexpr int XCH_BYTES = KS > 1 ? WARPS * 32 * 8 * 4 : 0;   // each lane's 8 partial sums, per warp
    static constexpr int MIN_BLOCKS = 2;     // registers for a block of each pass side by side on an SM
};
// Padded rows in shared memory, in elements. An fp16 tile, read either as pairs of neighbouring channels of one token a
// lane (lanes g apart a row apart) or as one channel of two tokens 2t and 2t + 1 (lanes t apart two rows apart), has
// rows of 136 halves: 272 bytes, whole 16-byte pieces for cp.async, and 4g + t (pairs) or 8t + g / 2 (single halves, two
// lanes a word) different words of a warp's read.
constexpr int LDH = D + 8;
constexpr int LDS_PAIR = CHUNK + 8, LDS_COL = CHUNK + 4;   // INVb, read either way
constexpr int LDV = VB + 4;                 // the block's slice of an fp32 tile read by state row (dU; fp32 dO)
constexpr int LDVH = VB + 8;                // the same of a 16-bit one (v, bf16 dO): 144-byte rows

using kda::StatesArgs;
using kda::DStatesArgs;

// one stage of each pass, in bytes (every piece a multiple of 16)
struct StatesStage {
    static constexpr int KD = 0, KR = KD + CHUNK * LDH * 2, INVB = KR + CHUNK * LDH * 2,
                         DECAY = INVB + CHUNK * LDS_PAIR * 4, V = DECAY + D * 4, BYTES = V + CHUNK * LDVH * 2;
};
struct DStatesStage {
    static constexpr int KR = 0, QD = KR + CHUNK * LDH * 2, KD = QD + CHUNK * LDH * 2, INVB = KD + CHUNK * LDH * 2,
                         DECAY = INVB + CHUNK * LDS_COL * 4, DO = DECAY + D * 4, DU = DO + CHUNK * LDV * 4,
                         BYTES = DU + CHUNK * LDV * 4;
};
static_assert(StatesStage::BYTES % 16 == 0 && DStatesStage::BYTES % 16 == 0 && StatesStage::V % 16 == 0 &&
              DStatesStage::DO % 16 == 0 && DStatesStage::DU % 16 == 0 && (LDH * 2) % 16 == 0 && (LDVH * 2) % 16 == 0 &&
              (LDV * 4) % 16 == 0, "16-byte aligned tiles and rows");

// §copies: COLS columns of ROWS rows of src (rows SRC_LD elements of EB bytes apart), from element col0 on, into dst (rows
// LD elements apart): whole 16-byte pieces, piece e by thread e % THREADS. The shape is a compile-time constant, so each
// thread's pieces and their offsets are too: no loop to count and no division each chunk, and the offsets can be made
// once before the chunks' loop.
template <int THREADS, int ROWS, int COLS, int EB, int LD, int SRC_LD>
__device__ __forceinline__ void copy_rows(void* dst, const void* src, int64_t col0) {
    constexpr int PER = COLS * EB / 16, PIECES = ROWS * PER;
    static_assert(COLS * EB % 16 == 0 && (LD * EB) % 16 == 0, "whole 16-byte pieces into 16-byte rows");
#pragma unroll
    for (int k = 0; k < (PIECES + THREADS - 1) / THREADS; ++k) {
        const int e = threadIdx.x + k * THREADS;
        if (PIECES % THREADS == 0 || e < PIECES) {
            const int r = e / PER, q = e % PER;
            cp_async16(static_cast<unsigned char*>(dst) + (r * LD * EB + 16 * q),
                       static_cast<const unsigned char*>(src) + col0 * EB + (static_cast<int64_t>(r) * SRC_LD * EB + 16 * q));
        }
    }
}
// the block's VB columns from col0 of the chunk's token rows of a caller's [tokens, H, 128] tensor (elements of EB bytes,
// the base 16-byte aligned) into dst [CHUNK][LD]: tokens tok0 .. tok0 + len - 1, rows past len zero (a copy of none of
// the chunk's own first row's bytes: nothing outside the chunk is read)
template <int THREADS, int EB, int LD>
__device__ __forceinline__ void copy_token_rows(void* dst, const void* src, int64_t tok0, int len, int h, int H, int col0) {
    constexpr int PER = VB * EB / 16, PIECES = CHUNK * PER;
#pragma unroll
    for (int k = 0; k < (PIECES + THREADS - 1) / THREADS; ++k) {
        const int e = threadIdx.x + k * THREADS;
        if (PIECES % THREADS == 0 || e < PIECES) {
            const int i = e / PER, q = e % PER;
            const int64_t tok = tok0 + (i < len ? i : 0);
            cp_async16(static_cast<unsigned char*>(dst) + (i * LD * EB + 16 * q),
                       static_cast<const unsigned char*>(src) + ((tok * H + h) * D + col0) * EB + 16 * q, i < len ? 16 : 0);
        }
    }
}

// §fragments: a C fragment as the A fragment of the next product, k-slot t <-> column 2t, t + 4 <-> 2t + 1
__device__ __forceinline__ void a_from_c(const float (&c)[4], uint32_t (&a)[4], float sign = 1.f) {
    a[0] = tf32_op(sign * c[0]); a[1] = tf32_op(sign * c[2]); a[2] = tf32_op(sign * c[1]); a[3] = tf32_op(sign * c[3]);
}

// out^T[v][token] = sum_k X[v][k] T[token][k] over the warp's NJ column blocks (T already at the warp's first column)
// for its 16 rows v (two C tiles, tokens 0-7 and 8-15), T an fp16 [CHUNK][LDH] tile; two chains over k (even and odd
// blocks) halve the dependent latency. The right operands come four at a time by ldmatrix: 8x8 matrices (tokens,
// channels) of which lane l gets token l / 4, channels 2 (l % 4) and + 1, the pair that k-slots t and t + 4 stand for.
template <int NJ>
__device__ __forceinline__ void rows_times_tile(const float (&X)[NJ][4], const __half* T, int lane, float (&out)[2][4]) {
    static_assert(NJ % 2 == 0, "column blocks in pairs");
    const int m = lane >> 3, r = lane & 7;                     // the matrix this lane addresses a row of, and the row
    const __half* at = T + (8 * (m & 1) + r) * LDH + 8 * (m >> 1);   // matrices (tokens 0-7, j), (8-15, j), (0-7, j+1), (8-15, j+1)
    float acc[2][2][4] = {};
#pragma unroll
    for (int j = 0; j < NJ; j += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, at + 8 * j);
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            uint32_t a[4];
            a_from_c(X[j + jj], a);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&b[2 * jj + nt]));
                mma_tf32(acc[jj][nt], a, __float_as_uint(f.x), __float_as_uint(f.y));
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[nt][e] = acc[0][nt][e] + acc[1][nt][e];
}

// §ksplit: the full sum over k of the KS warps' partial products `part` (the warps of one row group: warp rg + 4 kh),
// in the same order in every warp (the same bits), in two halves: publish_k leaves this warp's part in shared memory,
// gather_k waits for the group's KS warps (a named barrier, 1 + rg) and adds their parts. Work that needs no sum runs
// between the two, so that a warp waits at the barrier only for what its partner has not yet published (run back to
// back, the two halves make the passes' chains wait there every chunk).
template <int KS>
__device__ __forceinline__ void publish_k(const float (&part)[2][4], float* xch, int rg, int kh, int lane) {
    if constexpr (KS > 1) {
        float4* mine = reinterpret_cast<float4*>(xch + ((kh * ROW_WARPS + rg) * 32 + lane) * 8);
        mine[0] = make_float4(part[0][0], part[0][1], part[0][2], part[0][3]);
        mine[1] = make_float4(part[1][0], part[1][1], part[1][2], part[1][3]);
    }
}
template <int KS>
__device__ __forceinline__ void gather_k(float (&part)[2][4], const float* xch, int rg, int kh, int lane) {
    if constexpr (KS > 1) {
        asm volatile("bar.sync %0, %1;" :: "r"(1 + rg), "r"(32 * KS) : "memory");
        float sum[2][4] = {};
#pragma unroll
        for (int o = 0; o < KS; ++o) {
            float other[2][4];
            if (o == kh) {
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) other[nt][e] = part[nt][e];
            } else {
                const float4* theirs = reinterpret_cast<const float4*>(xch + ((o * ROW_WARPS + rg) * 32 + lane) * 8);
                const float4 x0 = theirs[0], x1 = theirs[1];
                other[0][0] = x0.x; other[0][1] = x0.y; other[0][2] = x0.z; other[0][3] = x0.w;
                other[1][0] = x1.x; other[1][1] = x1.y; other[1][2] = x1.z; other[1][3] = x1.w;
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sum[nt][e] += other[nt][e];
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[nt][e] = sum[nt][e];
    }
}

// out^T[v][token] = sum_e Y^T[v][e] INVb[token][e] (TRANS = false: U = INVb R), or sum_e Y^T[v][e] INVb[e][token]
// (TRANS: dR = INVb^T dU); INVb padded to LDS_PAIR (false) or LDS_COL (TRANS)
template <bool TRANS>
__device__ __forceinline__ void times_invb(const float (&Y)[2][4], const float* invb, int lane, float (&out)[2][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[nt][e] = 0.f;
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
        uint32_t a[4];
        a_from_c(Y[kb], a);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            float b0, b1;
            if constexpr (TRANS) {
                b0 = invb[(8 * kb + 2 * t) * LDS_COL + 8 * nt + g];
                b1 = invb[(8 * kb + 2 * t + 1) * LDS_COL + 8 * nt + g];
            } else {
                const float2 b = *reinterpret_cast<const float2*>(invb + (8 * nt + g) * LDS_PAIR + 8 * kb + 2 * t);
                b0 = b.x; b1 = b.y;
            }
            mma_tf32(out[nt], a, __float_as_uint(b0), __float_as_uint(b1));
        }
    }
}

// S[v][k] += sum_token A[v][token] T[token][k] over the warp's NJ column blocks, A as two A fragments (tokens 0-7,
// 8-15) in a_from_c's order, T an fp16 [CHUNK][LDH] tile (already at the warp's first column). The right operands come
// four at a time by ldmatrix.trans: of an 8x8 matrix (tokens, channels) lane l gets tokens 2 (l % 4) and + 1 of
// channel l / 4, the pair that k-slots t and t + 4 stand for.
template <int NJ>
__device__ __forceinline__ void add_rows_product(float (&S)[NJ][4], const uint32_t (&a)[2][4], const __half* T, int lane) {
    static_assert(NJ % 2 == 0, "column blocks in pairs");
    const int m = lane >> 3, r = lane & 7;
    const __half* at = T + (8 * (m & 1) + r) * LDH + 8 * (m >> 1);   // matrices (tokens 0-7, j), (8-15, j), (0-7, j+1), (8-15, j+1)
#pragma unroll
    for (int j = 0; j < NJ; j += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, at + 8 * j);
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
            for (int kb = 0; kb < 2; ++kb) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&b[2 * jj + kb]));
                mma_tf32(S[j + jj], a[kb], __float_as_uint(f.x), __float_as_uint(f.y));
            }
    }
}

// the warp's 16 rows and NJ column blocks of a state, [V][K] fp32, from or to global memory at `base` (the state's row
// vrow, the warp's first column)
template <int NJ>
__device__ __forceinline__ void load_rows(const float* base, int lane, float (&S)[NJ][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const float2 lo = *reinterpret_cast<const float2*>(base + g * D + 8 * j + 2 * t);
        const float2 hi = *reinterpret_cast<const float2*>(base + (g + 8) * D + 8 * j + 2 * t);
        S[j][0] = lo.x; S[j][1] = lo.y; S[j][2] = hi.x; S[j][3] = hi.y;
    }
}
template <int NJ>
__device__ __forceinline__ void store_rows_fp32(float* base, int lane, const float (&S)[NJ][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        *reinterpret_cast<float2*>(base + g * D + 8 * j + 2 * t) = make_float2(S[j][0], S[j][1]);
        *reinterpret_cast<float2*>(base + (g + 8) * D + 8 * j + 2 * t) = make_float2(S[j][2], S[j][3]);
    }
}
// the state leaving or entering a chunk, as the adjoint reads it: bf16 through the warp's staging tile (stmatrix,
// then 16-byte stores), or fp32 straight from the fragments; `off` is the warp's first row and column
template <int KS>
__device__ __forceinline__ void store_state(void* out, bool bf16, int64_t off, const float (&S)[Split<KS>::NJ][4],
                                            __nv_bfloat16* stage, int lane) {
    using Sp = Split<KS>;
    if (!bf16) { store_rows_fp32<Sp::NJ>(static_cast<float*>(out) + off, lane, S); return; }
    __syncwarp();                                             // the warp is done with the last chunk's copy
    const int m = lane >> 3, r = (lane & 7) + 8 * (m & 1);
#pragma unroll
    for (int j = 0; j < Sp::NJ; j += 2)
        stmatrix_x4(stage + r * Sp::OUT_LD + 8 * j + 8 * (m >> 1), pack_bf16(S[j][0], S[j][1]), pack_bf16(S[j][2], S[j][3]),
                    pack_bf16(S[j + 1][0], S[j + 1][1]), pack_bf16(S[j + 1][2], S[j + 1][3]));
    __syncwarp();
    __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(out) + off;
    constexpr int PIECES = Sp::KW / 8;                        // 16-byte pieces in a row of the warp's columns
#pragma unroll
    for (int i = 0; i < 16 * PIECES / 32; ++i) {
        const int e = lane + 32 * i, row = e / PIECES, piece = e % PIECES;
        *reinterpret_cast<uint4*>(dst + row * D + 8 * piece) = *reinterpret_cast<const uint4*>(stage + row * Sp::OUT_LD + 8 * piece);
    }
}

// X^T[v][token] for tokens 8 nt .. 8 nt + 7 (one C tile) into a [CHUNK][D] fp32 tile at `tile`, column vrow + v
__device__ __forceinline__ void store_tile_t(float* tile, int vrow, int lane, int nt, const float (&X)[4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 4; ++e) tile[(8 * nt + 2 * t + (e & 1)) * D + vrow + g + 8 * (e >> 1)] = X[e];
}
// two [16 rows x 16 tokens] results, X0 and X1, into their tiles: each of the four C tiles by one of the row group's KS warps
template <int KS>
__device__ __forceinline__ void store_pair_t(float* tile0, const float (&X0)[2][4], float* tile1, const float (&X1)[2][4],
                                             int vrow, int kh, int lane) {
#pragma unroll
    for (int item = 0; item < 4; ++item)
        if (item % KS == kh) {
            const int nt = item & 1;
            if (item < 2) store_tile_t(tile0, vrow, lane, nt, X0[nt]);
            else store_tile_t(tile1, vrow, lane, nt, X1[nt]);
        }
}
// element (nt, e) of a C fragment pair (rows: the warp's 16 state rows from vl; columns: tokens) from the block's slice
// of a [CHUNK][ld] fp32 tile in shared memory
__device__ __forceinline__ int slice_index(int ld, int vl, int lane, int nt, int e) {
    const int g = lane >> 2, t = lane & 3;
    return (8 * nt + 2 * t + (e & 1)) * ld + vl + g + 8 * (e >> 1);
}
// the same C fragment pair of a bf16 [CHUNK][LDVH] tile (v, dO) by one ldmatrix.trans: of the 8x8 matrix (tokens 8 nt ..,
// state rows vl + 8 cb ..) lane 4g + t gets tokens 2t and 2t + 1 of row g, elements (nt, 2 cb) and (nt, 2 cb + 1); a
// bf16 is the top half of its fp32. (Eight 2-byte reads a lane, each with its address arithmetic, would be about a
// tenth of the backward pass's instructions.) slice_in: the same of a tile of the inputs' type IN (bf16 or fp16, whose
// halves are widened by the conversion instruction).
__device__ __forceinline__ void slice_bf16(const __nv_bfloat16* tile, int vl, int lane, float (&x)[2][4]) {
    const int m = lane >> 3, r = lane & 7;                     // matrices (nt, cb): (0, 0), (0, 1), (1, 0), (1, 1)
    uint32_t b[4];
    ldmatrix_x4_trans(b, tile + (8 * (m >> 1) + r) * LDVH + vl + 8 * (m & 1));
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int cb = 0; cb < 2; ++cb) {
            const uint32_t w = b[2 * nt + cb];
            x[nt][2 * cb] = bf16_lo(w);
            x[nt][2 * cb + 1] = bf16_hi(w);
        }
}
template <int IN>
__device__ __forceinline__ void slice_in(const void* tile, int vl, int lane, float (&x)[2][4]) {
    if constexpr (IN == INPUT_BF16) slice_bf16(static_cast<const __nv_bfloat16*>(tile), vl, lane, x);
    else {
        const int m = lane >> 3, r = lane & 7;
        uint32_t b[4];
        ldmatrix_x4_trans(b, static_cast<const __half*>(tile) + (8 * (m >> 1) + r) * LDVH + vl + 8 * (m & 1));
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int cb = 0; cb < 2; ++cb) {
                const float2 f = In<IN>::unpack(b[2 * nt + cb]);
                x[nt][2 * cb] = f.x;
                x[nt][2 * cb + 1] = f.y;
            }
    }
}

// §ahead: the step-major row of each chunk and its tokens, read from global memory an iteration or two before their use,
// so that the chunk's copies and stores never wait for these dependent loads. Iteration `it` works on chunk `it` of the
// pass's order (`chunk_of`), copies chunk it + 2 in, reads chunk it + 3's tokens and chunk it + 4's step offset. That
// offset is kept as read and becomes a row (+ n) only in the next iteration: a row made where it is read makes each
// iteration wait there for the load (at one sequence of 32768, H = 32, an eighth of the warps' stall samples in both
// passes fell on that one add).
struct Ahead {
    int64_t r0, r1, r2;         // the rows of the pass's chunks it .. it + 2
    int64_t s3;                 // chunk it + 3's step offset, as read (its row is s3 + n)
    int64_t t2;                 // chunk it + 2's first token and length
    int l2;
};
template <class ChunkOf>
__device__ __forceinline__ int64_t offset_of(const int64_t* step_off, int cnt, int it, ChunkOf chunk_of) {
    return it < cnt ? step_off[chunk_of(it)] : 0;
}
template <class ChunkOf>
__device__ __forceinline__ void ahead_start(Ahead& a, const int64_t* step_off, const int64_t* row_tok, const int* row_len,
                                            int n, int cnt, ChunkOf chunk_of) {
    a.r0 = offset_of(step_off, cnt, 0, chunk_of) + n; a.r1 = offset_of(step_off, cnt, 1, chunk_of) + n;
    a.r2 = offset_of(step_off, cnt, 2, chunk_of) + n; a.s3 = offset_of(step_off, cnt, 3, chunk_of);
    a.t2 = 2 < cnt ? row_tok[a.r2] : 0; a.l2 = 2 < cnt ? row_len[a.r2] : 0;
}
template <class ChunkOf>
__device__ __forceinline__ void ahead_next(Ahead& a, const int64_t* step_off, const int64_t* row_tok, const int* row_len,
                                           int n, int cnt, int it, ChunkOf chunk_of) {
    a.r0 = a.r1; a.r1 = a.r2; a.r2 = a.s3 + n;
    a.t2 = it + 3 < cnt ? row_tok[a.r2] : 0; a.l2 = it + 3 < cnt ? row_len[a.r2] : 0;
    a.s3 = offset_of(step_off, cnt, it + 4, chunk_of);
}

// §states: the forward's loop again, keeping each chunk's entering state, R and U
template <int KS, int IN>
__global__ void __launch_bounds__(Split<KS>::THREADS, Split<KS>::MIN_BLOCKS) kda_bwd_states(StatesArgs p) {
    extern __shared__ __align__(16) unsigned char smem[];
    using St = StatesStage;
    using Sp = Split<KS>;
    constexpr int NJ = Sp::NJ;
    const int n = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rg = warp % ROW_WARPS, kh = warp / ROW_WARPS;       // the warp's row group and its part of the columns
    const int H = p.heads, nch = p.chunks[n];
    const int lo = p.step_lo, top = min(p.step_hi, nch), cnt = top - lo;   // this launch's chunks of the sequence (§segments)
    if (cnt <= 0) return;                                        // none: nothing is read or written
    const int vl = 16 * rg, vrow = VB * blockIdx.z + vl, c0 = Sp::KW * kh;   // rows: in the block's slice, in the state
    __nv_bfloat16* stage_out = reinterpret_cast<__nv_bfloat16*>(smem + NSTAGE * St::BYTES) + warp * 16 * Sp::OUT_LD;
    float* xch = reinterpret_cast<float*>(smem + NSTAGE * St::BYTES + Sp::OUT_BYTES);
    float S[NJ][4];
    auto s_at = [&]() { return p.s0 + (static_cast<int64_t>(n) * H + h) * D * D + vrow * D + c0; };   // (made twice: no register held)
    load_rows<NJ>(s_at(), lane, S);                              // the initial state, or the last launch's end
    static_assert(NSTAGE == 3, "Ahead reads two chunks ahead of the copies");
    auto chunk_of = [lo](int it) { return lo + it; };
    auto load = [&](int i, int64_t row, int64_t tok, int len) {   // chunk i into its stage; one commit group a call
        if (i < cnt) {
            unsigned char* st = smem + (i % NSTAGE) * St::BYTES;
            const int64_t rh = row * H + h;                           // (row, head)
            copy_rows<Sp::THREADS, CHUNK, D, 2, LDH, D>(st + St::KD, p.kd, rh * TILE);
            copy_rows<Sp::THREADS, CHUNK, D, 2, LDH, D>(st + St::KR, p.kr, rh * TILE);
            copy_rows<Sp::THREADS, CHUNK, CHUNK, 4, LDS_PAIR, CHUNK>(st + St::INVB, p.invb, rh * SMALL);
            copy_rows<Sp::THREADS, 1, D, 4, D, D>(st + St::DECAY, p.decay, rh * D);
            copy_token_rows<Sp::THREADS, 2, LDVH>(st + St::V, p.v, tok, len, h, H, VB * blockIdx.z);
        }
        cp_async_commit();
    };
    Ahead a;
    ahead_start(a, p.step_off, p.row_tok, p.row_len, n, cnt, chunk_of);
    load(0, a.r0, 0 < cnt ? p.row_tok[a.r0] : 0, 0 < cnt ? p.row_len[a.r0] : 0);
    load(1, a.r1, 1 < cnt ? p.row_tok[a.r1] : 0, 1 < cnt ? p.row_len[a.r1] : 0);
    for (int i = 0; i < cnt; ++i) {
        cp_async_wait<NSTAGE - 2>();                            // chunk i has landed (this thread's copies)
        __syncthreads();                                         // everyone's; and chunk i - 1's stage is free
        load(i + NSTAGE - 1, a.r2, a.t2, a.l2);
        const unsigned char* st = smem + (i % NSTAGE) * St::BYTES;
        const int64_t rh = a.r0 * H + h;
        ahead_next(a, p.step_off, p.row_tok, p.row_len, n, cnt, i, chunk_of);
        store_state<KS>(p.sc, p.sc_bf16, (rh * D + vrow) * D + c0, S, stage_out, lane);   // the state entering chunk i
        float W[2][4], R[2][4], U[2][4];
        rows_times_tile<NJ>(S, reinterpret_cast<const __half*>(st + St::KD) + c0, lane, W);   // (S kd^T)[v][token], own k
        publish_k<KS>(W, xch, rg, kh, lane);
        slice_in<IN>(st + St::V, vl, lane, R);                                              // V
        apply_decay<NJ>(S, reinterpret_cast<const float*>(st + St::DECAY) + c0, lane);     // S diag(decay): needs no sum
        gather_k<KS>(W, xch, rg, kh, lane);                                                   // all of k
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) R[nt][e] -= W[nt][e];
        times_invb<false>(R, reinterpret_cast<const float*>(st + St::INVB), lane, U);   // U = INVb R
        store_pair_t<KS>(p.r + rh * TILE, R, p.u + rh * TILE, U, vrow, kh, lane);
        uint32_t au[2][4];
        a_from_c(U[0], au[0]);
        a_from_c(U[1], au[1]);
        add_rows_product<NJ>(S, au, reinterpret_cast<const __half*>(st + St::KR) + c0, lane);   // S <- S diag(decay) + U^T kr
    }
    cp_async_wait<0>();
    if (p.step_hi < p.chunks[n]) store_rows_fp32<NJ>(s_at(), lane, S);   // the state entering chunk step_hi, for the next launch
}

// §dstates: the loop backwards, dS from the last chunk to the first
// §entry: ENTRY, the entering states' gradient alone (DStatesArgs::entry_only): the same loop with the same arithmetic,
// without its three stores per chunk (dS leaving the chunk, all of dU, dR), so that the pass writes only ds0 (and
// ds_final between launches) and leaves du as the chunk factors made it. What the gradient in segments asks of its
// segments first (kda_nb.segments.gradient_in_segments): each one's entry gradient from its own outputs.
template <int KS, int IN, bool ENTRY = false>
__global__ void __launch_bounds__(Split<KS>::THREADS, Split<KS>::MIN_BLOCKS) kda_bwd_dstates(DStatesArgs p) {
    extern __shared__ __align__(16) unsigned char smem[];
    using St = DStatesStage;
    using Sp = Split<KS>;
    constexpr int NJ = Sp::NJ;
    const int n = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rg = warp % ROW_WARPS, kh = warp / ROW_WARPS;
    const int H = p.heads, nch = p.chunks[n];
    const int lo = p.step_lo, top = min(p.step_hi, nch), cnt = max(top - lo, 0);   // this launch's chunks (§segments)
    if (cnt == 0 && lo > 0) return;                              // none, and not the first chunks: nothing to do
    const int vl = 16 * rg, vrow = VB * blockIdx.z + vl, c0 = Sp::KW * kh;
    __nv_bfloat16* stage_out = reinterpret_cast<__nv_bfloat16*>(smem + NSTAGE * St::BYTES) + warp * 16 * Sp::OUT_LD;
    float* xch = reinterpret_cast<float*>(smem + NSTAGE * St::BYTES + Sp::OUT_BYTES);
    const int64_t s_off = (static_cast<int64_t>(n) * H + h) * D * D + vrow * D + c0;
    float dS[NJ][4];
    load_rows<NJ>(p.ds_final + s_off, lane, dS);                // dS leaving the last chunk, or the last launch's end
    auto chunk_of = [top](int it) { return top - 1 - it; };     // the it-th chunk from the last of this launch
    auto load = [&](int it, int64_t row, int64_t tok, int len) {
        if (it < cnt) {
            unsigned char* st = smem + (it % NSTAGE) * St::BYTES;
            const int64_t rh = row * H + h;
            copy_rows<Sp::THREADS, CHUNK, D, 2, LDH, D>(st + St::KR, p.kr, rh * TILE);
            copy_rows<Sp::THREADS, CHUNK, D, 2, LDH, D>(st + St::QD, p.qd, rh * TILE);
            copy_rows<Sp::THREADS, CHUNK, D, 2, LDH, D>(st + St::KD, p.kd, rh * TILE);
            copy_rows<Sp::THREADS, CHUNK, CHUNK, 4, LDS_COL, CHUNK>(st + St::INVB, p.invb, rh * SMALL);
            copy_rows<Sp::THREADS, 1, D, 4, D, D>(st + St::DECAY, p.decay, rh * D);
            if (p.dout && p.dout_fp32) copy_token_rows<Sp::THREADS, 4, LDV>(st + St::DO, p.dout, tok, len, h, H, VB * blockIdx.z);
            if (p.dout && !p.dout_fp32) copy_token_rows<Sp::THREADS, 2, LDVH>(st + St::DO, p.dout, tok, len, h, H, VB * blockIdx.z);
            copy_rows<Sp::THREADS, CHUNK, VB, 4, LDV, D>(st + St::DU, p.du, rh * TILE + VB * blockIdx.z);
        }
        cp_async_commit();
    };
    Ahead a;
    ahead_start(a, p.step_off, p.row_tok, p.row_len, n, cnt, chunk_of);
    load(0, a.r0, 0 < cnt ? p.row_tok[a.r0] : 0, 0 < cnt ? p.row_len[a.r0] : 0);
    load(1, a.r1, 1 < cnt ? p.row_tok[a.r1] : 0, 1 < cnt ? p.row_len[a.r1] : 0);
    for (int it = 0; it < cnt; ++it) {
        cp_async_wait<NSTAGE - 2>();
        __syncthreads();
        load(it + NSTAGE - 1, a.r2, a.t2, a.l2);
        const unsigned char* st = smem + (it % NSTAGE) * St::BYTES;
        const int64_t rh = a.r0 * H + h;
        ahead_next(a, p.step_off, p.row_tok, p.row_len, n, cnt, it, chunk_of);
        if constexpr (!ENTRY) store_state<KS>(p.dso, p.sc_bf16, (rh * D + vrow) * D + c0, dS, stage_out, lane);   // dS leaving chunk i
        float dU[2][4];
        rows_times_tile<NJ>(dS, reinterpret_cast<const __half*>(st + St::KR) + c0, lane, dU);   // (dS kr^T)[v][token], own k
        publish_k<KS>(dU, xch, rg, kh, lane);
        // what needs no sum over k, while the row group's other warps publish theirs: dS diag(decay) + dP^T qd, dP^T as A
        // fragments in a_from_c's token order (dP = scale dO, rounded to tf32 as an operand; zero without dO)
        {
            float dp[2][4] = {};
            if (p.dout) {
                if (p.dout_fp32) {
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) dp[nt][e] = reinterpret_cast<const float*>(st + St::DO)[slice_index(LDV, vl, lane, nt, e)];
                } else {
                    slice_in<IN>(st + St::DO, vl, lane, dp);
                }
            }
            uint32_t ap[2][4];
            a_from_c(dp[0], ap[0], p.scale);
            a_from_c(dp[1], ap[1], p.scale);
            apply_decay<NJ>(dS, reinterpret_cast<const float*>(st + St::DECAY) + c0, lane);
            add_rows_product<NJ>(dS, ap, reinterpret_cast<const __half*>(st + St::QD) + c0, lane);   // + dP^T qd
        }
        gather_k<KS>(dU, xch, rg, kh, lane);
        const float* du = reinterpret_cast<const float*>(st + St::DU);
        float dR[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) dU[nt][e] += du[slice_index(LDV, vl, lane, nt, e)];   // + the outputs' share
        times_invb<true>(dU, reinterpret_cast<const float*>(st + St::INVB), lane, dR);   // dR = INVb^T dU
        if constexpr (!ENTRY) store_pair_t<KS>(p.du + rh * TILE, dU, p.dr + rh * TILE, dR, vrow, kh, lane);
        uint32_t ar[2][4];
        a_from_c(dR[0], ar[0], -1.f);
        a_from_c(dR[1], ar[1], -1.f);
        add_rows_product<NJ>(dS, ar, reinterpret_cast<const __half*>(st + St::KD) + c0, lane);   // - dR^T kd
    }
    cp_async_wait<0>();
    store_rows_fp32<NJ>((lo == 0 ? p.ds0 : p.ds_final) + s_off, lane, dS);   // dS entering chunk lo: the result, or the next launch's start
}

template <int KS> constexpr size_t states_smem() {
    return NSTAGE * StatesStage::BYTES + Split<KS>::OUT_BYTES + Split<KS>::XCH_BYTES;
}
template <int KS> constexpr size_t dstates_smem() {
    return NSTAGE * DStatesStage::BYTES + Split<KS>::OUT_BYTES + Split<KS>::XCH_BYTES;
}

template <int KS, typename Args>
cudaError_t launch_pass(void (*kernel)(Args), size_t smem, const Args& a, cudaStream_t stream) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(a.n_seq, a.heads, SLICES), Split<KS>::THREADS, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace bwd

// the plan's k-split (kda_nb.plan.BackwardPlan.ksplit): 1 or 2 warps to a group of 16 state rows; the inputs' type
// (kda_switch.h: dispatch_input), each k-split for either; the dS pass's entry gradients alone (§entry) in instances of
// their own
cudaError_t launch_bwd_states(const StatesArgs& a, int input_kind, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    return dispatch_input(input_kind, [&](auto in) {
      return dispatch<1, 2>(a.ksplit, [&](auto ks) {
        constexpr int KS = decltype(ks)::value, IN = decltype(in)::value;
        return bwd::launch_pass<KS>(bwd::kda_bwd_states<KS, IN>, bwd::states_smem<KS>(), a, stream);
      });
    });
}
cudaError_t launch_bwd_dstates(const DStatesArgs& a, int input_kind, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    return dispatch_input(input_kind, [&](auto in) {
      return dispatch<1, 2>(a.ksplit, [&](auto ks) {
        constexpr int KS = decltype(ks)::value, IN = decltype(in)::value;
        return dispatch_bool(a.entry_only, [&](auto entry) {
          return bwd::launch_pass<KS>(bwd::kda_bwd_dstates<KS, IN, decltype(entry)::value>, bwd::dstates_smem<KS>(), a, stream);
        });
      });
    });
}

}  // namespace kda

// kda_bwd_states.cu: the two sequential passes of the backward (kda_nb.backward's chunk_states and
// chunk_state_adjoint), one block per (sequence, head, slice of state rows) walking that sequence's chunks;
// everything between them (the chunk factors before, the token-parallel adjoint after) runs over all chunks at once.
//
// Chunks sit in step-major rows, as kda_nb.backward lays them out: sequences sorted by chunk count (most
// first), row step_off[i] + n holds chunk i of sorted sequence n, which has chunks[n] chunks. The state is
// [V][K] (S^T of the math), fp32, with the head dimension K = V = 128. Rows of the state never mix (each row's
// update reads only that row), so a block owns a slice of VB = 64 rows, blockIdx.z, and each of its four warps
// 16 rows, in registers as the C fragments of mma.sync (as K2 holds the forward's state, kda_recurrence.cuh).
// Per chunk:
//
//   forward  (kda_bwd_states):   Sc = S;  R = V - kd S^T;  U = INVb R;  S <- S diag(decay) + U^T kr
//   backward (kda_bwd_dstates):  dSo = dS;  dU += kr dS^T;  dR = INVb^T dU;
//                                dS <- dS diag(decay) + dP^T qd - dR^T kd
//
// Every product runs on the tensor cores in tf32 (m16n8k8: fp32's range, an 11-bit significand, each operand
// rounded to nearest), accumulating in fp32. The chunk tiles qd, kd and kr come from kda_bwd_prepare in fp16 (their
// values are at most 1 in size, and fp16 has tf32's significand: half the bytes of the fp32 tiles until bc78446 of
// main, the same operands but at ties and below fp16's normal range, under 6e-5); INVb comes rounded to tf32. The values
// and the upstream gradient are read from the caller's own tensors (v bf16, dO bf16 or fp32, [tokens, H, 128]) through
// the rows' token table, the way kda_bwd_prepare reads them: until bc78446 of main the prepare kernel copied them
// into fp32 tiles first. The fragments made here (the state, R, U, dU, dR) are rounded as they become operands. The
// products' results become the next product's left operand without leaving registers: a C fragment (rows g, g + 8;
// columns 2t, 2t + 1) is, permuted, an A fragment whose k-slots t and t + 4 stand for columns 2t and 2t + 1, and the
// right operand is read from shared memory in the same order (b0 = column 2t, b1 = column 2t + 1). The tiles arrive in
// shared memory through NSTAGE stages (cp.async), each tile's rows padded so that the warp's reads hit 32 different
// banks. Until ca4c861 of main the passes ran on the CUDA cores in fp32, 16 rows a block and two a thread: 2.5 and
// 3.1 ms at T = 8192, H = 64 on the H200.
#include "kda_common.cuh"
#include "kda_layout.cuh"

namespace kda {
namespace bwd {

constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int VB = 16 * WARPS;              // state rows per block
constexpr int SLICES = D / VB;              // blocks per (sequence, head)
constexpr int NSTAGE = 3;                   // chunks in flight: this one and the next two
constexpr int TILE = CHUNK * D;             // elements in one [CHUNK][D] tile
constexpr int SMALL = CHUNK * CHUNK;        // floats in INVb
// Padded rows in shared memory, in elements. An fp16 tile, read either as pairs of neighbouring channels of one token a
// lane (lanes g apart a row apart) or as one channel of two tokens 2t and 2t + 1 (lanes t apart two rows apart), has
// rows of 136 halves: 272 bytes, whole 16-byte pieces for cp.async, and 4g + t (pairs) or 8t + g / 2 (single halves, two
// lanes a word) different words of a warp's read.
constexpr int LDH = D + 8;
constexpr int LDS_PAIR = CHUNK + 8, LDS_COL = CHUNK + 4;   // INVb, read either way
constexpr int LDV = VB + 4;                 // the block's slice of an fp32 tile read by state row (dU; fp32 dO)
constexpr int LDVH = VB + 8;                // the same of a 16-bit one (v, bf16 dO): 144-byte rows
constexpr int OUT_LD = D + 8;               // a warp's 16 rows of a bf16 state on their way out (stmatrix)

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

// §copies: `cols` columns of `rows` rows of src (row length src_ld elements of `eb` bytes), starting at element col0, into
// dst (row length ld elements); whole 16-byte pieces
__device__ __forceinline__ void copy_rows(void* dst, int ld, const void* src, int src_ld, int64_t col0, int rows, int cols, int eb) {
    const int per = cols * eb / 16;
    for (int e = threadIdx.x; e < rows * per; e += THREADS) {
        const int r = e / per, q = e % per;
        cp_async16(static_cast<unsigned char*>(dst) + r * ld * eb + 16 * q,
                   static_cast<const unsigned char*>(src) + (static_cast<int64_t>(r) * src_ld + col0) * eb + 16 * q);
    }
}
// the block's VB columns from col0 of the chunk's token rows of a caller's [tokens, H, 128] tensor (elements of `eb`
// bytes, the base 16-byte aligned) into dst [CHUNK][ld]: tokens tok0 .. tok0 + len - 1, rows past len zero (a copy of
// none of the chunk's own first row's bytes: nothing outside the chunk is read)
__device__ __forceinline__ void copy_token_rows(void* dst, int ld, const void* src, int eb, int64_t tok0, int len, int h,
                                                int H, int col0) {
    const int per = VB * eb / 16;
    for (int e = threadIdx.x; e < CHUNK * per; e += THREADS) {
        const int i = e / per, q = e % per;
        const int64_t tok = tok0 + (i < len ? i : 0);
        cp_async16(static_cast<unsigned char*>(dst) + i * ld * eb + 16 * q,
                   static_cast<const unsigned char*>(src) + ((tok * H + h) * D + col0) * eb + 16 * q, i < len ? 16 : 0);
    }
}
__device__ __forceinline__ uint32_t f16_bits(__half x) { return __float_as_uint(__half2float(x)); }   // exact in tf32

// §fragments: a C fragment as the A fragment of the next product, k-slot t <-> column 2t, t + 4 <-> 2t + 1
__device__ __forceinline__ void a_from_c(const float (&c)[4], uint32_t (&a)[4], float sign = 1.f) {
    a[0] = tf32_op(sign * c[0]); a[1] = tf32_op(sign * c[2]); a[2] = tf32_op(sign * c[1]); a[3] = tf32_op(sign * c[3]);
}

// out^T[v][token] = sum_k X[v][k] T[token][k] for the warp's 16 rows v (two C tiles, tokens 0-7 and 8-15), T an fp16
// [CHUNK][LDH] tile; two chains over k (even and odd k-steps) halve the dependent latency
__device__ __forceinline__ void rows_times_tile(const float (&X)[16][4], const __half* T, int lane, float (&out)[2][4]) {
    const int g = lane >> 2, t = lane & 3;
    float acc[2][2][4] = {};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        uint32_t a[4];
        a_from_c(X[j], a);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const float2 b = __half22float2(*reinterpret_cast<const __half2*>(T + (8 * nt + g) * LDH + 8 * j + 2 * t));
            mma_tf32(acc[j & 1][nt], a, __float_as_uint(b.x), __float_as_uint(b.y));
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[nt][e] = acc[0][nt][e] + acc[1][nt][e];
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

// S[v][k] += sum_token A[v][token] T[token][k], A as two A fragments (tokens 0-7, 8-15) in a_from_c's order,
// T an fp16 [CHUNK][LDH] tile
__device__ __forceinline__ void add_rows_product(float (&S)[16][4], const uint32_t (&a)[2][4], const __half* T, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int kb = 0; kb < 2; ++kb)
            mma_tf32(S[j], a[kb], f16_bits(T[(8 * kb + 2 * t) * LDH + 8 * j + g]), f16_bits(T[(8 * kb + 2 * t + 1) * LDH + 8 * j + g]));
}

__device__ __forceinline__ void apply_decay(float (&S)[16][4], const float* decay, int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float2 d = *reinterpret_cast<const float2*>(decay + 8 * j + 2 * t);
        S[j][0] *= d.x; S[j][1] *= d.y; S[j][2] *= d.x; S[j][3] *= d.y;
    }
}

// the warp's 16 rows of a state, [V][K] fp32, from or to global memory at `base` (the state's row vrow)
__device__ __forceinline__ void load_rows(const float* base, int lane, float (&S)[16][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float2 lo = *reinterpret_cast<const float2*>(base + g * D + 8 * j + 2 * t);
        const float2 hi = *reinterpret_cast<const float2*>(base + (g + 8) * D + 8 * j + 2 * t);
        S[j][0] = lo.x; S[j][1] = lo.y; S[j][2] = hi.x; S[j][3] = hi.y;
    }
}
__device__ __forceinline__ void store_rows_fp32(float* base, int lane, const float (&S)[16][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        *reinterpret_cast<float2*>(base + g * D + 8 * j + 2 * t) = make_float2(S[j][0], S[j][1]);
        *reinterpret_cast<float2*>(base + (g + 8) * D + 8 * j + 2 * t) = make_float2(S[j][2], S[j][3]);
    }
}
// the state leaving or entering a chunk, as the adjoint reads it: bf16 through the warp's staging tile (stmatrix,
// then 16-byte stores, two rows of 256 bytes an instruction), or fp32 straight from the fragments
__device__ __forceinline__ void store_state(void* out, bool bf16, int64_t off, const float (&S)[16][4],
                                            __nv_bfloat16* stage, int lane) {
    if (!bf16) { store_rows_fp32(static_cast<float*>(out) + off, lane, S); return; }
    __syncwarp();                                             // the warp is done with the last chunk's copy
    const int m = lane >> 3, r = (lane & 7) + 8 * (m & 1);
#pragma unroll
    for (int j = 0; j < 16; j += 2)
        stmatrix_x4(stage + r * OUT_LD + 8 * j + 8 * (m >> 1), pack_bf16(S[j][0], S[j][1]), pack_bf16(S[j][2], S[j][3]),
                    pack_bf16(S[j + 1][0], S[j + 1][1]), pack_bf16(S[j + 1][2], S[j + 1][3]));
    __syncwarp();
    __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(out) + off;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int e = lane + 32 * i, row = e >> 4, piece = e & 15;
        *reinterpret_cast<uint4*>(dst + row * D + 8 * piece) = *reinterpret_cast<const uint4*>(stage + row * OUT_LD + 8 * piece);
    }
}

// X^T[v][token] (two C tiles) into a [CHUNK][D] fp32 tile at `tile`, column vrow + v
__device__ __forceinline__ void store_tile_t(float* tile, int vrow, int lane, const float (&X)[2][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tile[(8 * nt + 2 * t + (e & 1)) * D + vrow + g + 8 * (e >> 1)] = X[nt][e];
}
// element (nt, e) of a C fragment pair (rows: the warp's 16 state rows from vl; columns: tokens) from the block's slice
// of a [CHUNK][ld] tile in shared memory, fp32 or bf16
__device__ __forceinline__ int slice_index(int ld, int vl, int lane, int nt, int e) {
    const int g = lane >> 2, t = lane & 3;
    return (8 * nt + 2 * t + (e & 1)) * ld + vl + g + 8 * (e >> 1);
}

// §states: the forward's loop again, keeping each chunk's entering state, R and U
__global__ void __launch_bounds__(THREADS) kda_bwd_states(StatesArgs p) {
    extern __shared__ __align__(16) unsigned char smem[];
    using St = StatesStage;
    const int n = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int H = p.heads, nch = p.chunks[n];
    const int vl = 16 * warp, vrow = VB * blockIdx.z + vl;       // the warp's rows: in the block's slice, in the state
    __nv_bfloat16* stage_out = reinterpret_cast<__nv_bfloat16*>(smem + NSTAGE * St::BYTES) + warp * 16 * OUT_LD;
    float S[16][4];
    load_rows(p.s0 + (static_cast<int64_t>(n) * H + h) * D * D + vrow * D, lane, S);
    auto load = [&](int i) {                                     // chunk i into its stage; one commit group a call
        if (i < nch) {
            unsigned char* st = smem + (i % NSTAGE) * St::BYTES;
            const int64_t row = p.step_off[i] + n, rh = row * H + h;   // (row, head)
            copy_rows(st + St::KD, LDH, p.kd, D, rh * TILE, CHUNK, D, 2);
            copy_rows(st + St::KR, LDH, p.kr, D, rh * TILE, CHUNK, D, 2);
            copy_rows(st + St::INVB, LDS_PAIR, p.invb, CHUNK, rh * SMALL, CHUNK, CHUNK, 4);
            copy_rows(st + St::DECAY, D, p.decay, D, rh * D, 1, D, 4);
            copy_token_rows(st + St::V, LDVH, p.v, 2, p.row_tok[row], p.row_len[row], h, H, VB * blockIdx.z);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) load(s);
    for (int i = 0; i < nch; ++i) {
        cp_async_wait<NSTAGE - 2>();                            // chunk i has landed (this thread's copies)
        __syncthreads();                                         // everyone's; and chunk i - 1's stage is free
        load(i + NSTAGE - 1);
        const unsigned char* st = smem + (i % NSTAGE) * St::BYTES;
        const int64_t rh = (p.step_off[i] + n) * H + h;
        store_state(p.sc, p.sc_bf16, (rh * D + vrow) * D, S, stage_out, lane);   // the state entering chunk i
        const __nv_bfloat16* vs = reinterpret_cast<const __nv_bfloat16*>(st + St::V);
        float W[2][4], R[2][4], U[2][4];
        rows_times_tile(S, reinterpret_cast<const __half*>(st + St::KD), lane, W);   // (S kd^T)[v][token]
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) R[nt][e] = __bfloat162float(vs[slice_index(LDVH, vl, lane, nt, e)]) - W[nt][e];
        times_invb<false>(R, reinterpret_cast<const float*>(st + St::INVB), lane, U);   // U = INVb R
        store_tile_t(p.r + rh * TILE, vrow, lane, R);
        store_tile_t(p.u + rh * TILE, vrow, lane, U);
        uint32_t a[2][4];
        a_from_c(U[0], a[0]);
        a_from_c(U[1], a[1]);
        apply_decay(S, reinterpret_cast<const float*>(st + St::DECAY), lane);
        add_rows_product(S, a, reinterpret_cast<const __half*>(st + St::KR), lane);   // S <- S diag(decay) + U^T kr
    }
    cp_async_wait<0>();
}

// §dstates: the loop backwards, dS from the last chunk to the first
__global__ void __launch_bounds__(THREADS) kda_bwd_dstates(DStatesArgs p) {
    extern __shared__ __align__(16) unsigned char smem[];
    using St = DStatesStage;
    const int n = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int H = p.heads, nch = p.chunks[n];
    const int vl = 16 * warp, vrow = VB * blockIdx.z + vl;
    const int do_eb = p.dout_fp32 ? 4 : 2, do_ld = p.dout_fp32 ? LDV : LDVH;   // dO's element bytes and row in the stage
    __nv_bfloat16* stage_out = reinterpret_cast<__nv_bfloat16*>(smem + NSTAGE * St::BYTES) + warp * 16 * OUT_LD;
    const int64_t s_off = (static_cast<int64_t>(n) * H + h) * D * D + vrow * D;
    float dS[16][4];
    load_rows(p.ds_final + s_off, lane, dS);
    auto load = [&](int it) {                                    // the it-th chunk from the last
        if (it < nch) {
            const int i = nch - 1 - it;
            unsigned char* st = smem + (it % NSTAGE) * St::BYTES;
            const int64_t row = p.step_off[i] + n, rh = row * H + h;
            copy_rows(st + St::KR, LDH, p.kr, D, rh * TILE, CHUNK, D, 2);
            copy_rows(st + St::QD, LDH, p.qd, D, rh * TILE, CHUNK, D, 2);
            copy_rows(st + St::KD, LDH, p.kd, D, rh * TILE, CHUNK, D, 2);
            copy_rows(st + St::INVB, LDS_COL, p.invb, CHUNK, rh * SMALL, CHUNK, CHUNK, 4);
            copy_rows(st + St::DECAY, D, p.decay, D, rh * D, 1, D, 4);
            if (p.dout) copy_token_rows(st + St::DO, do_ld, p.dout, do_eb, p.row_tok[row], p.row_len[row], h, H, VB * blockIdx.z);
            copy_rows(st + St::DU, LDV, p.du, D, rh * TILE + VB * blockIdx.z, CHUNK, VB, 4);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) load(s);
    for (int it = 0; it < nch; ++it) {
        cp_async_wait<NSTAGE - 2>();
        __syncthreads();
        load(it + NSTAGE - 1);
        const int i = nch - 1 - it;
        const unsigned char* st = smem + (it % NSTAGE) * St::BYTES;
        const int64_t rh = (p.step_off[i] + n) * H + h;
        store_state(p.dso, p.sc_bf16, (rh * D + vrow) * D, dS, stage_out, lane);   // dS leaving chunk i
        const float* du = reinterpret_cast<const float*>(st + St::DU);
        float dU[2][4], dR[2][4];
        rows_times_tile(dS, reinterpret_cast<const __half*>(st + St::KR), lane, dU);   // (dS kr^T)[v][token]
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) dU[nt][e] += du[slice_index(LDV, vl, lane, nt, e)];   // + the outputs' share
        times_invb<true>(dU, reinterpret_cast<const float*>(st + St::INVB), lane, dR);   // dR = INVb^T dU
        store_tile_t(p.du + rh * TILE, vrow, lane, dU);
        store_tile_t(p.dr + rh * TILE, vrow, lane, dR);
        // dP^T as A fragments, in a_from_c's token order: dP = scale dO, rounded to tf32 as an operand (zero without dO)
        auto dp_at = [&](int nt, int e) -> uint32_t {
            if (!p.dout) return 0u;
            const int at = slice_index(do_ld, vl, lane, nt, e);
            const float d = p.dout_fp32 ? reinterpret_cast<const float*>(st + St::DO)[at]
                                        : __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(st + St::DO)[at]);
            return tf32_op(p.scale * d);
        };
        uint32_t ap[2][4], ar[2][4];
#pragma unroll
        for (int kb = 0; kb < 2; ++kb) {                          // slot order of a_from_c: (g, 2t), (g+8, 2t), (g, 2t+1), (g+8, 2t+1)
            ap[kb][0] = dp_at(kb, 0);
            ap[kb][1] = dp_at(kb, 2);
            ap[kb][2] = dp_at(kb, 1);
            ap[kb][3] = dp_at(kb, 3);
            a_from_c(dR[kb], ar[kb], -1.f);
        }
        apply_decay(dS, reinterpret_cast<const float*>(st + St::DECAY), lane);
        add_rows_product(dS, ap, reinterpret_cast<const __half*>(st + St::QD), lane);   // + dP^T qd
        add_rows_product(dS, ar, reinterpret_cast<const __half*>(st + St::KD), lane);   // - dR^T kd
    }
    cp_async_wait<0>();
    store_rows_fp32(p.ds0 + s_off, lane, dS);
}

}  // namespace bwd

constexpr size_t STATES_SMEM = bwd::NSTAGE * bwd::StatesStage::BYTES + bwd::WARPS * 16 * bwd::OUT_LD * 2;
constexpr size_t DSTATES_SMEM = bwd::NSTAGE * bwd::DStatesStage::BYTES + bwd::WARPS * 16 * bwd::OUT_LD * 2;

cudaError_t launch_bwd_states(const StatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_states, cudaFuncAttributeMaxDynamicSharedMemorySize, STATES_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_states<<<dim3(a.n_seq, a.heads, bwd::SLICES), bwd::THREADS, STATES_SMEM, stream>>>(a);
    return cudaGetLastError();
}
cudaError_t launch_bwd_dstates(const DStatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_dstates, cudaFuncAttributeMaxDynamicSharedMemorySize, DSTATES_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_dstates<<<dim3(a.n_seq, a.heads, bwd::SLICES), bwd::THREADS, DSTATES_SMEM, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace kda

// kda_recurrence.cuh: the recurrence over a sequence's chunks, shared by K2 (kda_fwd_recurrence.cu), which
// reads each chunk's record from K1's workspace, and the fused kernel (kda_fwd_fused.cu), whose preparing
// warps make it in shared memory. Sequential over the chunks of one sequence, parallel over heads and over
// slices of the state's V rows (rows of S never mix). One block per (sequence, head, slice of 16 * WARPS
// rows); each warp owns 16 rows of the state, 16 x 128 fp32, in registers, for the whole sequence. Per
// chunk, with S the state entering it:
//   W = S kd^T,  P = S qd^T                  (bf16 x bf16 -> fp32, the two products with the state)
//   U^T = (V - W)^T (INV diag(beta))^T       (fp16 x fp16 -> fp32)
//   O^T = scale (P + U^T Mqk^T)              (fp16 x fp16 -> fp32)
//   S  <- S diag(decay) + U^T kr             (fp16 x fp16 -> fp32)
// The chunk's record (already in this layout) and values arrive in shared memory through a pipeline of
// NSTAGE stages, so loads for later chunks overlap the arithmetic of this one. The stages of a chunk are
// __forceinline__ functions, so each kernel compiles to one body. The inputs' element type (IN, kda_common.cuh
// §input) reaches only the values' reads (widened to fp32 in the residual) and the outputs' store: the four
// products' operand formats above are the same for bf16 and fp16 inputs.
//
// Checkpoints (the instances with CKPT of K2 and of the fused kernel, FwdArgs::ckpt_offsets / ckpt_slots): after the
// chunk that ends at a listed token offset of its sequence (a multiple of 16, or the sequence's length; 0: the state
// entering it), the state is stored into the listed pool slot of state_out, by the code that writes the state out
// (store_state). Between chunks the registers hold the true state (a warp's rescaling is undone inside
// update_state), and each warp stores its own 16 rows, as it does the state out. Each entry is checked before its store (an offset that names no chunk's end, a
// slot outside [0, n_slots): no store), and the table is read only inside its [N, C] extent, so no value of it,
// however wrong, sends a write outside the pool. The chunk counts are the sequence's own (global chunk indices minus
// its first), so a pipeline step stores exactly the checkpoints that fall in its chunks, and the step that begins a
// sequence stores those at offset 0. A padding sequence (no state) stores none. Without a table the instance without
// CKPT runs: the kernel as it is without the feature.
//
// §states: the states only (the instances with STATES of K2, FwdArgs::states_only; K = V = 128, no checkpoints): the
// chunk loop without its outputs. P = S qd^T, the intra-chunk term U^T Mqk^T and the stores of O go, about half the
// tensor-core work of a chunk (state_products without P, no write_outputs); W, the residual, U and the state update are
// the same instructions in the same order, so the state out has the bits of the full kernel's. A sequence with no
// state slot writes nothing at all. With FwdArgs::zero_values the value tile is filled with zeros by the copy itself
// (a cp.async of 0 source bytes), so v is not read: the transition of a segment (the state from the identity with no
// values). For the passes over segments of one long sequence (kda_nb.segments), whose first two passes keep only states.
// With FwdArgs::states_only = 2 a chunk's record comes without qd and mqk, which only the outputs read: three bulk
// copies of kd, kr and invb, decay and norm, each into its place in the stage (STATES_REC_BYTES, two thirds of the
// record; the passes are bound by these reads, 10a). The stage's qd and mqk are then never written nor read.
//
// §paired: the states and the transitions in one launch (FwdArgs::transitions_out; STATES only). The grid has twice the
// row slices: a (sequence, head)'s first VSPLIT blocks are the states as above, its next VSPLIT the transition, whose
// warps start from their 16 rows of the identity (not read from memory), read v as zeros (as zero_values does) and
// store the state at the end into transitions_out at sequence n. The two halves are the same instructions on the same
// records as two launches (the identity's rows, the zero values, the same stores), so each has the bits of its own
// launch; blocks are handed out x first, so a chunk's record is read from memory about once for the four blocks
// (the second read hits L2), where two launches read it twice.
#pragma once
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_chunk_prep.cuh"
#include "kda_layout.cuh"

namespace kda {

constexpr int K2_MAX_GRID_Y = 32768;                   // sequences per grid.y; more spill into grid.z

template <int WARPS>
struct K2Layout {
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int VB = 16 * WARPS;               // state rows per block
    static constexpr int VROW = VB + 8;                 // padded row of the value tile
    // one pipeline stage: the record exactly as K1 wrote it (kda_common.cuh), then the value tile
    static constexpr int KD = REC_KD, QD = REC_QD, KR = REC_KR, INVB = REC_INVB, MQK = REC_MQK;
    static constexpr int DECAY = REC_DECAY, NORM = REC_NORM;
    static constexpr int VAL = REC_BYTES;
    static constexpr int STAGE = VAL + CHUNK * VROW * 2;
    static constexpr int OROW = 16 + 8;                 // padded row of a warp's output tile
    static constexpr int OUT_BYTES = WARPS * CHUNK * OROW * 2;
    static_assert(STAGE % 16 == 0 && (VROW * 2) % 16 == 0, "16-byte aligned stages and rows");
};

// 2^k with k chosen so that m * 2^k lies in [2^12, 2^13); 1 for m = 0 (or NaN, which then propagates).
__device__ __forceinline__ float pow2_normalizer(float m) {
    if (!(m > 1e-30f)) return 1.f;
    const int e = ((__float_as_int(m) >> 23) & 0xff) - 127;   // floor(log2 m)
    const int k = max(-100, min(100, 12 - e));
    return __int_as_float((k + 127) << 23);
}

// thread 0: the pipeline's barriers, full[s] completed by `producers` arrivals and empty[s] by `consumers`
template <int NSTAGE>
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty, int producers, int consumers) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < NSTAGE; ++s) {
            mbar_init(&full[s], producers);
            mbar_init(&empty[s], consumers);
        }
        mbar_init_fence();
    }
}

// §state_in: S[j][.] is the C fragment of channels 8j..8j+7: rows vrow+g (+8), channels 8j+2t (+1);
// from the step before, through the carry, if the sequence began before this step's chunks. The caller's state is
// [.., vd, kd] (K = V = 128 without DIMS): rows >= vd and channels >= kd are not read and start at 0 (§dims)
template <bool DIMS>
__device__ __forceinline__ void load_state(const FwdArgs& p, bool from_caller, int64_t state_off, int h, int vrow,
                                           int lane, float (&S)[16][4], int kd, int vd) {
    const int g = lane >> 2, t = lane & 3;
    const int64_t carry_off = static_cast<int64_t>(h) * D * D;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int64_t off = state_off + static_cast<int64_t>(vrow + g + 8 * half) * kd + 8 * j + 2 * t;
            const bool inside = !DIMS || (vrow + g + 8 * half < vd && 8 * j < kd);
            float2 s = make_float2(0.f, 0.f);
            if (!from_caller) {
                s = *reinterpret_cast<const float2*>(p.carry_in + carry_off + (vrow + g + 8 * half) * D + 8 * j + 2 * t);
            } else if (!inside) {
            } else if (p.state_in_kind == STATE_FP32) {
                s = *reinterpret_cast<const float2*>(static_cast<const float*>(p.state_in) + off);
            } else if (p.state_in_kind == STATE_BF16) {
                s = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(
                        static_cast<const __nv_bfloat16*>(p.state_in) + off));
            }
            S[j][2 * half] = s.x;
            S[j][2 * half + 1] = s.y;
        }
    }
}

// §dims: head dims below 128 (DIMS; FwdArgs::dim_k = K, dim_v = V, multiples of 8). The record is K1's, 128 channels
// wide, with zeros in kd, qd and kr past K (kda_chunk_prep.cuh §dims), so every product runs at 128 as it does for
// K = 128. The state is read and written at [.., V, K]: load_state leaves channels >= K and rows >= V at 0, and
// store_state writes neither; a zero column of S stays zero, since S diag(decay) keeps it zero whatever the decay there
// and U^T kr adds U^T times kr's zero column. The grid has only the row slices that hold rows < V (V = 64: one of
// the two slices of 64 rows, half the blocks of V = 128; the fused kernel's one block holds all 128 rows either way).
// A lane's 8 rows of the value tile and of the outputs lie all below V or all at or above it: the values' copy brings
// zeros for those at or above V (so U's rows there are 0), and their outputs are not stored. Without DIMS the kernel is
// the one built for K = V = 128.
// §products: the state as bf16 A fragments (for either input type: kda_common.cuh §input), then W = S kd^T and
// P = S qd^T (16 rows x 16 tokens).
// W accumulates in two independent chains (even / odd k-blocks) to halve the dependent latency. WITH_P false: W only
// (§states; P stays as given)
template <bool WITH_P = true>
__device__ __forceinline__ void state_products(float (&S)[16][4], const __nv_bfloat16* kd, const __nv_bfloat16* qd,
                                               const float* decay, int lane, float (&W)[2][2][4], float (&P)[2][4]) {
    uint32_t Sa[8][4];
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
        Sa[kb][0] = pack_bf16(S[2 * kb][0], S[2 * kb][1]);
        Sa[kb][1] = pack_bf16(S[2 * kb][2], S[2 * kb][3]);
        Sa[kb][2] = pack_bf16(S[2 * kb + 1][0], S[2 * kb + 1][1]);
        Sa[kb][3] = pack_bf16(S[2 * kb + 1][2], S[2 * kb + 1][3]);
    }
    // §decay: S <- S diag(decay) now, while the products below (which read Sa) are in flight
    apply_decay<16>(S, decay, lane);
    const int brow = (lane & 7) + 8 * (lane >> 4), bpiece = (lane >> 3) & 1;   // ldmatrix, B of 2 n-tiles
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
        uint32_t bk[4];
        ldmatrix_x4(bk, kd + swz_row(brow, 2 * kb + bpiece));
        if constexpr (WITH_P) {
            uint32_t bq[4];
            ldmatrix_x4(bq, qd + swz_row(brow, 2 * kb + bpiece));
            mma_bf16(W[kb & 1][0], Sa[kb], bk[0], bk[1]);
            mma_bf16(W[kb & 1][1], Sa[kb], bk[2], bk[3]);
            mma_bf16(P[0], Sa[kb], bq[0], bq[1]);
            mma_bf16(P[1], Sa[kb], bq[2], bq[3]);
        } else {
            mma_bf16(W[kb & 1][0], Sa[kb], bk[0], bk[1]);
            mma_bf16(W[kb & 1][1], Sa[kb], bk[2], bk[3]);
        }
    }
}

// §residual: X^T = V^T - W^T for this warp's rows; element (nt, e) is row g + 8(e/2), token 8nt + 2t + e%2.
// The value tile is [token][row]; ldmatrix.trans hands each lane its (row, two tokens) pairs: matrix m
// holds tokens 8 (m / 2) .. + 7 and rows 8 (m % 2) .. + 7 of the warp's 16.
template <int WARPS, int IN>
__device__ __forceinline__ void residual(const typename In<IN>::T* vt, const float (&W)[2][2][4], int warp, int lane,
                                         float (&X)[2][4]) {
    uint32_t vv[4];
    const int m = lane >> 3;
    ldmatrix_x4_trans(vv, vt + (8 * (m >> 1) + (lane & 7)) * K2Layout<WARPS>::VROW + warp * 16 + 8 * (m & 1));
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const float2 x = In<IN>::pair(vv[2 * nt + hr]);
            X[nt][2 * hr] = x.x - (W[0][nt][2 * hr] + W[1][nt][2 * hr]);
            X[nt][2 * hr + 1] = x.y - (W[0][nt][2 * hr + 1] + W[1][nt][2 * hr + 1]);
        }
}

// §u: U^T = X^T (INV diag(beta))^T, with X^T's C fragments reused as an fp16 A fragment; U^T as the fp16 A
// fragment of the next products
__device__ __forceinline__ void u_product(const float (&X)[2][4], const __half* invb, int lane, uint32_t (&Ua)[4]) {
    const int brow = (lane & 7) + 8 * (lane >> 4), bpiece = (lane >> 3) & 1;
    const uint32_t Xa[4] = {pack_f16(X[0][0], X[0][1]), pack_f16(X[0][2], X[0][3]),
                            pack_f16(X[1][0], X[1][1]), pack_f16(X[1][2], X[1][3])};
    float U[2][4] = {};
    {
        uint32_t b[4];
        ldmatrix_x4(b, invb + swz_small(brow, bpiece));
        mma_f16(U[0], Xa, b[0], b[1]);
        mma_f16(U[1], Xa, b[2], b[3]);
    }
    Ua[0] = pack_f16(U[0][0], U[0][1]); Ua[1] = pack_f16(U[0][2], U[0][3]);
    Ua[2] = pack_f16(U[1][0], U[1][1]); Ua[3] = pack_f16(U[1][2], U[1][3]);
}

// §output: O^T = scale (P + U^T Mqk^T), staged through shared memory for 16-byte stores: stmatrix.trans
// writes the four 8 x 8 pieces (rows 8 (m % 2) .., tokens 8 (m / 2) ..) as [token][row], rounded to the inputs' type
// (DIMS: out is [.., V]; the lane's 8 rows go to element t * tstride + tcol of token t, if lane_in, §dims)
template <int WARPS, bool DIMS, int IN>
__device__ __forceinline__ void write_outputs(typename In<IN>::T* out, float scale, int H, int h, int64_t tok0, int ntok,
                                              float (&P)[2][4], const uint32_t (&Ua)[4], const __half* mqk, float sc0,
                                              float sc1, typename In<IN>::T* otile, int c, int vrow, int lane,
                                              int tstride, int tcol, bool lane_in) {
    using Ly = K2Layout<WARPS>;
    const int brow = (lane & 7) + 8 * (lane >> 4), bpiece = (lane >> 3) & 1;
    uint32_t b[4];
    ldmatrix_x4(b, mqk + swz_small(brow, bpiece));
    mma_f16(P[0], Ua, b[0], b[1]);
    mma_f16(P[1], Ua, b[2], b[3]);
    const float o0 = scale / sc0, o1 = scale / sc1;
    const int m = lane >> 3;
    stmatrix_x4_trans(otile + (8 * (m >> 1) + (lane & 7)) * Ly::OROW + 8 * (m & 1),
                      In<IN>::pack(P[0][0] * o0, P[0][1] * o0), In<IN>::pack(P[0][2] * o1, P[0][3] * o1),
                      In<IN>::pack(P[1][0] * o0, P[1][1] * o0), In<IN>::pack(P[1][2] * o1, P[1][3] * o1));
    __syncwarp();
    const int tok = lane >> 1, part = lane & 1;
    const int64_t gtok = tok0 + (c * CHUNK + tok);
    if constexpr (DIMS) {
        if (c * CHUNK + tok < ntok && lane_in)
            *reinterpret_cast<uint4*>(out + gtok * tstride + tcol) = *reinterpret_cast<const uint4*>(otile + tok * Ly::OROW + 8 * part);
    } else if (c * CHUNK + tok < ntok) {
        *reinterpret_cast<uint4*>(out + (gtok * H + h) * D + vrow + 8 * part) =
            *reinterpret_cast<const uint4*>(otile + tok * Ly::OROW + 8 * part);
    }
}

// §state: S <- S diag(decay) + U^T kr, the decay already applied (in the scaled frame if rows were rescaled)
__device__ __forceinline__ void update_state(float (&S)[16][4], const uint32_t (&Ua)[4], const __half* kr, bool scaled,
                                             float sc0, float sc1, int lane) {
    if (scaled) {
#pragma unroll
        for (int j = 0; j < 16; ++j) { S[j][0] *= sc0; S[j][1] *= sc0; S[j][2] *= sc1; S[j][3] *= sc1; }
    }
    const int trow = (lane & 7) + 8 * ((lane >> 3) & 1), tpiece = lane >> 4;   // ldmatrix.trans of kr
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, kr + swz_row(trow, 2 * jj + tpiece));
        mma_f16(S[2 * jj], Ua, b[0], b[1]);
        mma_f16(S[2 * jj + 1], Ua, b[2], b[3]);
    }
    if (scaled) {
        const float i0 = 1.f / sc0, i1 = 1.f / sc1;
#pragma unroll
        for (int j = 0; j < 16; ++j) { S[j][0] *= i0; S[j][1] *= i0; S[j][2] *= i1; S[j][3] *= i1; }
    }
}

// §store: the warp's 16 rows of S into pool element `state_off` (the first of the slot's head) of state_out, in
// its kind (fp32, or rounded to bf16): the state out, and the checkpoints. The state is [.., vd, kd]: with DIMS, rows
// >= vd and channels >= kd are not written
template <bool DIMS>
__device__ __forceinline__ void store_state(const FwdArgs& p, int64_t state_off, int vrow, int lane,
                                            const float (&S)[16][4], int kd, int vd) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int64_t off = state_off + static_cast<int64_t>(vrow + g + 8 * half) * kd + 8 * j + 2 * t;
            if (DIMS && !(vrow + g + 8 * half < vd && 8 * j < kd)) continue;
            if (p.state_out_kind == STATE_FP32)
                *reinterpret_cast<float2*>(static_cast<float*>(p.state_out) + off) =
                    make_float2(S[j][2 * half], S[j][2 * half + 1]);
            else
                *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.state_out) + off) =
                    __floats2bfloat162_rn(S[j][2 * half], S[j][2 * half + 1]);
        }
}

// §ckpt_table: the chunks of sequence n (of `len` tokens) done when entry c of its table is stored, ceil(offset /
// 16), or -1 where the entry stores nothing (an offset that ends no chunk of the sequence, a slot outside the pool)
__device__ __forceinline__ int64_t ckpt_chunks(const FwdArgs& p, int n, int64_t c, int64_t len, int64_t& slot) {
    const int64_t e = static_cast<int64_t>(n) * p.ckpt_count + c;
    const int64_t o = __ldg(p.ckpt_offsets + e);
    slot = __ldg(p.ckpt_slots + e);
    if (slot < 0 || slot >= p.n_slots || o < 0 || o > len || (o % CHUNK != 0 && o != len)) return -1;
    return chunk_count(o);
}
// the fewest chunks done, at least `lo`, after which sequence n stores a checkpoint (INT64_MAX: none)
__device__ __forceinline__ int64_t ckpt_next(const FwdArgs& p, int n, int64_t len, int64_t lo) {
    int64_t next = INT64_MAX, slot;
    if (p.state_out_kind == STATE_NONE) return next;
#pragma unroll 1
    for (int64_t c = 0; c < p.ckpt_count; ++c) {
        const int64_t k = ckpt_chunks(p, n, c, len, slot);
        if (k >= lo && k < next) next = k;
    }
    return next;
}
// every checkpoint of sequence n stored after `done` chunks, from the warp's rows of S
template <bool DIMS>
__device__ __forceinline__ void ckpt_store(const FwdArgs& p, int n, int64_t len, int64_t done, int h, int vrow,
                                           int lane, const float (&S)[16][4], int kd, int vd) {
    int64_t slot;
#pragma unroll 1
    for (int64_t c = 0; c < p.ckpt_count; ++c)
        if (ckpt_chunks(p, n, c, len, slot) == done) store_state<DIMS>(p, (slot * p.H + h) * vd * kd, vrow, lane, S, kd, vd);
}

// The block's whole work. PREP = 0: K2, the record from K1's workspace (Prepare: NoPrepare); PREP > 0: the
// fused kernel, PREP more warps make it (Prepare::warp). CKPT: the checkpoints of FwdArgs::ckpt_offsets (the
// recurrence warps store them; the fused kernel's preparing warps never see them).
// IN: the inputs' element type (kda_args.h: InputKind), of v and of the outputs here. DIMS: the head dims K, V of
// FwdArgs::dim_k, dim_v (§dims); without it K = V = 128. STATES: the states only (§states; K2, K = V = 128, no CKPT).
struct NoPrepare {};

template <int WARPS, int NSTAGE, int PREP, class Prepare, bool CKPT, bool DIMS, int IN, bool STATES = false>
__device__ __forceinline__ void recurrence_block(const FwdArgs& p, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    using Ly = K2Layout<WARPS>;
    using T = typename In<IN>::T;
    static_assert(PREP == 0 || (NSTAGE % (PREP ? PREP : 1) == 0 && Ly::VB == D), "fused: the whole state per block, one preparing warp per stage");
    static_assert(!STATES || (PREP == 0 && !CKPT && !DIMS), "the states only: K2 at K = V = 128, no checkpoints");
    constexpr int VSPLIT = D / Ly::VB;
    // the head dims K and V (§dims; 128 without DIMS); the grid's row slices are those that hold rows < V
    const int KD = DIMS ? p.dim_k : D, VD = DIMS ? p.dim_v : D;
    const int vsplit = DIMS ? (VD + Ly::VB - 1) / Ly::VB : VSPLIT;
    // §paired: twice the slices, the second half the transitions (STATES only; a constant false elsewhere)
    const bool paired = STATES && p.transitions_out != nullptr;
    const int slices = paired ? 2 * vsplit : vsplit;
    // grid (heads x row slices, sequences): blocks are handed out x first, so every head of the longest
    // sequence (seq_order) starts before any block of the next one, across all heads
    const int H = p.H, h = blockIdx.x / slices;
    const bool transition = paired && blockIdx.x % slices >= vsplit;
    const int vblk = blockIdx.x % slices - (transition ? vsplit : 0);
    const int rank = blockIdx.z * K2_MAX_GRID_Y + blockIdx.y;
    if (rank >= p.n_seq) return;
    const int n = p.seq_order ? p.seq_order[rank] : rank;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // §step: the sequence's chunks inside this launch's range [chunk_lo, chunk_hi) (all of them, unless
    // the launch is one step of a pipeline). A sequence with no chunk there has nothing to do here; one
    // with no chunk at all (length 0) belongs to the step whose range holds its place.
    // A fixed-length batch (seq_len > 0) has no tables: its offsets are multiples of seq_len.
    const int64_t per = p.seq_len > 0 ? chunk_count(p.seq_len) : 0;
    const int64_t first = p.seq_len > 0 ? n * per : p.cu_chunks[n], end = p.seq_len > 0 ? first + per : p.cu_chunks[n + 1];
    const int64_t chunk0 = max(first, p.chunk_lo), chunk1 = min(end, p.chunk_hi);
    if (!(chunk0 < chunk1 || (first == end && first >= p.chunk_lo && first < p.chunk_hi))) return;
    const bool from_caller = first >= p.chunk_lo, to_caller = end <= p.chunk_hi;   // else from / to the carry
    const int nch = static_cast<int>(chunk1 - chunk0);
    const int64_t tok0 = (p.seq_len > 0 ? n * p.seq_len : p.cu_seqlens[n]) + (chunk0 - first) * CHUNK;
    const int64_t tok1 = min(p.seq_len > 0 ? (n + 1) * p.seq_len : p.cu_seqlens[n + 1], tok0 + static_cast<int64_t>(nch) * CHUNK);
    const int ntok = static_cast<int>(tok1 - tok0);     // <= 16 nch: the chunk loop counts tokens from tok0 in 32 bits
    const int vbase = vblk * Ly::VB;                    // first state row of the block
    const int vrow = vbase + warp * 16;                 // first state row of this warp
    // §slot: the state this sequence reads and writes: its own (n), or a pool slot. A slot outside the
    // pool (-1 marks padding) means no state is read or written, and the sequence's outputs are zero.
    // (read again before the state is written, rather than kept in a register across the chunk loop)
    auto state_offset = [&]() -> int64_t {
        const int64_t slot = p.state_slot ? __ldg(p.state_slot + n) : n;
        return slot < 0 || slot >= p.n_slots ? -1 : (slot * H + h) * VD * KD;
    };
    if (state_offset() < 0) {
        if constexpr (!STATES) {                        // (8 outputs in a 16-byte store)
            T* out = static_cast<T*>(p.out);
            for (int64_t i = threadIdx.x; i < (tok1 - tok0) * (Ly::VB / 8); i += Ly::THREADS + 32 * PREP) {
                const int64_t tok = tok0 + i / (Ly::VB / 8);
                const int col = vbase + 8 * static_cast<int>(i % (Ly::VB / 8));
                if (!DIMS || col < VD) *reinterpret_cast<uint4*>(out + (tok * H + h) * VD + col) = make_uint4(0, 0, 0, 0);
            }
        }
        return;
    }
    int64_t state_off = state_offset();

    // the fused kernel: its preparing warps (warps WARPS ..) make the records (Prepare::warp, kda_fwd_fused.cu)
    if constexpr (PREP > 0) {
        init_stage_barriers<NSTAGE>(full, empty, 32, WARPS);   // full: every lane of the stage's preparing warp
        __syncthreads();                                // the block's last barrier: warps meet only through mbarriers
        if (warp >= WARPS) {
            Prepare::warp(p, warp - WARPS, h, tok0, tok1, nch, lane, smem, full, empty);
            return;
        }
    }

    float S[16][4];
    load_state<DIMS>(p, from_caller, state_off, h, vrow, lane, S, KD, VD);
    if (transition) {                                   // §paired: the warp's 16 rows of the identity
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) S[j][e] = vrow + g + 8 * (e >> 1) == 8 * j + 2 * t + (e & 1) ? 1.f : 0.f;
    }
    const int64_t carry_off = static_cast<int64_t>(h) * D * D;

    // §checkpoints: `next`, the fewest chunks of the sequence done after which a checkpoint is due, from the chunks
    // done before this launch's first (done0; the step that begins the sequence also stores those at offset 0)
    [[maybe_unused]] int64_t done0 = 0, len = 0, next = INT64_MAX;
    if constexpr (CKPT) {
        done0 = chunk0 - first;
        len = p.seq_len > 0 ? p.seq_len : p.cu_seqlens[n + 1] - p.cu_seqlens[n];
        next = ckpt_next(p, n, len, from_caller ? 0 : done0 + 1);
        if (next == 0) {
            ckpt_store<DIMS>(p, n, len, 0, h, vrow, lane, S, KD, VD);
            next = ckpt_next(p, n, len, 1);
        }
    }

    // §pipeline: thread 0 asks the bulk copy engine for chunk c's record, one copy, which completes
    // full[stage]; it first waits on empty[stage] until every warp is done with the chunk that stage held
    // (the fused kernel: the preparing warps do both, kda_fwd_fused.cu).
    // Each warp copies its own 16 rows of the values with cp.async (one 16-byte piece per lane; zeros past
    // the sequence's end), one commit group per chunk. Warps meet only through these two barriers, never
    // all at once: a warp that is ahead starts the next chunk without waiting for the others.
    if constexpr (PREP == 0) {
        init_stage_barriers<NSTAGE>(full, empty, 1, WARPS);
        __syncthreads();
    }
    const T* v = static_cast<const T*>(p.v);
    // (§dims) the lane's 8 rows of the values it copies and of the outputs it stores are rows lrow .. lrow + 7 of the
    // state, all below V or none (V a multiple of 8); with DIMS, those of token t sit at t * tstride + tcol of v and out
    [[maybe_unused]] const int lrow = vrow + 8 * (lane & 1);
    [[maybe_unused]] const bool lane_in = !DIMS || lrow < VD;
    [[maybe_unused]] const int tstride = DIMS ? H * VD : 0, tcol = DIMS ? h * VD + lrow : 0;
    auto load_chunk = [&](int c, int stage) {
        if (c < nch) {
            uint8_t* st = smem + stage * Ly::STAGE;
            if (PREP == 0 && threadIdx.x == 0) {
                if (c >= NSTAGE) mbar_wait(&empty[stage], ((c - NSTAGE) / NSTAGE) & 1);
                const uint8_t* rec = static_cast<const uint8_t*>(p.workspace) + ((chunk0 + c) * H + h) * REC_BYTES;
                if (STATES && p.states_only == 2) {      // (§states: the parts the states read, each where it lies)
                    mbar_arrive_expect_tx(&full[stage], STATES_REC_BYTES);
                    bulk_copy_g2s(st + Ly::KD, rec + REC_KD, REC_QD - REC_KD, &full[stage]);
                    bulk_copy_g2s(st + Ly::KR, rec + REC_KR, REC_MQK - REC_KR, &full[stage]);
                    bulk_copy_g2s(st + Ly::DECAY, rec + REC_DECAY, REC_BYTES - REC_DECAY, &full[stage]);
                } else {
                    mbar_arrive_expect_tx(&full[stage], REC_BYTES);
                    bulk_copy_g2s(st, rec, REC_BYTES, &full[stage]);
                }
            }
            const int r = lane >> 1, piece = 2 * warp + (lane & 1);    // token r, rows 8 piece .. + 7
            const bool inside = c * CHUNK + r < ntok;
            if constexpr (DIMS) {                                    // rows >= V: zeros, nothing read
                const T* src = v + (tok0 + (inside ? c * CHUNK + r : 0)) * tstride + (lane_in ? tcol : 0);
                cp_async16(st + Ly::VAL + r * Ly::VROW * 2 + piece * 16, src, inside && lane_in ? 16 : 0);
            } else {                                                 // (§states: zero_values reads none)
                const bool read = inside && !(STATES && (p.zero_values || transition));
                const T* src = v + ((tok0 + (read ? c * CHUNK + r : 0)) * H + h) * D + vbase + piece * 8;
                cp_async16(st + Ly::VAL + r * Ly::VROW * 2 + piece * 16, src, read ? 16 : 0);
            }
        }
        cp_async_commit();
    };

#pragma unroll
    for (int s = 0; s < NSTAGE - 1; ++s) load_chunk(s, s);

    T* otile = reinterpret_cast<T*>(smem + NSTAGE * Ly::STAGE) + warp * CHUNK * Ly::OROW;
    T* out = static_cast<T*>(p.out);

#pragma unroll 1
    for (int c = 0; c < nch; ++c) {
        load_chunk(c + NSTAGE - 1, (c + NSTAGE - 1) % NSTAGE);   // into the stage of chunk c - 1
        cp_async_wait<NSTAGE - 1>();         // this lane's value piece of chunk c has landed
        __syncwarp();                        // and the warp's
        mbar_wait(&full[c % NSTAGE], (c / NSTAGE) & 1);   // and the record
        const uint8_t* st = smem + (c % NSTAGE) * Ly::STAGE;
        const __nv_bfloat16* kd = reinterpret_cast<const __nv_bfloat16*>(st + Ly::KD);
        const __nv_bfloat16* qd = reinterpret_cast<const __nv_bfloat16*>(st + Ly::QD);
        const __half* kr = reinterpret_cast<const __half*>(st + Ly::KR);
        const __half* invb = reinterpret_cast<const __half*>(st + Ly::INVB);
        const __half* mqk = reinterpret_cast<const __half*>(st + Ly::MQK);
        const float* decay = reinterpret_cast<const float*>(st + Ly::DECAY);
        const float norm = fmaxf(*reinterpret_cast<const float*>(st + Ly::NORM), 1.f);
        const T* vt = reinterpret_cast<const T*>(st + Ly::VAL);

        // §chunk: the products with the state, then the residual (state_products, residual above)
        float W[2][2][4] = {}, P[2][4] = {};
        state_products<!STATES>(S, kd, qd, decay, lane, W, P);

        float X[2][4];
        residual<WARPS, IN>(vt, W, warp, lane, X);

        // §range: fp16 holds X and U exactly enough if |X| is neither tiny nor huge. Per row, the
        // largest |X| (4 lanes share a row) bounds |U| <= norm * max|X|. If any row of the warp is
        // outside the comfortable window, every row is rescaled by a power of two (exact), undone below.
        float m0 = fmaxf(fmaxf(fabsf(X[0][0]), fabsf(X[0][1])), fmaxf(fabsf(X[1][0]), fabsf(X[1][1])));
        float m1 = fmaxf(fmaxf(fabsf(X[0][2]), fabsf(X[0][3])), fmaxf(fabsf(X[1][2]), fabsf(X[1][3])));
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
            m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
        }
        const bool comfortable = (m0 == 0.f || (m0 >= 0x1p-8f && m0 * norm <= 0x1p14f)) &&
                                 (m1 == 0.f || (m1 >= 0x1p-8f && m1 * norm <= 0x1p14f));
        const bool scaled = !__all_sync(0xffffffffu, comfortable);
        float sc0 = 1.f, sc1 = 1.f;
        if (scaled) {
            sc0 = pow2_normalizer(m0 * norm);
            sc1 = pow2_normalizer(m1 * norm);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                X[nt][0] *= sc0; X[nt][1] *= sc0; X[nt][2] *= sc1; X[nt][3] *= sc1;
                P[nt][0] *= sc0; P[nt][1] *= sc0; P[nt][2] *= sc1; P[nt][3] *= sc1;
            }
        }

        // §stages: U, the outputs and the new state (u_product, write_outputs, update_state above)
        uint32_t Ua[4];
        u_product(X, invb, lane, Ua);

        if constexpr (!STATES)
            write_outputs<WARPS, DIMS, IN>(out, p.scale, H, h, tok0, ntok, P, Ua, mqk, sc0, sc1, otile, c, vrow, lane,
                                           tstride, tcol, lane_in);

        update_state(S, Ua, kr, scaled, sc0, sc1, lane);
        __syncwarp();                        // every lane is done reading the stage
        if (lane == 0) mbar_arrive(&empty[c % NSTAGE]);
        if constexpr (CKPT) {                // the state after the sequence's chunk done0 + c (true: rescaling undone)
            if (done0 + c + 1 == next) {
                ckpt_store<DIMS>(p, n, len, next, h, vrow, lane, S, KD, VD);
                next = ckpt_next(p, n, len, next + 1);
            }
        }
    }
    cp_async_wait<0>();

    // §state_out (to the carry if the sequence goes on past this step's chunks)
    if (!to_caller) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                *reinterpret_cast<float2*>(p.carry_out + carry_off + (vrow + g + 8 * half) * D + 8 * j + 2 * t) =
                    make_float2(S[j][2 * half], S[j][2 * half + 1]);
    } else if (transition) {                            // §paired: the transition, fp32 at sequence n
        float* dst = p.transitions_out + (static_cast<int64_t>(n) * H + h) * D * D;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                *reinterpret_cast<float2*>(dst + (vrow + g + 8 * half) * D + 8 * j + 2 * t) =
                    make_float2(S[j][2 * half], S[j][2 * half + 1]);
    } else if (p.state_out_kind != STATE_NONE) {
        state_off = state_offset();
        store_state<DIMS>(p, state_off, vrow, lane, S, KD, VD);
    }
}

}  // namespace kda

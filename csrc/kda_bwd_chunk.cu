// kda_bwd_chunk.cu: the token-parallel kernels of the backward, one block per (chunk row, head), on either
// side of the two sequential passes of kda_bwd_states.cu:
//
//   kda_bwd_prepare   reads the caller's q, k, g, beta and dO, applies the activations and makes the
//                     chunk's factors (kda_nb.backward.chunk_factors), the tiles the passes read: qd, kd and kr
//                     in fp16 (the passes' tf32 mma operands: fp16 holds tf32's significand, and these are at most
//                     1 in size), dU0 = Mqk^T dP (dP = scale dO) in fp32, INVb rounded to tf32, and decay (the
//                     passes read V and dO from the caller's v and dO themselves), and keeps the chunk's small
//                     factors (A, INV, b and the inverse norms, 2.2 KB) for
//   kda_bwd_adjoint   which reads them back with the passes' Sc, dSo, R, U, dU and dR (making the factors again
//                     from the inputs would be a third of its code), and computes everything else of
//                     kda_nb.backward.chunk_adjoint and activate_backward: dq, dk, dv, dg and dbeta of the
//                     chunk's tokens (fp32, or the inputs' dtype, as kda_nb.kda asks), and the chunk's shares of
//                     dA_log and ddt_bias (summed over the chunks in Python, in a fixed order, so that the
//                     gradients are the same bits on every run)
//
// Both compute every form of KDA (kda_nb.layout.Form): the gate's form is their template parameter GF, beta's and the
// norm's forms are run-time flags where FORMS (§forms); FlashKDA's form is <SafeSigmoid, false>. Unbounded decays
// (the softplus gate, a given gate) take an exact path per chunk where the chunk's decays leave the fast path's range.
//
// §input: the inputs' element type IN (bf16 or fp16, kda_common.cuh §input) is their last template parameter. It reaches
// the reads of q, k, g, beta and a 16-bit dO, each widened to fp32 before any arithmetic (both types are exact in fp32),
// and the stores of the gradients where they are written in the inputs' dtype; everything between is the same code for
// both types. No tensor-core operand is an input element: the prepare kernel's tiles for the passes (qd, kd, kr in fp16,
// INVb in tf32) and the adjoint's state products (3xTF32 of fp32 tiles, or bf16 hi + lo against bf16 states) are
// intermediates, their formats chosen by their ranges, as for bf16 inputs.
//
// Both copy the chunk's q, k, g and dO rows to shared memory with cp.async as their first step (stage_rows), so that
// those loads wait behind nothing. The adjoint is sensitive to the size of its code: at 168 KB it waited for
// instructions a quarter of its time, and at 143 KB (its stores unrolled in two dtypes) it was 36% slower than at
// 126 KB; it stays near 126 KB (store_grads keeps the stores short).
//
// Row r of the tiles is the chunk of tokens row_tok[r] .. row_tok[r] + row_len[r] - 1 on the flat token axis
// (1 <= row_len[r] <= 16); positions past row_len[r] are padding: zero q, k, v, dO and write strength, zero
// log-decay, as in kda_nb.chunked. Thread c of the block's 128 owns channel c of the chunk's 16 tokens, so the
// scans over tokens (cumulated gates, the gate's gradient) run in registers; sums over channels go through
// shuffles and shared memory. The four products with a state (dP Sc, dR Sc, U dSo and the channel sums of
// Sc * dSo) run on the tensor cores in 3xTF32 (about fp32's accuracy; two products where the states are bf16, whose
// values are tf32 already): warp w owns channels 32w .. 32w + 31
// and reads its columns of Sc and dSo from global memory straight into mma fragments.
#include <type_traits>

#include "kda_activations.cuh"
#include "kda_common.cuh"
#include "kda_layout.cuh"

namespace kda {
namespace bwdc {

constexpr int THREADS = D;                  // thread c owns channel c
constexpr int WARPS = THREADS / 32;
constexpr int LD = D + 4;                   // padded row of a [CHUNK][D] tile in shared memory (16-byte aligned)
constexpr int SLD = CHUNK + 1;              // padded row of a [CHUNK][CHUNK] matrix
constexpr int MID = CHUNK / 2 - 1;          // the within-chunk exponents are split at this token (as in Python)
// where the small factors sit in a chunk's BWD_FACTOR_FLOATS (kda_args.h)
constexpr int FAC_A = 0, FAC_INV = SMALL, FAC_B = 2 * SMALL, FAC_RQ = FAC_B + CHUNK, FAC_RK = FAC_RQ + CHUNK;
static_assert(FAC_RK + CHUNK == kda::BWD_FACTOR_FLOATS, "the factor record's layout");

using kda::PrepArgs;
using kda::AdjointArgs;

// each x[i] summed over the block's threads; scratch holds WARPS * CHUNK floats, 16-byte aligned. Syncs the block.
// Within a warp, a butterfly that halves the values a lane holds at each of its steps (16 shuffles, where one warp
// sum per value takes 80): lane l ends with the warp's sum of value l / 2.
__device__ __forceinline__ void block_sum16(float (&x)[CHUNK], float* scratch) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float y8[8], y4[4], y2[2], y1;
    {
        const bool hi = lane & 16;
#pragma unroll
        for (int j = 0; j < 8; ++j) y8[j] = (hi ? x[j + 8] : x[j]) + __shfl_xor_sync(0xffffffffu, hi ? x[j] : x[j + 8], 16);
    }
    {
        const bool hi = lane & 8;
#pragma unroll
        for (int j = 0; j < 4; ++j) y4[j] = (hi ? y8[j + 4] : y8[j]) + __shfl_xor_sync(0xffffffffu, hi ? y8[j] : y8[j + 4], 8);
    }
    {
        const bool hi = lane & 4;
#pragma unroll
        for (int j = 0; j < 2; ++j) y2[j] = (hi ? y4[j + 2] : y4[j]) + __shfl_xor_sync(0xffffffffu, hi ? y4[j] : y4[j + 2], 4);
    }
    {
        const bool hi = lane & 2;
        y1 = (hi ? y2[1] : y2[0]) + __shfl_xor_sync(0xffffffffu, hi ? y2[0] : y2[1], 2);
    }
    y1 += __shfl_xor_sync(0xffffffffu, y1, 1);
    __syncthreads();                                   // scratch may still be read from an earlier sum
    if ((lane & 1) == 0) scratch[w * CHUNK + (lane >> 1)] = y1;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < CHUNK; i += 4) {
        float4 t = reinterpret_cast<const float4*>(scratch)[i / 4];
#pragma unroll
        for (int ww = 1; ww < WARPS; ++ww) {
            const float4 u = reinterpret_cast<const float4*>(scratch + ww * CHUNK)[i / 4];
            t.x += u.x; t.y += u.y; t.z += u.z; t.w += u.w;
        }
        x[i] = t.x; x[i + 1] = t.y; x[i + 2] = t.z; x[i + 3] = t.w;
    }
}

// §factors: the chunk's factors in shared memory, and thread c's channel of the activated inputs in registers
struct Factors {
    float kd[CHUNK][LD], qd[CHUNK][LD], ki[CHUNK][LD];   // k e^G, q e^G, k e^-G (free once A, M, INV are made)
    float A[CHUNK][SLD];                                  // strictly lower: kd ki^T (L before beta)
    float M[CHUNK][SLD];                                  // lower with its diagonal: qd ki^T (Mqk)
    float inv[CHUNK][SLD];                                // (I + diag(b) A)^-1
    float b[CHUNK];                                       // write strength
    float rq[CHUNK], rk[CHUNK];                           // 1 / ||q||, 1 / ||k|| of each token
    alignas(16) float red[WARPS * CHUNK];                 // block sums
};
// the chunk's raw q, k and g rows, [CHUNK][D] each of the inputs' elements (rows past len zero), staged by cp.async
// (stage_rows); the same bytes for either type
template <int IN> struct Rows { alignas(16) typename In<IN>::T q[CHUNK * D], k[CHUNK * D], g[CHUNK * D]; };
struct Channel {
    float q[CHUNK], k[CHUNK];   // q_hat, k_hat of channel c
    float G[CHUNK];             // cumulated log-decay of channel c
};

// §forms: the gate's form GF is a template parameter; FORMS: beta's and the norm's forms are read from p.form at run
// time (uniform branches), else they are FlashKDA's (logits, L2 inside).
//
// Unbounded decays: the chunk's factors on the fast path form e^G and e^-G of the cumulated log-decay G (as the
// chunk's split at MID does in the adjoint), exact while G >= EXACT_FLOOR on every channel: e^80 and e^-80 are well
// inside fp32's range, their products too. The safe gate is always there (G >= 16 lower_bound >= -80), and its kernels
// have no other path. The other gates choose per chunk (a block vote on G at the chunk's last token): the fast path
// where the chunk is within the floor, bits unchanged; else the exact path, which forms only decays in [0, 1],
// e^(G_i - G_j) for i >= j, pair by pair: a decay below fp32's range is 0, never an inf or a NaN.
constexpr float EXACT_FLOOR = -80.f;
template <GateForm GF>
__device__ __forceinline__ bool within_floor(float last) {
    if constexpr (GF == GateForm::SafeSigmoid) return true;
    else return __syncthreads_and(last >= EXACT_FLOOR);
}
template <bool FORMS, class P> __device__ __forceinline__ bool norm_inside(const P& p) { return !FORMS || p.form.norm == 0; }
template <bool FORMS>
__device__ __forceinline__ float beta_value(int form, float x) {
    if constexpr (!FORMS) return beta_of(x);
    else return form == 1 ? beta_of<BetaForm::Prob>(x) : form == 2 ? beta_of<BetaForm::LogitNegEig>(x) : beta_of<BetaForm::Logit>(x);
}
template <bool FORMS>
__device__ __forceinline__ float beta_grad_slope(int form, float x) {
    if constexpr (!FORMS) return beta_slope(x);
    else return form == 1 ? beta_slope<BetaForm::Prob>(x) : form == 2 ? beta_slope<BetaForm::LogitNegEig>(x) : beta_slope<BetaForm::Logit>(x);
}
// the gate's rate A, the bias of channel c and the factor w of the head's log-decay (a given gate reads neither A_log
// nor dt_bias: A = 1, bias = 0, w = 1)
// (RELOAD: read again, volatile, rather than kept in registers from an earlier read through a long stretch of code)
template <GateForm GF, bool RELOAD = false, class P>
__device__ __forceinline__ void gate_params(const P& p, int h, int c, float& A, float& bias, float& w) {
    if constexpr (GF == GateForm::Given) { A = 1.f; bias = 0.f; }
    else if constexpr (RELOAD) {
        A = gate_rate_exact<GF>(*reinterpret_cast<const volatile float*>(p.A_log + h));
        bias = *reinterpret_cast<const volatile float*>(p.dt_bias + h * D + c);
    } else { A = gate_rate_exact<GF>(p.A_log[h]); bias = p.dt_bias[h * D + c]; }
    w = gate_scale<GF>(A, p.lower_bound);
}

// w where the kernels use it: the safe gate reads its bound from the parameters there (as FlashKDA's form always did)
template <GateForm GF, class P>
__device__ __forceinline__ float scale_of(const P& p, float w) {
    if constexpr (GF == GateForm::SafeSigmoid) return p.lower_bound;
    else return w;
}

// thread c's channel of the chunk's raw q and k (from the staged rows: zero past len), and the cumulated log-decay G
// (no decay past len)
template <GateForm GF, int IN, class P>
__device__ __forceinline__ void load_channel(const P& p, const Rows<IN>& rows, int len, int h, Channel& x) {
    const int c = threadIdx.x;
    float A, bias, w;
    gate_params<GF>(p, h, c, A, bias, w);
    float G = 0.f;
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        x.q[i] = In<IN>::to_float(rows.q[i * D + c]);
        x.k[i] = In<IN>::to_float(rows.k[i * D + c]);
        if (i < len) G += log_decay<GF>(gate_arg<GF>(In<IN>::to_float(rows.g[i * D + c]), A, bias), scale_of<GF>(p, w));
        x.G[i] = G;
    }
}

// (rows may share memory with s.kd and s.qd: they are read before the first block sum (or, q and k normalised outside,
// a barrier of its own), and those written after it)
template <GateForm GF, bool FORMS, int IN, class P>
__device__ __forceinline__ void make_factors(const P& p, const Rows<IN>& rows, int64_t tok0, int len, int h, Factors& s, Channel& x) {
    const int c = threadIdx.x, H = p.H;
    load_channel<GF, IN>(p, rows, len, h, x);
    const bool fast = within_floor<GF>(x.G[CHUNK - 1]);
    float sq[CHUNK], sk[CHUNK];
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) { sq[i] = x.q[i] * x.q[i]; sk[i] = x.k[i] * x.k[i]; }
    if (c < CHUNK) s.b[c] = c < len ? beta_value<FORMS>(p.form.beta, input_at<IN>(p.beta, (tok0 + c) * H + h)) : 0.f;
    const bool l2 = norm_inside<FORMS>(p);
    if (l2) {
        block_sum16(sq, s.red);
        block_sum16(sk, s.red);
    } else {
        __syncthreads();                              // every thread's reads of rows done before kd, qd overwrite them
    }
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        if (l2) {
            sq[i] = inv_norm(sq[i]);
            sk[i] = inv_norm(sk[i]);
        } else {
            sq[i] = inv_norm<NormForm::Outside>(sq[i]);
            sk[i] = inv_norm<NormForm::Outside>(sk[i]);
        }
        if (c == i) { s.rq[i] = sq[i]; s.rk[i] = sk[i]; }
        x.q[i] *= sq[i];
        x.k[i] *= sk[i];
        if (fast) {
            const float e = __expf(x.G[i]);
            s.kd[i][c] = x.k[i] * e;
            s.qd[i][c] = x.q[i] * e;
            s.ki[i][c] = x.k[i] * __expf(-x.G[i]);
        } else {                                      // the exact path: k_hat, q_hat and G (kd, qd made below)
            s.kd[i][c] = x.k[i];
            s.qd[i][c] = x.q[i];
            s.ki[i][c] = x.G[i];
        }
    }
    __syncthreads();
    // A and M: 256 pairs (i, j), two per thread; a warp's lanes share i and read 16 rows of ki
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {
        const int pair = c + rep * THREADS, i = pair >> 4, j = pair & 15;
        float a = 0.f, m = 0.f;
        if (j <= i) {
            const float4* kd4 = reinterpret_cast<const float4*>(s.kd[i]);
            const float4* qd4 = reinterpret_cast<const float4*>(s.qd[i]);
            const float4* ki4 = reinterpret_cast<const float4*>(s.ki[j]);
            if (fast) {
#pragma unroll 8
                for (int e = 0; e < D / 4; ++e) {
                    const float4 u = kd4[e], w = qd4[e], r = ki4[e];
                    a = fmaf(u.x, r.x, fmaf(u.y, r.y, fmaf(u.z, r.z, fmaf(u.w, r.w, a))));
                    m = fmaf(w.x, r.x, fmaf(w.y, r.y, fmaf(w.z, r.z, fmaf(w.w, r.w, m))));
                }
            } else {                                  // sum_c k_j e^(G_i - G_j) (k_i, q_i): each decay in [0, 1]
                const float4* gi4 = reinterpret_cast<const float4*>(s.ki[i]);
                const float4* kj4 = reinterpret_cast<const float4*>(s.kd[j]);
#pragma unroll 4
                for (int e = 0; e < D / 4; ++e) {
                    const float4 u = kd4[e], w = qd4[e], gi = gi4[e], gj = ki4[e], kj = kj4[e];
                    const float rx = kj.x * __expf(gi.x - gj.x), ry = kj.y * __expf(gi.y - gj.y);
                    const float rz = kj.z * __expf(gi.z - gj.z), rw = kj.w * __expf(gi.w - gj.w);
                    a = fmaf(u.x, rx, fmaf(u.y, ry, fmaf(u.z, rz, fmaf(u.w, rw, a))));
                    m = fmaf(w.x, rx, fmaf(w.y, ry, fmaf(w.z, rz, fmaf(w.w, rw, m))));
                }
            }
        }
        s.A[i][j] = j < i ? a : 0.f;
        s.M[i][j] = j <= i ? m : 0.f;
    }
    __syncthreads();
    if (!fast) {                                      // kd, qd of the exact path: thread c's own column (read only by it)
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const float e = __expf(x.G[i]);
            s.kd[i][c] = x.k[i] * e;
            s.qd[i][c] = x.q[i] * e;
        }
    }
    // INV = (I + L)^-1, L = diag(b) A, by substitution: thread j < 16 makes column j
    if (c < CHUNK) {
        const int j = c;
        float col[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            float acc = 0.f;
#pragma unroll
            for (int m = 0; m < i; ++m) acc = fmaf(s.A[i][m], col[m], acc);   // col[m] = 0 for m < j
            col[i] = i == j ? 1.f : (i < j ? 0.f : -s.b[i] * acc);
        }
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) s.inv[i][j] = col[i];
    }
    __syncthreads();
}

// §prepare ------------------------------------------------------------------------------------
// The chunk's raw rows of dO (16 tokens x 128 channels, the inputs' 16-bit type or fp32), or of q, k or g, into shared
// memory while the factors are made: 16 bytes a copy where the caller's tensor is 16-byte aligned, else one element a
// thread. Rows past len are zeros.
// Staged before the tile stores, because the compiler does not move a token's loads above the stores of the token
// before: loaded there, each token would wait one memory latency.
__device__ __forceinline__ void stage_rows(unsigned char* dst, const void* src, int bytes, int64_t tok0, int len, int h, int H) {
    const int row = D * bytes, parts = row / 16;   // bytes: 2 (bf16, fp16) or 4 (fp32) an element
    const unsigned char* base = static_cast<const unsigned char*>(src);
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        for (int e = threadIdx.x; e < CHUNK * parts; e += THREADS) {
            const int i = e / parts, part = e % parts;
            const int64_t tok = tok0 + (i < len ? i : 0);            // a row of the chunk's own: never read past it
            cp_async16(dst + i * row + 16 * part, base + (tok * H + h) * row + 16 * part, i < len ? 16 : 0);
        }
    } else {
        const int64_t first = (tok0 * H + h) * D + threadIdx.x, step = static_cast<int64_t>(H) * D;
#pragma unroll 1
        for (int i = 0; i < CHUNK; ++i) {
            if (bytes == 2) reinterpret_cast<uint16_t*>(dst)[i * D + threadIdx.x] = i < len ? static_cast<const uint16_t*>(src)[first + i * step] : 0;
            else reinterpret_cast<uint32_t*>(dst)[i * D + threadIdx.x] = i < len ? static_cast<const uint32_t*>(src)[first + i * step] : 0u;
        }
    }
}

template <GateForm GF, bool FORMS, int IN>
__global__ void __launch_bounds__(THREADS, 4) kda_bwd_prepare(PrepArgs p) {
    using T = typename In<IN>::T;
    __shared__ __align__(16) Factors s;
    __shared__ __align__(16) unsigned char do_raw[CHUNK * D * 4];
    Channel x;
    const int64_t row = p.row0 + blockIdx.x;             // this launch's rows: row0 .. row0 + rows - 1
    const int h = blockIdx.y, H = p.H, c = threadIdx.x;
    const int64_t tok0 = p.row_tok[row];
    const int len = p.row_len[row];
    Rows<IN>& rows = *reinterpret_cast<Rows<IN>*>(&s.kd[0][0]);   // (in s.kd and s.qd until make_factors writes them)
    static_assert(sizeof(Rows<IN>) <= sizeof(s.kd) + sizeof(s.qd), "the staged rows fit in kd and qd");
    stage_rows(reinterpret_cast<unsigned char*>(rows.q), p.q, 2, tok0, len, h, H);
    stage_rows(reinterpret_cast<unsigned char*>(rows.k), p.k, 2, tok0, len, h, H);
    stage_rows(reinterpret_cast<unsigned char*>(rows.g), p.g, 2, tok0, len, h, H);
    cp_async_commit();
    if (p.dout) stage_rows(do_raw, p.dout, p.dout_fp32 ? 4 : 2, tok0, len, h, H);
    cp_async_commit();
    cp_async_wait<1>();                           // q, k and g have landed (this thread's copies)
    __syncthreads();
    make_factors<GF, FORMS, IN>(p, rows, tok0, len, h, s, x);
    cp_async_wait<0>();
    __syncthreads();
    const int64_t rh = row * H + h, base = rh * TILE;
    const float last = x.G[CHUNK - 1];
    float (&dp)[CHUNK][LD] = s.ki;                // free now; thread c keeps its own column of dP there
    __half *qd = static_cast<__half*>(p.qd), *kd = static_cast<__half*>(p.kd), *kr = static_cast<__half*>(p.kr);
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        const float d = !p.dout ? 0.f : p.dout_fp32 ? reinterpret_cast<const float*>(do_raw)[i * D + c]
                                                    : In<IN>::to_float(reinterpret_cast<const T*>(do_raw)[i * D + c]);
        qd[base + i * D + c] = __float2half_rn(s.qd[i][c]);      // the passes' mma operands, in fp16 (|x| <= 1)
        kd[base + i * D + c] = __float2half_rn(s.kd[i][c]);
        kr[base + i * D + c] = __float2half_rn(x.k[i] * __expf(last - x.G[i]));
        dp[i][c] = p.scale * d;
    }
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {             // dU0 = Mqk^T dP: row j sums M[i][j] dP_i over i >= j
        float acc = 0.f;
#pragma unroll
        for (int i = j; i < CHUNK; ++i) acc = fmaf(s.M[i][j], dp[i][c], acc);
        p.du[base + j * D + c] = acc;
    }
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {
        const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
        p.invb[rh * SMALL + e] = tf32_rounded(s.inv[i][j] * s.b[j]);
        p.factors[rh * kda::BWD_FACTOR_FLOATS + FAC_A + e] = s.A[i][j];
        p.factors[rh * kda::BWD_FACTOR_FLOATS + FAC_INV + e] = s.inv[i][j];
    }
    if (c < CHUNK) {
        float* fac = p.factors + rh * kda::BWD_FACTOR_FLOATS;
        fac[FAC_B + c] = s.b[c];
        fac[FAC_RQ + c] = s.rq[c];
        fac[FAC_RK + c] = s.rk[c];
    }
    p.decay[rh * D + c] = expf(last);
}
// §adjoint ------------------------------------------------------------------------------------
// Shared memory: the factors' three big tiles are used twice over, so that more blocks fit on an SM (f.M is unused):
//   the small matrices:   f.kd = R, f.qd = dU, f.ki = dP     (u, dr; A, INV, b, rq and rk read back)
//   the state products:   read f.ki = dP, dr, u; then write f.qd = X_q, f.kd = X_k, f.ki = dkr
//   the tokens:           f.qd, f.kd end as dq, dk of q_hat, k_hat; dr is dv
template <int IN>
struct Adjoint {
    Factors f;
    float u[CHUNK][LD], dr[CHUNK][LD];
    float dM[CHUNK][SLD], dA[CHUNK][SLD], dinv[CHUNK][SLD], t1[CHUNK][SLD];
    float db[CHUNK];
    float ddecay[D];
    alignas(16) unsigned char do_raw[CHUNK * D * 4];   // the chunk's dO as the caller gave it (stage_rows)
    Rows<IN> rows;                                     // and its q, k and g
};

// a fp32 tile [CHUNK][D] of global memory into a padded shared tile, 16 bytes a copy
__device__ __forceinline__ void load_tile(float (*dst)[LD], const float* src) {
    for (int e = threadIdx.x; e < TILE / 4; e += THREADS) {
        const int i = e / (D / 4), c4 = e % (D / 4);
        cp_async16(&dst[i][4 * c4], src + i * D + 4 * c4);
    }
}

// four consecutive channels of row v of an fp32 state
__device__ __forceinline__ float4 state4(const float* base, int64_t off) { return __ldg(reinterpret_cast<const float4*>(base + off)); }
__device__ __forceinline__ float at4(const float4& v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }

// A fragment (16 x 8, k = v) of a shared [CHUNK][LD] tile at k-step s, split into tf32 hi and lo parts
__device__ __forceinline__ void a_frag(const float (*X)[LD], int s, int g, int t, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    split_tf32(X[g][8 * s + t], hi[0], lo[0]);
    split_tf32(X[g + 8][8 * s + t], hi[1], lo[1]);
    split_tf32(X[g][8 * s + t + 4], hi[2], lo[2]);
    split_tf32(X[g + 8][8 * s + t + 4], hi[3], lo[3]);
}

// X_q = dP Sc, X_k = dR Sc, dkr = U dSo ([CHUNK][D] each, into f.qd, f.kd, f.ki) and ddecay = sum_v Sc * dSo.
// Warp w, lane 4g + t: n-tile e of the warp holds channel 32w + 4n + e at its column n, so that a lane's
// B fragments are 4 consecutive channels of one state row (one 16- or 8-byte load).
//
// fp32 states: m16n8k8 in 3xTF32, each lane loading its values from global memory (rows t and t + 4 of k-step st).
// bf16 states (what the library keeps, STATES_DTYPE): the states' values are bf16 already, so the products run as
// m16n8k16 bf16 mma with the left operand (dP, dR, U: fp32 tiles) split into bf16 hi = rn(x) and lo = rn(x - hi),
// two products, leaving x - hi - lo, at most 2^-18 |x| (the bf16 state itself is rounded by 2^-9): half the mma
// instructions of m16n8k8 tf32 with its hi and lo, and no
// conversion of the states' values to fp32 for the products. A k-step's 16 rows v sit in the mma's k slots permuted
// (slots 2t, 2t + 1, 2t + 8, 2t + 9 hold rows t, t + 4, 8 + t, 12 + t), the same for both operands, so that a lane
// reads the rows t and t + 4 of each half that the m16n8k8 layout read, with the same conflict-free loads.
// §state stages (bf16 states): rows 8 st .. 8 st + 7 of Sc and of dSo for half-step st (two make one k-step of 16),
// copied by cp.async SP_STAGES - 1 half-steps ahead into stages that lie in tiles no one reads during the products
// (f.kd, f.qd: R and dU are spent; do_raw); rows padded to 288 bytes, so that a half-warp's 8-byte reads (rows t,
// channels 4g) hit different banks. (Loaded from global memory by each lane itself, two k-steps ahead at most, the
// values held 18% of the kernel's stalls.)
constexpr int SP_LD = D + 16;                           // bf16 elements in a padded row
constexpr int SP_STAGE = 2 * 8 * SP_LD * 2;             // bytes: 8 rows of Sc, then 8 of dSo
constexpr int SP_STAGES = 4;
// stage i: three in f.kd and f.qd (contiguous in Factors), the fourth in do_raw
static_assert(3 * SP_STAGE <= 2 * sizeof(float) * CHUNK * LD && SP_STAGE <= CHUNK * D * 4 && SP_STAGES == 4, "the stages fit");
static_assert((SP_LD * 2) % 16 == 0, "16-byte rows");
template <class Adj>
__device__ __forceinline__ unsigned char* sp_stage(Adj& s, int i) {
    return i < 3 ? reinterpret_cast<unsigned char*>(&s.f.kd[0][0]) + i * SP_STAGE : s.do_raw;
}
__device__ __forceinline__ void sp_copy(const AdjointArgs& p, int64_t state_off, unsigned char* stage, int st) {
    for (int e = threadIdx.x; e < 2 * 8 * (D / 8); e += THREADS) {    // 16 rows of 16 pieces of 16 bytes
        const int row = e >> 4, piece = e & 15, which = row >> 3, r = row & 7;
        const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(which ? p.dso : p.sc) + state_off + (8 * st + r) * D + 8 * piece;
        cp_async16(stage + (row * SP_LD + 8 * piece) * 2, src);
    }
}
// A fragment of m16n8k16 at k-step s of a shared fp32 [CHUNK][LD] tile, as bf16 hi and lo parts: rows g, g + 8; the k
// slots 2t, 2t + 1 (+ 8) hold columns 16 s + t, + 4 (+ 8), the permutation above (each load a warp's 32 banks, as a_frag's)
__device__ __forceinline__ void a_frag_bf16(const float (*X)[LD], int s, int g, int t, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float* at = &X[g + 8 * (r & 1)][16 * s + 8 * (r >> 1) + t];
        const float x0 = at[0], x1 = at[4];
        hi[r] = pack_bf16(x0, x1);
        lo[r] = pack_bf16(x0 - bf16_lo(hi[r]), x1 - bf16_hi(hi[r]));
    }
}
// the 16-bit halves of a pair of state words as one B register (k = the two rows, n = one channel): lo halves or hi halves
__device__ __forceinline__ uint32_t pair_lo(uint32_t a, uint32_t b) { return __byte_perm(a, b, 0x5410); }
__device__ __forceinline__ uint32_t pair_hi(uint32_t a, uint32_t b) { return __byte_perm(a, b, 0x7632); }

template <bool BF16, class Adj>
__device__ __forceinline__ void state_products(const AdjointArgs& p, int64_t state_off, Adj& s) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int ch = 32 * w + 4 * g;                     // this lane's four channels in the B fragments
    float xq[4][4] = {}, xk[4][4] = {}, dkr[4][4] = {};
    float dd[4] = {0.f, 0.f, 0.f, 0.f};
    if constexpr (BF16) {
#pragma unroll
        for (int i = 0; i < SP_STAGES - 1; ++i) { sp_copy(p, state_off, sp_stage(s, i), i); cp_async_commit(); }
#pragma unroll 1
        for (int ks = 0; ks < D / 16; ++ks) {
            // rows t, t + 4 of half-steps 2 ks and 2 ks + 1 (k slots 2t, 2t + 1 and 2t + 8, 2t + 9), channels ch .. ch + 3, of
            // Sc and dSo: [half][row][Sc, dSo]; each half's stage read before the next half's copy may overwrite it
            uint2 v[2][2][2];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int st = 2 * ks + half;
                cp_async_wait<SP_STAGES - 2>();
                __syncthreads();                       // half-step st has landed, and the stage of st - 1 is read
                if (st + SP_STAGES - 1 < D / 8) sp_copy(p, state_off, sp_stage(s, (st + SP_STAGES - 1) % SP_STAGES), st + SP_STAGES - 1);
                cp_async_commit();
                const __nv_bfloat16* at = reinterpret_cast<const __nv_bfloat16*>(sp_stage(s, st % SP_STAGES)) + t * SP_LD + ch;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    v[half][r][0] = *reinterpret_cast<const uint2*>(at + 4 * r * SP_LD);
                    v[half][r][1] = *reinterpret_cast<const uint2*>(at + (8 + 4 * r) * SP_LD);
                }
            }
            uint32_t ph[4], pl[4], rh[4], rl[4], uh[4], ul[4];
            a_frag_bf16(s.f.ki, ks, g, t, ph, pl);
            a_frag_bf16(s.dr, ks, g, t, rh, rl);
            a_frag_bf16(s.u, ks, g, t, uh, ul);
#pragma unroll
            for (int e = 0; e < 4; ++e) {              // channel ch + e: word e / 2 of each row, its low or high half
                uint32_t b[2][2];                      // [Sc, dSo][k-half]
#pragma unroll
                for (int m = 0; m < 2; ++m)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const uint32_t w0 = e < 2 ? v[half][0][m].x : v[half][0][m].y, w1 = e < 2 ? v[half][1][m].x : v[half][1][m].y;
                        b[m][half] = (e & 1) ? pair_hi(w0, w1) : pair_lo(w0, w1);
                    }
#pragma unroll
                for (int half = 0; half < 2; ++half) {  // sum over the lane's four rows of Sc * dSo at channel ch + e
                    const uint32_t s0 = b[0][half], d0 = b[1][half];
                    dd[e] = fmaf(bf16_lo(s0), bf16_lo(d0), fmaf(bf16_hi(s0), bf16_hi(d0), dd[e]));
                }
                mma_bf16(xq[e], pl, b[0][0], b[0][1]);  mma_bf16(xq[e], ph, b[0][0], b[0][1]);
                mma_bf16(xk[e], rl, b[0][0], b[0][1]);  mma_bf16(xk[e], rh, b[0][0], b[0][1]);
                mma_bf16(dkr[e], ul, b[1][0], b[1][1]); mma_bf16(dkr[e], uh, b[1][0], b[1][1]);
            }
        }
    } else {
#pragma unroll 2
        for (int st = 0; st < D / 8; ++st) {
            const int64_t r0 = state_off + static_cast<int64_t>(8 * st + t) * D + ch, r1 = r0 + 4 * D;
            const float* sc = static_cast<const float*>(p.sc); const float* dso = static_cast<const float*>(p.dso);
            const float4 sc0 = state4(sc, r0), sc1 = state4(sc, r1);
            const float4 ds0 = state4(dso, r0), ds1 = state4(dso, r1);
            uint32_t ph[4], pl[4], rh[4], rl[4], uh[4], ul[4];
            a_frag(s.f.ki, st, g, t, ph, pl);
            a_frag(s.dr, st, g, t, rh, rl);
            a_frag(s.u, st, g, t, uh, ul);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float s0 = at4(sc0, e), s1 = at4(sc1, e), d0 = at4(ds0, e), d1 = at4(ds1, e);
                dd[e] = fmaf(s0, d0, fmaf(s1, d1, dd[e]));
                uint32_t sh0, sl0, sh1, sl1, dh0, dl0, dh1, dl1;
                split_tf32(s0, sh0, sl0); split_tf32(s1, sh1, sl1);
                split_tf32(d0, dh0, dl0); split_tf32(d1, dh1, dl1);
                mma3(xq[e], ph, pl, sh0, sl0, sh1, sl1);
                mma3(xk[e], rh, rl, sh0, sl0, sh1, sl1);
                mma3(dkr[e], uh, ul, dh0, dl0, dh1, dl1);
            }
        }
    }
    __syncthreads();                                   // every warp is done reading dP: its tile takes dkr
#pragma unroll
    for (int e = 0; e < 4; ++e) {                      // C fragment: rows g, g + 8; columns 2t, 2t + 1
        dd[e] += __shfl_xor_sync(0xffffffffu, dd[e], 1);
        dd[e] += __shfl_xor_sync(0xffffffffu, dd[e], 2);
        if (t == 0) s.ddecay[ch + e] = dd[e];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = g + 8 * half;
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2) {
                const int chan = 32 * w + 4 * (2 * t + n2) + e;
                s.f.qd[i][chan] = xq[e][2 * half + n2];
                s.f.kd[i][chan] = xk[e][2 * half + n2];
                s.f.ki[i][chan] = dkr[e][2 * half + n2];
            }
        }
    }
}

// X Y^T of two [CHUNK][LD] tiles in shared memory (16 x 16: sums over the 128 channels), warp w's part of the sum:
// channels 32w .. 32w + 31, four k-steps of m16n8k8 in 3xTF32 (fp32's accuracy), its two C tiles into part [16][16].
// (The 256 sums on the CUDA cores in fp32, two a thread, are 9% of the adjoint's instructions.)
__device__ __forceinline__ void tile_products_part(const float (*X)[LD], const float (*Y)[LD], float* part, int lane, int w) {
    const int g = lane >> 2, t = lane & 3;
    float acc[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const int st = 4 * w + ks, col = 8 * st + t;              // k-step st: channels 8st .. 8st + 7
        uint32_t ah[4], al[4];
        a_frag(X, st, g, t, ah, al);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            uint32_t bh0, bl0, bh1, bl1;
            split_tf32(Y[8 * nt + g][col], bh0, bl0);
            split_tf32(Y[8 * nt + g][col + 4], bh1, bl1);
            mma3(acc[nt], ah, al, bh0, bl0, bh1, bl1);
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        *reinterpret_cast<float2*>(part + g * CHUNK + 8 * nt + 2 * t) = make_float2(acc[nt][0], acc[nt][1]);
        *reinterpret_cast<float2*>(part + (g + 8) * CHUNK + 8 * nt + 2 * t) = make_float2(acc[nt][2], acc[nt][3]);
    }
}

// dq, dk (in f.qd, f.kd), dv (dr) and dg (u) of thread c's channel into the caller's tensors, the chunk's tokens only:
// a short loop, apart from the unrolled arithmetic (the kernel is sensitive to its code's size: at 168 KB it spent a
// quarter of its time waiting for instructions)
template <class T> __device__ __forceinline__ T as_out(float x);
template <> __device__ __forceinline__ float as_out<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 as_out<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half as_out<__half>(float x) { return __float2half_rn(x); }
template <class T, class Adj>
__device__ __forceinline__ void store_grads(const AdjointArgs& p, const Adj& s, int64_t tok0, int len, int h) {
    const int c = threadIdx.x;
    T *dq = static_cast<T*>(p.dq), *dk = static_cast<T*>(p.dk), *dv = static_cast<T*>(p.dv), *dg = static_cast<T*>(p.dg);
#pragma unroll 2
    for (int i = 0; i < len; ++i) {
        const int64_t off = ((tok0 + i) * p.H + h) * D + c;
        dq[off] = as_out<T>(s.f.qd[i][c]);
        dk[off] = as_out<T>(s.f.kd[i][c]);
        dv[off] = as_out<T>(s.dr[i][c]);
        dg[off] = as_out<T>(s.u[i][c]);
    }
}

template <bool BF16, GateForm GF, bool FORMS, int IN>
__global__ void __launch_bounds__(THREADS, 3) kda_bwd_adjoint(AdjointArgs p) {
    using T = typename In<IN>::T;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Adjoint<IN>& s = *reinterpret_cast<Adjoint<IN>*>(smem_raw);
    Channel x;
    const int64_t row = p.row0 + blockIdx.x;             // this launch's rows: row0 .. row0 + rows - 1
    const int h = blockIdx.y, H = p.H, c = threadIdx.x;
    const int64_t tok0 = p.row_tok[row];
    const int len = p.row_len[row];
    const int64_t rh = row * H + h, base = rh * TILE;
    if (threadIdx.x == 0 && ((reinterpret_cast<uintptr_t>(p.sc) | reinterpret_cast<uintptr_t>(p.dso)) & 15) == 0) {
        constexpr uint32_t bytes = D * D * (BF16 ? 2 : 4);   // the chunk's two states (64 KB in bf16) on their way to
                                                             // L2 while everything before state_products runs (a hint:
                                                             // the bulk engine needs 16-byte aligned addresses)
        prefetch_l2(static_cast<const unsigned char*>(p.sc) + rh * bytes, bytes);
        prefetch_l2(static_cast<const unsigned char*>(p.dso) + rh * bytes, bytes);
    }
    float (&R)[CHUNK][LD] = s.f.kd, (&dU)[CHUNK][LD] = s.f.qd, (&dP)[CHUNK][LD] = s.f.ki;
    // the small factors kda_bwd_prepare kept, into registers first: their loads wait beside the copies below, and
    // they go to shared memory after them (stored at once, each load is waited for at once: 7% of the kernel's stalls)
    float fa[2], fi[2], fb = 0.f, frq = 0.f, frk = 0.f;
    {
        const float* fac = p.factors + rh * kda::BWD_FACTOR_FLOATS;
#pragma unroll
        for (int rep = 0; rep < 2; ++rep) { fa[rep] = fac[FAC_A + c + rep * THREADS]; fi[rep] = fac[FAC_INV + c + rep * THREADS]; }
        if (c < CHUNK) { fb = fac[FAC_B + c]; frq = fac[FAC_RQ + c]; frk = fac[FAC_RK + c]; }
    }
    load_tile(s.u, p.u + base);                         // the passes' four tiles arrive while dP is made
    load_tile(s.dr, p.dr + base);
    load_tile(R, p.r + base);
    load_tile(dU, p.du + base);
    if (p.dout) stage_rows(s.do_raw, p.dout, p.dout_fp32 ? 4 : 2, tok0, len, h, H);   // and dO, in its own dtype
    stage_rows(reinterpret_cast<unsigned char*>(s.rows.q), p.q, 2, tok0, len, h, H);   // and q, k, g for the tokens' part
    stage_rows(reinterpret_cast<unsigned char*>(s.rows.k), p.k, 2, tok0, len, h, H);
    stage_rows(reinterpret_cast<unsigned char*>(s.rows.g), p.g, 2, tok0, len, h, H);
    cp_async_commit();
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {
        const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
        s.f.A[i][j] = fa[rep];
        s.f.inv[i][j] = fi[rep];
    }
    if (c < CHUNK) { s.f.b[c] = fb; s.f.rq[c] = frq; s.f.rk[c] = frk; }
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < CHUNK; ++i)                     // zeros past len (stage_rows)
        dP[i][c] = !p.dout ? 0.f : p.scale * (p.dout_fp32 ? reinterpret_cast<const float*>(s.do_raw)[i * D + c]
                                              : In<IN>::to_float(reinterpret_cast<const T*>(s.do_raw)[i * D + c]));
    __syncthreads();
    // §small: dM = tril(dP U^T), dINVb = dU R^T (each warp a quarter of the channels, into do_raw, free now; then the four
    // parts summed in a fixed order), then INVb's and L's shares of db and dA
    {
        float* parts = reinterpret_cast<float*>(s.do_raw);          // [2][WARPS][CHUNK * CHUNK]
        static_assert(sizeof(s.do_raw) >= 2 * WARPS * SMALL * sizeof(float), "the parts fit in do_raw");
        const int w = c >> 5;
        tile_products_part(dP, s.u, parts + w * SMALL, c & 31, w);
        tile_products_part(dU, R, parts + (WARPS + w) * SMALL, c & 31, w);
        __syncthreads();
#pragma unroll
        for (int rep = 0; rep < 2; ++rep) {
            const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
            float dm = 0.f, dinvb = 0.f;
#pragma unroll
            for (int ww = 0; ww < WARPS; ++ww) { dm += parts[ww * SMALL + e]; dinvb += parts[(WARPS + ww) * SMALL + e]; }
            s.dM[i][j] = j <= i ? dm : 0.f;
            s.dinv[i][j] = dinvb * s.f.b[j];                        // dINV = dINVb diag(b)
            s.t1[i][j] = dinvb * s.f.inv[i][j];                     // db's INVb share, summed below
        }
    }
    __syncthreads();
    if (c < CHUNK) {                                                // column sums: INVb = INV diag(b)
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) acc += s.t1[i][c];
        s.db[c] = acc;
    }
    __syncthreads();
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {                             // t1 = INV^T dINV
        const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
        float acc = 0.f;
#pragma unroll
        for (int m = 0; m < CHUNK; ++m) acc = fmaf(s.f.inv[m][i], s.dinv[m][j], acc);
        s.t1[i][j] = acc;
    }
    __syncthreads();
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {                             // dL = -tril(t1 INV^T, -1); dA = diag(b) dL
        const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
        float acc = 0.f;
#pragma unroll
        for (int m = 0; m < CHUNK; ++m) acc = fmaf(s.t1[i][m], s.f.inv[j][m], acc);
        s.dinv[i][j] = j < i ? -acc : 0.f;                          // dinv now holds dL
    }
    __syncthreads();
    if (c < CHUNK) {                                                // L = diag(b) A: row sums
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) acc = fmaf(s.dinv[c][j], s.f.A[c][j], acc);
        s.db[c] += acc;
    }
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {
        const int e = c + rep * THREADS, i = e >> 4, j = e & 15;
        s.dA[i][j] = s.dinv[i][j] * s.f.b[i];
    }
    // §state products: across the chunk boundary
    const int64_t state_off = rh * static_cast<int64_t>(D) * D;
    state_products<BF16>(p, state_off, s);
    __syncthreads();
    // §tokens: thread c's channel, all 16 tokens; its inputs made again (cheaper than keeping them through the
    // products), dq and dk left in the X_q and X_k tiles (each thread its own column: no sync needed)
    load_channel<GF, IN>(p, s.rows, len, h, x);
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) { x.q[i] *= s.f.rq[i]; x.k[i] *= s.f.rk[i]; }
    // §token grads: thread c's dq and dk of q_hat and k_hat (into the X_q and X_k tiles, each thread its own column) and
    // da, the gradient of its log-decays. The fast path scales by em = e^(G - G_mid) and k / em (the chunk within the
    // floor: both in fp32's range); the exact path forms each decay e^(G_i - G_j), i >= j, of the sums itself.
    const bool exact = !within_floor<GF>(x.G[CHUNK - 1]);
    float da[CHUNK];
    const float last = x.G[CHUNK - 1], decay = expf(last), mid = x.G[MID];
    float em[CHUNK];                                   // em = exp(G - G_mid); k / em waits in the u tile (free now)
    float (&kdiv)[CHUNK][LD] = s.u;
    if (!exact) {
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            em[i] = __expf(x.G[i] - mid);
            kdiv[i][c] = __fdividef(x.k[i], em[i]);
        }
    }
    // da_i = sum_{t >= i} before_t + sum_{t < i} after_t + ddecay decay: the prefix now, the suffix below. The loop is
    // compiled once for each path (EXACT a compile-time constant), so that the fast path's unrolled products carry none
    // of the exact path's exponentials, predicated off but issued all the same
    auto token_grads = [&](auto exact_path) {
    constexpr bool EXACT = decltype(exact_path)::value;
    float prefix = s.ddecay[c] * decay;
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        const float eg = __expf(x.G[i]);
        const float xq = s.f.qd[i][c] * eg, xk = -s.f.kd[i][c] * eg;
        const float xr = s.f.ki[i][c] * __expf(last - x.G[i]);
        float rowM = 0.f, rowA = 0.f, col = 0.f;
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) {
            if constexpr (EXACT) {
                if (j < i) {
                    const float kj = x.k[j] * __expf(x.G[i] - x.G[j]);
                    rowM = fmaf(s.dM[i][j], kj, rowM);
                    rowA = fmaf(s.dA[i][j], kj, rowA);
                }
                if (j > i) col = fmaf(fmaf(s.dM[j][i], x.q[j], s.dA[j][i] * x.k[j]), __expf(x.G[j] - x.G[i]), col);
            } else {
                if (j < i) {
                    rowM = fmaf(s.dM[i][j], kdiv[j][c], rowM);
                    rowA = fmaf(s.dA[i][j], kdiv[j][c], rowA);
                }
                if (j > i) col = fmaf(fmaf(s.dM[j][i], x.q[j], s.dA[j][i] * x.k[j]), em[j], col);
            }
        }
        if constexpr (!EXACT) { rowM *= em[i]; rowA *= em[i]; col = __fdividef(col, em[i]); }
        const float dMd = s.dM[i][i];
        s.f.qd[i][c] = xq + rowM + dMd * x.k[i];                        // dq (of q_hat)
        s.f.kd[i][c] = xk + xr + rowA + col + dMd * x.q[i];             // dk (of k_hat)
        s.f.ki[i][c] = x.q[i] * (rowM + xq) + x.k[i] * (rowA + xk - col);   // before_i
        da[i] = prefix;
        prefix = fmaf(xr, x.k[i], prefix);                               // after_i = xr k
    }
    };
    if (exact) token_grads(std::true_type{});
    else token_grads(std::false_type{});
    {
        float acc = 0.f;
#pragma unroll
        for (int i = CHUNK - 1; i >= 0; --i) { acc += s.f.ki[i][c]; da[i] += acc; }
    }
    // §activations: l2 norms, the safe gate, beta
    float (&dg)[CHUNK][LD] = s.u;                      // free since the token loop: the gate's gradient waits there
    const bool l2 = norm_inside<FORMS>(p);             // else the norm's backward is the identity
    float sq[CHUNK], sk[CHUNK];
    if (l2) {
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) { sq[i] = x.q[i] * s.f.qd[i][c]; sk[i] = x.k[i] * s.f.kd[i][c]; }
        block_sum16(sq, s.f.red);
        block_sum16(sk, s.f.red);
    }
    float A, bias, w;
    gate_params<GF, FORMS>(p, h, c, A, bias, w);
    float dA_log = 0.f, ddt = 0.f;
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {                  // in place, each thread its own column; rows past len unused
        if (l2) {
            s.f.qd[i][c] = norm_backward(s.f.rq[i], s.f.qd[i][c], sq[i], x.q[i]);   // dq
            s.f.kd[i][c] = norm_backward(s.f.rk[i], s.f.kd[i][c], sk[i], x.k[i]);   // dk
        }
        const float z = i < len ? gate_arg<GF>(In<IN>::to_float(s.rows.g[i * D + c]), A, bias) : 0.f;
        dg[i][c] = gate_backward<GF>(da[i], z, A, scale_of<GF>(p, w), i < len, dA_log, ddt);
    }
    if (p.grads_in_type) store_grads<T>(p, s, tok0, len, h);          // rounded to the inputs' type (§input)
    else store_grads<float>(p, s, tok0, len, h);
    p.ddt_part[rh * D + c] = ddt;
    if (c < len) {
        const float x_beta = input_at<IN>(p.beta, (tok0 + c) * H + h);   // the caller's value of beta
        const float db = s.db[c] * beta_grad_slope<FORMS>(p.form.beta, x_beta);
        if (p.grads_in_type) static_cast<T*>(p.dbeta)[(tok0 + c) * H + h] = as_out<T>(db);
        else static_cast<float*>(p.dbeta)[(tok0 + c) * H + h] = db;
    }
    // the chunk's share of dA_log: a block sum of one value per thread
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dA_log += __shfl_xor_sync(0xffffffffu, dA_log, o);
    __syncthreads();
    if ((c & 31) == 0) s.f.red[c >> 5] = dA_log;
    __syncthreads();
    if (c == 0) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) acc += s.f.red[w];
        p.dA_part[rh] = acc;
    }
}
}  // namespace bwdc

// the call's form and the inputs' type pick the instance (kda_switch.h: dispatch_bwd)
cudaError_t launch_bwd_prepare(const PrepArgs& a, cudaStream_t stream) {
    if (a.rows == 0 || a.H == 0) return cudaSuccess;
    return dispatch_bwd(a.form.gate, a.form.beta, a.form.norm, a.input_kind, [&](auto gate, auto forms, auto in) {
        constexpr GateForm GF = static_cast<GateForm>(decltype(gate)::value);
        auto kernel = bwdc::kda_bwd_prepare<GF, decltype(forms)::value, decltype(in)::value>;
        kernel<<<dim3(static_cast<unsigned>(a.rows), a.H), bwdc::THREADS, 0, stream>>>(a);
        return cudaGetLastError();
    });
}

cudaError_t launch_bwd_adjoint(const AdjointArgs& a, cudaStream_t stream) {
    if (a.rows == 0 || a.H == 0) return cudaSuccess;
    return dispatch_bool(a.states_bf16, [&](auto states_bf16) {      // the chunks' states in bf16 or fp32
      return dispatch_bwd(a.form.gate, a.form.beta, a.form.norm, a.input_kind, [&](auto gate, auto forms, auto in) {
        constexpr bool BF16 = decltype(states_bf16)::value;
        constexpr GateForm GF = static_cast<GateForm>(decltype(gate)::value);
        constexpr int IN = decltype(in)::value;
        constexpr size_t smem = sizeof(bwdc::Adjoint<IN>);          // the same for either type
        auto kernel = bwdc::kda_bwd_adjoint<BF16, GF, decltype(forms)::value, IN>;
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        kernel<<<dim3(static_cast<unsigned>(a.rows), a.H), bwdc::THREADS, smem, stream>>>(a);
        return cudaGetLastError();
      });
    });
}

}  // namespace kda

// kda_chunk_prep.cuh: one warp's preparation of one (chunk, head) item. Everything of the chunked form that
// does not depend on the state: the activations (the norm, the gate and beta, in every form: the gate's a template
// parameter GF, beta's and the norm's uniform values of FwdArgs), the cumulative decay, the
// decayed / restored keys and decayed queries, the 16x16 matrices Mqk and (I + L)^-1 diag(beta), and
// the chunk's total decay, left as one record (layout in kda_common.cuh) at an address the caller
// gives. K1 (kda_fwd_prepare.cu) gives one in the workspace, for K2 to read back; the fused kernel's
// preparing warps (kda_fwd_fused.cu) give a stage of shared memory that the recurrence warps beside
// them read, so the record never leaves the SM.
//
// Lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8 of the chunk, and 32 of the 128 channels:
// 32 p + 8 t + e for p = 0..3, e = 0..7, i.e. 16 contiguous bytes of the inputs (bf16 or fp16: the template parameter
// IN, kda_common.cuh §input) per (row, p). That is
// exactly what the tf32 mma fragments need for L = kd ki^T and Mqk = qd ki^T, if the k-step
// kk = 4 p + e / 2 reads channel 32 p + 8 t + 2 (kk % 4) as its column t and the next channel as its
// column t + 4: the sum over channels only needs every channel once, in any order. So the keys and
// queries go from global memory to registers to the tensor cores to the record without a trip through
// shared memory; only the running sum of the gate over the rows (a sum across lanes) and the 16x16
// inverse use a small per-warp scratch.
#pragma once
#include "kda_activations.cuh"
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {

constexpr int GS = D + 4;    // fp32 row stride of the G scratch: conflict-free 16-byte accesses
constexpr int LS = CHUNK + 8;    // row stride of the 16x16 scratch: conflict-free 8-byte writes

struct K1Warp {              // one warp's scratch, 16.25 KB
    uint16_t qk[2][CHUNK][D];        // q and k as loaded (the inputs' elements); 16-byte piece P of row r sits at P ^ 4 (r & 1)
    union {
        float G[CHUNK][GS];          // the cumulative gate G, rows x channels
        struct {
            float L[CHUNK][LS];      // L, then |INV diag(beta)|, once G is no longer needed
            float beta[CHUNK];
            __half small[2][CHUNK][SROW];   // invb and mqk as the record holds them, written out 16 bytes a lane
        };
    };
};

// One unit of preparation: a (chunk, head) pair, by its head, first token and length (<= 16).
struct Item {
    int h, len;
    int64_t t0;
};

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ void sts4(float* p, float a, float b, float c, float d) {
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}

// What a warp fetches ahead for its next item: where it is, its gate rows (lane l: channels 4 l .. 4 l + 3
// of each of the 16 rows), its two betas (rows g, g + 8) and its head's gate parameters, as the inputs' elements. The
// q and k rows go to the scratch by cp.async.
template <int IN>
struct Fetched {
    Item it;
    uint2 graw[CHUNK];
    typename In<IN>::T beta[2];   // the logits
    float4 bias;             // dt_bias of the lane's 4 channels
    float A_log;
};

// §load: the gate rows and betas into registers, and q and k rows g and g + 8 into the scratch by
// cp.async, 16 bytes per (row, p); zeros past the sequence's end (identity tokens). Piece P of row r
// goes to P ^ 4 (r & 1): the lanes of a quarter warp, rows g and g + 1, then read disjoint banks.
// A warp asks for the next item's gate rows as soon as it has used the current ones, and for its q and
// k rows as soon as the current ones are used (prep_item), so the loads overlap the current item's
// arithmetic.
template <GateForm GF, bool DIMS, int IN>
__device__ __forceinline__ void prep_fetch(const FwdArgs& p, Fetched<IN>& f, int lane) {   // loads only: nothing waits
    using T = typename In<IN>::T;
    const int g = lane >> 2, H = p.H;
    const int KD = DIMS ? p.dim_k : D;
    const bool kin = !DIMS || 4 * lane < KD;
    const int64_t HD = static_cast<int64_t>(H) * KD;
    const int last = f.it.len - 1;                  // rows past the end re-read the last one; masked at use
    const T* gp = kin ? static_cast<const T*>(p.g) + f.it.t0 * HD + f.it.h * KD + 4 * lane
                      : static_cast<const T*>(p.g) + f.it.t0 * HD + f.it.h * KD;
#pragma unroll
    for (int r = 0; r < CHUNK; ++r)
        f.graw[r] = kin ? __ldg(reinterpret_cast<const uint2*>(gp + min(r, last) * HD)) : make_uint2(0u, 0u);
    const T* beta_g = static_cast<const T*>(p.beta);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) f.beta[hf] = beta_g[(f.it.t0 + min(g + 8 * hf, last)) * H + f.it.h];
    if constexpr (GF != GateForm::Given) {         // the given gate has no A_log, no dt_bias
        f.bias = kin ? __ldg(reinterpret_cast<const float4*>(p.dt_bias + f.it.h * KD + 4 * lane)) : make_float4(0.f, 0.f, 0.f, 0.f);
        f.A_log = __ldg(p.A_log + f.it.h);
    } else {
        f.bias = make_float4(0.f, 0.f, 0.f, 0.f);
        f.A_log = 0.f;
    }
}
template <bool FORMS, bool DIMS, int IN>
__device__ __forceinline__ void prep_fetch_qk(const FwdArgs& p, const Item& it, K1Warp& sm, int lane) {
    using T = typename In<IN>::T;
    const int g = lane >> 2, t = lane & 3;
    const int shift = group_shift_of<FORMS>(p);
    const int KD = DIMS ? p.dim_k : D;
    const int64_t HD = static_cast<int64_t>(p.H >> shift) * KD;   // q and k: H / 2^group_shift heads (GVA)
    const int hq = it.h >> shift;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = g + 8 * hf;
        const bool in = r < it.len;
        const int64_t off = (in ? (it.t0 + r) * HD : it.t0 * HD) + hq * KD;
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4) {
            const int piece = (4 * q4 + t) ^ (4 * (r & 1));
            const bool kin = !DIMS || 32 * q4 + 8 * t < KD;           // channels >= K: zeros, nothing read
            cp_async16(&sm.qk[0][r][8 * piece], kin ? static_cast<const T*>(p.q) + off + 32 * q4 + 8 * t
                                                    : static_cast<const T*>(p.q) + off, in && kin ? 16 : 0);
            cp_async16(&sm.qk[1][r][8 * piece], kin ? static_cast<const T*>(p.k) + off + 32 * q4 + 8 * t
                                                    : static_cast<const T*>(p.k) + off, in && kin ? 16 : 0);
        }
    }
    cp_async_commit();
}

// §dims: K below 128 (DIMS: K = FwdArgs::dim_k, a multiple of 8; without it 128): g is [.., K], dt_bias [H, K], q and
// k [.., K], read at those strides. A lane's 4 gate channels and each of its 16-byte pieces of q and k lie all below K
// or all at or above it; those at or above K are not read and stand as zeros (prep_fetch, prep_fetch_qk), exactly the
// values of inputs zero-padded to 128, so the record is the padded call's, bit for bit. Zeros are exact: a zero channel
// adds nothing to |q|^2 and |k|^2, so the norms are the K channels'; its kd, qd, kr are 0 (k_hat and q_hat are 0 there,
// whatever 2^G the gate's g = 0 and dt_bias = 0 make), so it adds nothing to L = kd ki^T or to Mqk; and its decay,
// finite and in [0, 1], only ever multiplies the state's column there, which is 0 (kda_recurrence.cuh §dims).
// §decay: lane l takes channels 4 l .. 4 l + 3 down the 16 rows: the gate's log-decay in base 2 (the safe gate:
// lb2 * sigmoid(A (g + bias)); the softplus gate: -A log2(e) softplus(g + bias); a given gate: log2(e) g), summed
// over the rows into G, the cumulative decay, written to the scratch for the lanes that need it in the mma layout.
// The last row's G is the chunk's total decay. The safe gate has G >= 16 * lower_bound * log2(e) >= -116, so 2^G
// and 2^-G are normal floats: the split (decayed_keys). The unbounded gates test it per chunk: true (the split)
// where every |G| of the chunk is <= SPLIT_FLOOR, on every channel (a vote of the warp), else false (the exact
// path, decayed_keys_exact).
constexpr float SPLIT_FLOOR = 116.f;     // 16 * 5 * log2(e) = 115.4: the safe gate's own worst chunk
template <GateForm GF, int IN>
__device__ __forceinline__ bool gate_decay(const FwdArgs& p, const Fetched<IN>& f, K1Warp& sm, uint8_t* rec, int len,
                                           int lane) {
    const float A = GF == GateForm::Given ? 1.f : gate_rate<GF>(f.A_log);
    const float lb2 = GF == GateForm::SafeSigmoid ? p.lower_bound * LOG2E : gate_scale<GF>(A, p.lower_bound) * LOG2E;
    const float4 bias = f.bias;
    float4 run = make_float4(0.f, 0.f, 0.f, 0.f);
    float big = 0.f;                               // the largest |G| of the lane's channels (unbounded gates)
#pragma unroll
    for (int r = 0; r < CHUNK; ++r) {              // straight-line code: the 16 rows' sigmoids overlap
        const float w = r < len ? lb2 : 0.f;    // rows past the end hold the last row again: weight 0
        const float2 a = In<IN>::unpack(f.graw[r].x), b = In<IN>::unpack(f.graw[r].y);
        run.x += log_decay<GF>(gate_arg<GF>(a.x, A, bias.x), w);
        run.y += log_decay<GF>(gate_arg<GF>(a.y, A, bias.y), w);
        run.z += log_decay<GF>(gate_arg<GF>(b.x, A, bias.z), w);
        run.w += log_decay<GF>(gate_arg<GF>(b.y, A, bias.w), w);
        if constexpr (GF != GateForm::SafeSigmoid)
            big = fmaxf(big, fmaxf(fmaxf(fabsf(run.x), fabsf(run.y)), fmaxf(fabsf(run.z), fabsf(run.w))));
        sts4(&sm.G[r][4 * lane], run.x, run.y, run.z, run.w);
    }
    *reinterpret_cast<float4*>(rec + REC_DECAY + 16 * lane) =
        make_float4(fast_exp2(run.x), fast_exp2(run.y), fast_exp2(run.z), fast_exp2(run.w));   // 0 below fp32's range
    if constexpr (GF == GateForm::SafeSigmoid) {
        return true;
    } else {
        const bool split = __all_sync(0xffffffffu, big <= SPLIT_FLOOR);
        if (!split) {                              // the exact path: each row's own log-decay in place of G (the lane's
#pragma unroll                                     // own channels: no other lane reads them before prep_item syncs)
            for (int r = 0; r < CHUNK; ++r) {
                const float2 a = In<IN>::unpack(f.graw[r].x), b = In<IN>::unpack(f.graw[r].y);
                const bool in = r < len;           // rows past the end: 0
                sts4(&sm.G[r][4 * lane], in ? log_decay<GF>(gate_arg<GF>(a.x, A, bias.x), lb2) : 0.f,
                     in ? log_decay<GF>(gate_arg<GF>(a.y, A, bias.y), lb2) : 0.f,
                     in ? log_decay<GF>(gate_arg<GF>(b.x, A, bias.z), lb2) : 0.f,
                     in ? log_decay<GF>(gate_arg<GF>(b.y, A, bias.w), lb2) : 0.f);
            }
        }
        return split;
    }
}

// Lane (g, t)'s 16-byte piece q4 of row g + 8 hf of q (which = 0) or k (1), as loaded into the scratch
__device__ __forceinline__ uint4 raw_qk(const K1Warp& sm, int which, int hf, int q4, int lane) {
    const int g = lane >> 2, t = lane & 3, r = g + 8 * hf;
    return *reinterpret_cast<const uint4*>(&sm.qk[which][r][8 * ((4 * q4 + t) ^ (4 * (r & 1)))]);
}

// §norms: 1 / sqrt(|q|^2 + 1e-6) of rows g and g + 8: the lane's 32 channels, then the 4 lanes of the row
template <int IN>
__device__ __forceinline__ void row_norms(const K1Warp& sm, int lane, int norm_form, float (&rq)[2], float (&rk)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4) {
            const uint4 qa = raw_qk(sm, 0, hf, q4, lane), ka = raw_qk(sm, 1, hf, q4, lane);
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const float2 a = In<IN>::unpack(word(qa, w)), b = In<IN>::unpack(word(ka, w));
                sq = fmaf(a.x, a.x, fmaf(a.y, a.y, sq));
                sk = fmaf(b.x, b.x, fmaf(b.y, b.y, sk));
            }
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
        }
        rq[hf] = inv_norm_value(norm_form, sq);    // 1 where the caller normalised
        rk[hf] = inv_norm_value(norm_form, sk);
    }
}

// §lmqk: per k-step, the lane's 2 rows x 2 channels of kd = k_hat 2^G, qd = q_hat 2^G, ki = k_hat 2^-G
// and kr = k_hat 2^(G_last - G). kd, qd, kr are packed and stored to the record 16 bytes at a time
// (each warp store covers 8 rows x 64 contiguous bytes); kd, qd, ki feed L = kd ki^T and
// Mqk = qd ki^T on the tensor cores, to fp32 accuracy with the 3xTF32 split. A fragment (kd or qd):
// a[0] = (row g, col t), a[1] = (g + 8, t), a[2] = (g, t + 4), a[3] = (g + 8, t + 4). B fragment of
// n-tile nt (ki rows 8 nt .. 8 nt + 7): b0 = (k = t, n = g), b1 = (t + 4, g): the lane's own row g + 8 nt.
// kd and qd are stored bf16 whatever the inputs' type (kda_common.cuh §input: 2^G reaches below fp16's range).
template <int IN>
__device__ __forceinline__ void decayed_keys(const K1Warp& sm, const float (&rq)[2], const float (&rk)[2], uint8_t* rec,
                                             int lane, float (&Lacc)[2][4], float (&Macc)[2][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 1                                       // one 8-channel slice at a time keeps 4 blocks' worth of registers
    for (int q4 = 0; q4 < 4; ++q4) {
        const uint4 qa[2] = {raw_qk(sm, 0, 0, q4, lane), raw_qk(sm, 0, 1, q4, lane)},
                     ka[2] = {raw_qk(sm, 1, 0, q4, lane), raw_qk(sm, 1, 1, q4, lane)};
        uint32_t okd[2][4], oqd[2][4], okr[2][4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {                  // k-step 4 q4 + w: channels 32 q4 + 8 t + 2 w (+1)
            float kd[2][2], qd[2][2], ki[2][2];        // [row g / g + 8][column t / t + 4]
            const float2 Gl = *reinterpret_cast<const float2*>(&sm.G[CHUNK - 1][32 * q4 + 8 * t + 2 * w]);
            const float el[2] = {fast_exp2(Gl.x), fast_exp2(Gl.y)};   // the chunk's decay: 2^G_last >= 2^-116
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float2 kk = In<IN>::unpack(word(ka[hf], w)), qq = In<IN>::unpack(word(qa[hf], w));
                const float2 Gv = *reinterpret_cast<const float2*>(&sm.G[g + 8 * hf][32 * q4 + 8 * t + 2 * w]);
                float kr[2];
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const float G = c ? Gv.y : Gv.x;
                    const float e = fast_exp2(G), ei = fast_exp2(-G);
                    const float kh = (c ? kk.y : kk.x) * rk[hf], qh = (c ? qq.y : qq.x) * rq[hf];
                    kd[hf][c] = kh * e;
                    qd[hf][c] = qh * e;           // unscaled: K2 applies the output scale
                    ki[hf][c] = kh * ei;
                    kr[c] = ki[hf][c] * el[c];     // k_hat 2^(G_last - G) <= |k_hat|: fp16 is safe
                }
                okd[hf][w] = pack_bf16(kd[hf][0], kd[hf][1]);
                oqd[hf][w] = pack_bf16(qd[hf][0], qd[hf][1]);
                okr[hf][w] = pack_f16(kr[0], kr[1]);
            }
            uint32_t kh4[4], kl4[4], qh4[4], ql4[4], bh[2][2], bl[2][2];
            split_tf32(kd[0][0], kh4[0], kl4[0]); split_tf32(kd[1][0], kh4[1], kl4[1]);
            split_tf32(kd[0][1], kh4[2], kl4[2]); split_tf32(kd[1][1], kh4[3], kl4[3]);
            split_tf32(qd[0][0], qh4[0], ql4[0]); split_tf32(qd[1][0], qh4[1], ql4[1]);
            split_tf32(qd[0][1], qh4[2], ql4[2]); split_tf32(qd[1][1], qh4[3], ql4[3]);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                split_tf32(ki[nt][0], bh[nt][0], bl[nt][0]);
                split_tf32(ki[nt][1], bh[nt][1], bl[nt][1]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                mma3(Lacc[nt], kh4, kl4, bh[nt][0], bl[nt][0], bh[nt][1], bl[nt][1]);
                mma3(Macc[nt], qh4, ql4, bh[nt][0], bl[nt][0], bh[nt][1], bl[nt][1]);
            }
        }
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int at = 2 * swz_row(g + 8 * hf, 4 * q4 + t);   // bytes
            *reinterpret_cast<uint4*>(rec + REC_KD + at) = make_uint4(okd[hf][0], okd[hf][1], okd[hf][2], okd[hf][3]);
            *reinterpret_cast<uint4*>(rec + REC_QD + at) = make_uint4(oqd[hf][0], oqd[hf][1], oqd[hf][2], oqd[hf][3]);
            *reinterpret_cast<uint4*>(rec + REC_KR + at) = make_uint4(okr[hf][0], okr[hf][1], okr[hf][2], okr[hf][3]);
        }
    }
}

// §exact: the exact path of a chunk whose |G| passes SPLIT_FLOOR somewhere (the unbounded gates only). gate_decay
// has left the per-token log-decays a_r (base 2) in the scratch instead of G, and every exponent below is a sum of
// them over the rows it spans, never a difference of two cumulative sums: where a masked token puts G near -1443, the
// decays between the tokens after it keep fp32's relative precision. Only decays in [0, 1] are formed, so none
// overflows, and those below fp32's range come out 0 (never NaN or inf, -inf log-decays included):
// kd = k_hat 2^(sum r <= i), qd = q_hat 2^(sum r <= i), kr = k_hat 2^(sum r > i), stored as decayed_keys stores them;
// and the lane's 8 entries of L and Mqk in the C-fragment layout of decayed_keys's mma (rows i = g, g + 8; columns
// j = 8 nt + 2 t + e), sum_c x_ic k_jc 2^(T_ijc) with T_ij = sum of a_r over j < r <= i, for j <= i, on the CUDA cores
// (the entries above the diagonal stay 0: prep_item masks them). The norms of the columns' rows come by shuffles.
template <int IN>
__device__ __forceinline__ float2 input2_of(const K1Warp& sm, int which, int r, int c) {   // channels c, c + 1 (c even)
    return In<IN>::unpack(*reinterpret_cast<const uint32_t*>(&sm.qk[which][r][8 * ((c >> 3) ^ (4 * (r & 1))) + (c & 7)]));
}
__device__ __forceinline__ float2 logs_of(const K1Warp& sm, int r, int c) {   // a_r of channels c, c + 1
    return *reinterpret_cast<const float2*>(&sm.G[r][c]);
}
__device__ __forceinline__ float2 add2(float2 x, float2 y) { return make_float2(x.x + y.x, x.y + y.y); }
template <int IN>
__device__ __forceinline__ void decayed_keys_exact(const K1Warp& sm, const float (&rq)[2], const float (&rk)[2],
                                                   uint8_t* rec, int lane, float (&Lacc)[2][4], float (&Macc)[2][4]) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
    for (int q4 = 0; q4 < 4; ++q4) {
        uint32_t okd[2][4], oqd[2][4], okr[2][4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int c = 32 * q4 + 8 * t + 2 * w;
            // prefix sums (rows <= g, <= g + 8) and suffix sums (rows > g, > g + 8), in one walk down the rows
            const float2 zero = make_float2(0.f, 0.f);
            float2 pre[2] = {zero, zero}, suf[2] = {zero, zero};
#pragma unroll 1
            for (int r = 0; r < CHUNK; ++r) {
                const float2 a = logs_of(sm, r, c);
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    if (r <= g + 8 * hf) pre[hf] = add2(pre[hf], a);
                    else suf[hf] = add2(suf[hf], a);
                }
            }
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float2 kk = input2_of<IN>(sm, 1, g + 8 * hf, c), qq = input2_of<IN>(sm, 0, g + 8 * hf, c);
                const float e0 = fast_exp2(pre[hf].x), e1 = fast_exp2(pre[hf].y);
                const float kh0 = kk.x * rk[hf], kh1 = kk.y * rk[hf];
                okd[hf][w] = pack_bf16(kh0 * e0, kh1 * e1);
                oqd[hf][w] = pack_bf16(qq.x * rq[hf] * e0, qq.y * rq[hf] * e1);   // unscaled: K2 applies the output scale
                okr[hf][w] = pack_f16(kh0 * fast_exp2(suf[hf].x), kh1 * fast_exp2(suf[hf].y));
            }
        }
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int at = 2 * swz_row(g + 8 * hf, 4 * q4 + t);
            *reinterpret_cast<uint4*>(rec + REC_KD + at) = make_uint4(okd[hf][0], okd[hf][1], okd[hf][2], okd[hf][3]);
            *reinterpret_cast<uint4*>(rec + REC_QD + at) = make_uint4(oqd[hf][0], oqd[hf][1], oqd[hf][2], oqd[hf][3]);
            *reinterpret_cast<uint4*>(rec + REC_KR + at) = make_uint4(okr[hf][0], okr[hf][1], okr[hf][2], okr[hf][3]);
        }
    }
    // the lane's columns j = 8 nt + 2 t + e, as x = 2 nt + e
    int jj[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) jj[x] = 8 * (x >> 1) + 2 * t + (x & 1);
#pragma unroll 1
    for (int hf = 0; hf < 2; ++hf) {
        const int i = g + 8 * hf;
        float l[4] = {}, m[4] = {};
#pragma unroll 1
        for (int c = 0; c < D; c += 2) {
            const float2 zero = make_float2(0.f, 0.f);
            // T over (9 + 2t, i]: rows 10 + 2t .. i (at most 6 of them); T over (2t + 1, i] adds rows 2t + 2 .. 9 + 2t
            float2 hi = zero;
#pragma unroll 1
            for (int d = 0; d < 6; ++d) {
                const int r = 10 + 2 * t + d;
                const float2 a = logs_of(sm, min(r, CHUNK - 1), c);
                if (r <= i) hi = add2(hi, a);
            }
            float2 lo = hi;
#pragma unroll 1
            for (int d = 0; d < 8; ++d) {
                const int r = 2 * t + 2 + d;
                const float2 a = logs_of(sm, r, c);
                if (r <= i) lo = add2(lo, a);
            }
            float2 T[4];
            T[1] = lo;                                               // j = 2t + 1
            T[0] = add2(lo, logs_of(sm, 2 * t + 1, c));             // j = 2t
            T[3] = hi;                                               // j = 9 + 2t
            T[2] = add2(hi, logs_of(sm, 9 + 2 * t, c));             // j = 8 + 2t
            const float2 ki = input2_of<IN>(sm, 1, i, c), qi = input2_of<IN>(sm, 0, i, c);
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                if (jj[x] > i) continue;                             // above the diagonal
                const float2 kj = input2_of<IN>(sm, 1, jj[x], c);
                const float e0 = jj[x] == i ? 1.f : fast_exp2(T[x].x), e1 = jj[x] == i ? 1.f : fast_exp2(T[x].y);
                const float k0 = kj.x * e0, k1 = kj.y * e1;
                l[x] = fmaf(ki.x, k0, fmaf(ki.y, k1, l[x]));
                m[x] = fmaf(qi.x, k0, fmaf(qi.y, k1, m[x]));
            }
        }
        // the norms of the columns' rows: lane 4 (2 t + e) holds row 8 nt + 2 t + e as its row g + 8 nt
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const float rkj = __shfl_sync(0xffffffffu, rk[x >> 1], 4 * (2 * t + (x & 1)));
            l[x] *= rkj;
            m[x] *= rkj;
        }
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)                               // static indices into the fragments
            if (h2 == hf) {
#pragma unroll
                for (int x = 0; x < 4; ++x) {
                    Lacc[x >> 1][2 * h2 + (x & 1)] = l[x] * rk[h2];
                    Macc[x >> 1][2 * h2 + (x & 1)] = m[x] * rq[h2];
                }
            }
    }
}

// §inverse: X = (I + L)^-1 by forward substitution, X_i = e_i - sum_{m < i} L_im X_m, one column per
// lane (lanes 16..31 repeat lanes 0..15). The rows of L are read as 16-byte broadcasts; all 16 rows
// of the lane's column stay in registers.
__device__ __forceinline__ void inverse_column(const K1Warp& sm, int lane, float (&X)[CHUNK]) {
    const int j = lane & 15;
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        float s = i == j ? 1.f : 0.f;
#pragma unroll
        for (int m4 = 0; m4 < i; m4 += 4) {
            const float4 l = lds4(&sm.L[i][m4]);
            s = fmaf(-l.x, X[m4], s);
            if (m4 + 1 < i) s = fmaf(-l.y, X[m4 + 1], s);
            if (m4 + 2 < i) s = fmaf(-l.z, X[m4 + 2], s);
            if (m4 + 3 < i) s = fmaf(-l.w, X[m4 + 3], s);
        }
        X[i] = s;
    }
}

// The item f.it, whose loads prep_fetch and prep_fetch_qk have issued, into the record at `rec` (global
// or shared memory). next(Item&) says whether the warp has a next item and which: its loads are issued
// here, into f and the scratch, as soon as the current ones are used.
template <GateForm GF, bool FORMS, bool DIMS, int IN, class Next>
__device__ __forceinline__ void prep_item(const FwdArgs& p, Fetched<IN>& f, K1Warp& sm, uint8_t* rec, Next&& next, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const int len = f.it.len;
    float beta[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) beta[hf] = g + 8 * hf < len ? beta_value(beta_form_of<FORMS>(p), In<IN>::to_float(f.beta[hf])) : 0.f;

    const bool split = gate_decay<GF, IN>(p, f, sm, rec, len, lane);
    Item nx;
    const bool more = next(nx);
    if (more) { f.it = nx; prep_fetch<GF, DIMS, IN>(p, f, lane); }     // the next item's gate rows, while this one computes
    cp_async_wait<0>();                                 // this item's q and k rows
    __syncwarp();

    float rq[2], rk[2];
    row_norms<IN>(sm, lane, norm_form_of<FORMS>(p), rq, rk);

    float Lacc[2][4] = {}, Macc[2][4] = {};
    if constexpr (GF == GateForm::SafeSigmoid) decayed_keys<IN>(sm, rq, rk, rec, lane, Lacc, Macc);
    else if (split) decayed_keys<IN>(sm, rq, rk, rec, lane, Lacc, Macc);     // warp-uniform
    else decayed_keys_exact<IN>(sm, rq, rk, rec, lane, Lacc, Macc);
    __syncwarp();                                     // every lane is done with q and k: fetch the next item's
    if (more) prep_fetch_qk<FORMS, DIMS, IN>(p, f.it, sm, lane);

    // L (strictly lower, row i times beta_i) to the scratch; Mqk (lower, diagonal included) to the scratch's
    // copy of the record's small matrices.
    // C fragment of n-tile nt: (row g, cols 8 nt + 2 t, +1) and (row g + 8, same cols).
    __syncwarp();                                     // every lane is done reading G: L and beta take its place
    if (t == 0) { sm.beta[g] = beta[0]; sm.beta[g + 8] = beta[1]; }
    __half* mqk = &sm.small[1][0][0];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int i = g + 8 * hf, j = 8 * nt + 2 * t;
            const float l0 = Lacc[nt][2 * hf] * beta[hf];
            const float l1 = Lacc[nt][2 * hf + 1] * beta[hf];
            *reinterpret_cast<float2*>(&sm.L[i][j]) = make_float2(j < i ? l0 : 0.f, j + 1 < i ? l1 : 0.f);
            const float m0 = Macc[nt][2 * hf], m1 = Macc[nt][2 * hf + 1];
            *reinterpret_cast<__half2*>(mqk + swz_small(i, nt) + 2 * t) = __floats2half2_rn(j <= i ? m0 : 0.f, j + 1 <= i ? m1 : 0.f);
        }
    __syncwarp();

    float X[CHUNK];
    inverse_column(sm, lane, X);

    // §invb: fold beta into the inverse's columns, store fp16, and the largest row sum of |INV diag(beta)|
    const int j = lane & 15;
    const float bj = sm.beta[j];
    __syncwarp();                                     // every lane is done reading L
    __half* invb = &sm.small[0][0][0];
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
        const float x = X[i] * bj;
        if (lane < CHUNK) {
            invb[swz_small(i, j >> 3) + (j & 7)] = __float2half_rn(x);
            sm.L[i][j] = fabsf(x);
        }
    }
    __syncwarp();
    float row = 0.f;
    if (lane < CHUNK) {
#pragma unroll
        for (int m4 = 0; m4 < CHUNK; m4 += 4) {
            const float4 a = lds4(&sm.L[lane][m4]);
            row += (a.x + a.y) + (a.z + a.w);
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) row = fmaxf(row, __shfl_xor_sync(0xffffffffu, row, o));
    if (lane == 0) *reinterpret_cast<float4*>(rec + REC_NORM) = make_float4(row, 0.f, 0.f, 0.f);
    // invb and mqk, 1 KB contiguous in the record, 16 bytes per lane and store
    static_assert(REC_MQK == REC_INVB + CHUNK * SROW * 2 && sizeof(sm.small) == 2 * CHUNK * SROW * 2, "invb, mqk adjacent");
#pragma unroll
    for (int i = lane; i < 2 * CHUNK * SROW * 2 / 16; i += 32)
        *reinterpret_cast<uint4*>(rec + REC_INVB + 16 * i) = reinterpret_cast<const uint4*>(&sm.small[0][0][0])[i];
    __syncwarp();                                     // the scratch is free for the next item
}

}  // namespace kda

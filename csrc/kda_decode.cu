// kda_decode.cu: K3 "decode", the token recurrence itself, for batches of short sequences (serving: one
// token per sequence, or a few with speculative decoding). Each state is read once, updated token by
// token in registers, and written once, so the call costs about the state's bytes and one launch:
// no layout kernel, no workspace, no record.
//
// One block per (sequence, head, pair of slices), 4 warps; a slice is DEC_VB = 32 contiguous rows of the
// state (16 KB in fp32). At its start the block asks the bulk copy engine for both of its slices, each
// into its own buffer with its own barrier, and then runs them one after the other: while it updates and
// writes the first, the second is on its way. A block keeps no registers busy waiting for the copies,
// and with two slices in flight per block an SM keeps twice the bytes in flight that one slice per block
// would (with one, 256 sequences of one token at H = 32 took 1.43x the time of the state's bytes at the H200's
// bandwidth), which is what a memory-bound kernel needs. Meanwhile the block stages the tokens, DEC_TILE at a time: thread c loads
// channel c of q, k, g and computes, once per block, the normalised query and key (sums of squares
// across the block) and the decay exp(a_c) of the gate (its form a template parameter, GF; beta's and the norm's
// forms uniform values of DecodeArgs); beta and the slice's values come along.
// Then a state row (one value channel, 128 key channels) is held in registers by 8 neighbouring lanes,
// 16 channels each as four pieces of 4 (lane j: channels 32 m + 4 j .. + 3, m = 0..3), two rows per
// thread, and per token, with b = sigmoid(beta):
//   S <- S diag(exp a);  e = v - S k^;  S <- S + b e k^T;  o = scale S q^     (all in fp32)
// The row sums (S k^ and S q^) are shuffles across the 8 lanes.
//
// Per-token stores (DecodeArgs::token_slots, kda_nb.serving's one-launch verification): the instance with STORES
// also writes the state after token t of sequence n into the pool slot token_slots[n, t] names, from the registers
// as the state out is written, and writes the state out only where write_final says. Each value of the table is
// checked against the pool before its store (outside [0, n_slots): no store), and the table is read only inside
// its [N, W] extent, so no value of it, however wrong, sends a write outside the pool. Without a table the
// instance without STORES runs: the kernel as it is without the feature.
//
// §four rows: the eager instances with R = 4 (DecodeArgs::k3_rows, kda_nb.plan's K3_FOUR_ROWS) hold both slices in
// registers, four rows a thread (lane j of row group r: rows 16 w + r + 4 i, i = 0..3), and update them in one pass per
// token instead of one pass per slice: half the token steps a block runs one after the other, each with twice the
// independent rows, and each piece of decay, k^ and q^ read from shared memory once for four rows. Both bulk copies
// are waited for before the pass. A row's arithmetic is the one of R = 2 in the same order, so the outputs and states
// are the same bits; a warp's outputs are two 16-byte stores (lanes 0 and 1).
//
// The inputs' element type (IN, kda_common.cuh §input: bf16 or fp16) is a template parameter: it reaches the reads
// of q, k, v, g, beta (widened to fp32 at once) and the outputs' store only; the token step is all fp32 either way.
#include "kda_activations.cuh"
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {

constexpr int DEC_WARPS = 4;
constexpr int DEC_THREADS = 32 * DEC_WARPS;                   // = D: thread c stages channel c
constexpr int DEC_LANES = 8;                                  // lanes per state row
constexpr int DEC_ROWS = 2;                                   // rows per thread (the instances with R = 4: four, §four rows)
constexpr int DEC_VB = DEC_WARPS * (32 / DEC_LANES) * DEC_ROWS;   // 32 rows per slice
constexpr int DEC_SPLIT = D / DEC_VB;                         // 4 slices per (sequence, head)
constexpr int DEC_SLICES = 2;                                 // slices per block, copied at once
constexpr int DEC_BLOCK_ROWS = DEC_SLICES * DEC_VB;           // 64 state rows (value channels) per block
constexpr int DEC_PAIRS = DEC_SPLIT / DEC_SLICES;             // 2 blocks per (sequence, head)
constexpr int DEC_PIECES = D / (4 * DEC_LANES);               // 4 pieces of 4 channels per lane and row
constexpr int DEC_TILE = 8;                                   // tokens staged at a time
constexpr int DEC_MIN_BLOCKS = 4;                             // resident blocks per SM the registers must allow (5: spills)
static_assert(DEC_THREADS == D, "one staging thread per channel");
static_assert(DEC_ROWS == 2, "8 rows per warp: one 16-byte store of a token's outputs");
static_assert(DEC_BLOCK_ROWS <= DEC_THREADS && DEC_SPLIT % DEC_SLICES == 0, "a block's values staged by one thread each");

struct DecodeSmem {
    float state[DEC_SLICES][DEC_VB * D];      // the slices as the bulk copies left them (bf16 states use half)
    float qh[DEC_TILE][D], kh[DEC_TILE][D], decay[DEC_TILE][D];
    float v[DEC_TILE][DEC_BLOCK_ROWS];
    float b[DEC_TILE];
    float sums[DEC_TILE][DEC_WARPS][2];
    float o[DEC_BLOCK_ROWS];                  // one token's outputs of the rows updated, on their way to 16-byte stores
    int64_t red[DEC_WARPS];
    uint64_t bar[DEC_SLICES];
};

__device__ __forceinline__ float4 bf16x4(uint2 u) { return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y)); }

// §bounds: the sequence's tokens [t0, t1) = [safe[n], safe[n + 1]) by the safe-offset rule of
// kda_layout.cuh, from the caller's offsets cu: the running maximum is a block-wide reduction over cu[0..n]
// (started at 0), so no value of cu, however wrong, sends a read or write outside the tensors; a
// fixed-length batch has n * T.
template <bool REPLAY = false>
__device__ __forceinline__ void decode_bounds(const DecodeArgs& p, int n, int64_t& t0, int64_t& t1,
                                              int64_t* red) {
    if (!p.cu_seqlens) {
        t0 = n * p.seq_len;
        t1 = t0 + p.seq_len;
        return;
    }
    int64_t m = 0;
#pragma unroll 4
    for (int j = threadIdx.x; j <= n; j += DEC_THREADS) m = max(m, __ldg(p.cu_seqlens + j));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < DEC_WARPS; ++w) m = max(m, red[w]);
    const int64_t total = REPLAY ? p.replay_total : p.total;      // (§replay: the sequences' tokens)
    t0 = safe_offset(m, total);
    t1 = safe_offset(max(m, __ldg(p.cu_seqlens + n + 1)), total);
}

// Zero rows [a, b) of this block's columns of `out` (head h): padding sequences and tokens no sequence covers.
template <bool DIMS, int IN>
__device__ __forceinline__ void zero_rows(const DecodeArgs& p, int h, int vbase, int64_t a, int64_t b, int vd) {
    typename In<IN>::T* out = static_cast<typename In<IN>::T*>(p.out);
    for (int64_t i = threadIdx.x; i < (b - a) * (DEC_BLOCK_ROWS / 8); i += DEC_THREADS) {
        const int64_t tok = a + i / (DEC_BLOCK_ROWS / 8);
        if (!DIMS || vbase + 8 * (i % (DEC_BLOCK_ROWS / 8)) < vd)
            *reinterpret_cast<uint4*>(out + (tok * p.H + h) * vd + vbase + 8 * (i % (DEC_BLOCK_ROWS / 8))) = make_uint4(0, 0, 0, 0);
    }
}

// §replay: K3's instances with REPLAY (DecodeArgs::replay_table, kda_nb.serving's replay read in place) take a sequence's
// first j tokens from the draft records and the rest from the batch, so that no copy gathers them into one batch first.
// Sequence n is a sequence of the caller's offsets cu (the replayed tokens and the new ones, up to replay_total tokens
// in all); its token t below j = min(replay_table[n], its length, rec_per_slot) is record row slot * rec_per_slot + t
// (q read from the records' keys: a replayed token's output is not written), token t >= j batch row
// replay_table[N + n] + t - j, written to `out` at that row if it lies in [0, total), else neither read nor written.
// Nothing else of `out` is written: the caller zeroes it first. With the slot outside the pool nothing is read.
// §replayed: a token of the records updates the state with the same arithmetic as any token (the same bits), and skips
// the sums of S q^ across a row's lanes and the output, which no one reads.
struct ReplayRows {
    int64_t rec0 = 0, new0 = 0;   // the sequence's first record row, and the batch row of its first new token
    int j = 0;                    // its tokens read from the records
};
template <bool REPLAY>
__device__ __forceinline__ ReplayRows replay_rows(const DecodeArgs& p, int n, int len, bool has_slot) {
    ReplayRows r;
    if constexpr (REPLAY) {
        int64_t slot = n;
        if (p.state_slot) slot = p.slot_int32 ? static_cast<const int*>(p.state_slot)[n]
                                              : static_cast<const int64_t*>(p.state_slot)[n];
        const int64_t j = has_slot ? min(max(p.replay_table[n], int64_t(0)), min(int64_t(len), p.rec_per_slot)) : 0;
        r.j = static_cast<int>(j);
        r.rec0 = has_slot ? slot * p.rec_per_slot : 0;
        r.new0 = p.replay_table[p.n_seq + n];
    }
    return r;
}
// token t of the sequence: its row, whether from the records, and whether it is read at all
__device__ __forceinline__ int64_t replay_row(const DecodeArgs& p, const ReplayRows& r, int t, bool& rec, bool& ok) {
    rec = t < r.j;
    const int64_t row = rec ? r.rec0 + t : r.new0 + (t - r.j);
    ok = rec || (row >= 0 && row < p.total);
    return row;
}

// §slots: the pool slot that the table of per-token stores names for the state after token t of sequence n; -1 where
// there is no table or t lies past its width W (a value outside the pool is refused where the store happens)
__device__ __forceinline__ int64_t token_slot(const DecodeArgs& p, int n, int64_t t) {
    if (!p.token_slots || t >= p.token_slots_width) return -1;
    const int64_t e = static_cast<int64_t>(n) * p.token_slots_width + t;
    return p.token_slots_int32 ? static_cast<int64_t>(static_cast<const int*>(p.token_slots)[e])
                               : static_cast<const int64_t*>(p.token_slots)[e];
}

// §stage: tokens [tb, tb + nt) of head h into shared memory, activated: thread c owns channel c. The raw
// q and k go to shared memory first and are scaled in place once the block has their norms, so that no
// thread holds a tile of tokens in registers. The tile's first token is token tfirst of its sequence.
template <GateForm GF, bool FORMS, bool DIMS, int IN, bool EAGER, bool REPLAY = false>
__device__ __forceinline__ void stage_tokens(const DecodeArgs& p, DecodeSmem& sm, int h, int vbase, int64_t tb,
                                             int nt, float A, float dtb, int kd, int vd, int tfirst,
                                             const ReplayRows& rr = {}) {
    const int c = threadIdx.x, lane = c & 31, warp = c >> 5;
    const bool kin = !DIMS || c < kd;                               // channels >= K: zeros, nothing read
    const int64_t e0 = (tb * p.H + h) * kd + (kin ? c : 0);         // token tb; the next ones H * K further
    const int shift = group_shift_of<FORMS>(p);
    const int hq = p.H >> shift;                                    // q and k: H / 2^group_shift heads (GVA)
    const int64_t eq = (tb * hq + (h >> shift)) * kd + (kin ? c : 0);
    using T = typename In<IN>::T;
    const T* qp = static_cast<const T*>(p.q) + eq;
    const T* kp = static_cast<const T*>(p.k) + eq;
    const T* gp = static_cast<const T*>(p.g) + e0;
    const int stride = p.H * kd, qstride = hq * kd;
    // token i's loads: at stride from token tb's, or with REPLAY (§replay) each from its own row and tensor
    auto load_qkg = [&](int i, float& q, float& k, float& g) {
        if constexpr (REPLAY) {
            bool rec, ok;
            const int64_t row = replay_row(p, rr, tfirst + i, rec, ok);
            ok = ok && kin;
            const int64_t eqi = (row * hq + (h >> shift)) * kd + c, egi = (row * p.H + h) * kd + c;
            q = ok ? In<IN>::to_float((rec ? static_cast<const T*>(p.rec_k) : static_cast<const T*>(p.q))[eqi]) : 0.f;
            k = ok ? In<IN>::to_float((rec ? static_cast<const T*>(p.rec_k) : static_cast<const T*>(p.k))[eqi]) : 0.f;
            g = ok ? In<IN>::to_float((rec ? static_cast<const T*>(p.rec_g) : static_cast<const T*>(p.g))[egi]) : 0.f;
        } else {
            q = kin ? In<IN>::to_float(qp[i * qstride]) : 0.f; k = kin ? In<IN>::to_float(kp[i * qstride]) : 0.f;
            g = kin ? In<IN>::to_float(gp[i * stride]) : 0.f;
        }
    };
    auto load_v = [&](int i) -> float {          // thread c < DEC_BLOCK_ROWS: value channel vbase + c of token i
        if constexpr (REPLAY) {
            bool rec, ok;
            const int64_t row = replay_row(p, rr, tfirst + i, rec, ok);
            return ok ? input_at<IN>(rec ? p.rec_v : p.v, (row * p.H + h) * vd + vbase + c) : 0.f;
        } else {
            return !DIMS || vbase + c < vd ? input_at<IN>(p.v, ((tb + i) * p.H + h) * vd + vbase + c) : 0.f;
        }
    };
    auto load_beta = [&](int i) -> float {       // thread c: beta of token c
        if constexpr (REPLAY) {
            bool rec, ok;
            const int64_t row = replay_row(p, rr, tfirst + i, rec, ok);
            return ok ? input_at<IN>(rec ? p.rec_beta : p.beta, row * p.H + h) : 0.f;
        } else {
            return input_at<IN>(p.beta, (tb + i) * p.H + h);
        }
    };
    // with EAGER (§eager below) every load of the tile (q, k, g of each token, the block's values and beta) is issued
    // before any is used; the same values then go through the same arithmetic in the same order
    float qe[EAGER ? DEC_TILE : 1], ke[EAGER ? DEC_TILE : 1], ge[EAGER ? DEC_TILE : 1], ve[EAGER ? DEC_TILE : 1], be = 0.f;
    if constexpr (EAGER) {
        const bool vin = c < DEC_BLOCK_ROWS && (!DIMS || vbase + c < vd);
#pragma unroll
        for (int i = 0; i < DEC_TILE; ++i) {
            if constexpr (REPLAY) {
                qe[i] = ke[i] = ge[i] = ve[i] = 0.f;
                if (i < nt) load_qkg(i, qe[i], ke[i], ge[i]);
                if (i < nt && vin) ve[i] = load_v(i);
            } else {
                const bool on = i < nt && kin;
                qe[i] = on ? In<IN>::to_float(qp[i * qstride]) : 0.f;
                ke[i] = on ? In<IN>::to_float(kp[i * qstride]) : 0.f;
                ge[i] = on ? In<IN>::to_float(gp[i * stride]) : 0.f;
                ve[i] = i < nt && vin ? input_at<IN>(p.v, ((tb + i) * p.H + h) * vd + vbase + c) : 0.f;
            }
        }
        if constexpr (REPLAY) { if (c < nt) be = load_beta(c); }
        else { if (c < nt) be = input_at<IN>(p.beta, (tb + c) * p.H + h); }
    }
#pragma unroll
    for (int i = 0; i < DEC_TILE; ++i) {
        if (i >= nt) break;
        float q, k, g;
        if constexpr (EAGER) { q = qe[i]; k = ke[i]; g = ge[i]; }
        else if constexpr (REPLAY) load_qkg(i, q, k, g);
        else {
            q = kin ? In<IN>::to_float(qp[i * qstride]) : 0.f; k = kin ? In<IN>::to_float(kp[i * qstride]) : 0.f;
            g = kin ? In<IN>::to_float(gp[i * stride]) : 0.f;
        }
        sm.qh[i][c] = q;
        sm.kh[i][c] = k;
        // the token's decay of channel c, in [0, 1] for every gate form (0 below fp32's range)
        if constexpr (GF == GateForm::SafeSigmoid)
            sm.decay[i][c] = fast_exp2(log_decay(gate_arg(g, A, dtb), LOG2E * p.lower_bound));
        else
            sm.decay[i][c] = fast_exp2(log_decay<GF>(gate_arg<GF>(g, A, dtb), LOG2E * gate_scale<GF>(A, p.lower_bound)));
        float sq = q * q, sk = k * k;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
        }
        if (lane == 0) { sm.sums[i][warp][0] = sq; sm.sums[i][warp][1] = sk; }
    }
    if constexpr (EAGER) {
        if (c < DEC_BLOCK_ROWS)
#pragma unroll
            for (int i = 0; i < DEC_TILE; ++i)
                if (i < nt) sm.v[i][c] = ve[i];
        if (c < nt) sm.b[c] = beta_value(beta_form_of<FORMS>(p), be);
    } else if constexpr (REPLAY) {
        if (c < DEC_BLOCK_ROWS)
            for (int i = 0; i < nt; ++i) sm.v[i][c] = load_v(i);
        if (c < nt) sm.b[c] = beta_value(beta_form_of<FORMS>(p), load_beta(c));
    } else {
        if (c < DEC_BLOCK_ROWS)
            for (int i = 0; i < nt; ++i)
                sm.v[i][c] = !DIMS || vbase + c < vd ? input_at<IN>(p.v, ((tb + i) * p.H + h) * vd + vbase + c) : 0.f;
        if (c < nt) sm.b[c] = beta_value(beta_form_of<FORMS>(p), input_at<IN>(p.beta, (tb + c) * p.H + h));
    }
    __syncthreads();
    for (int i = 0; i < nt; ++i) {
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; ++w) { sq += sm.sums[i][w][0]; sk += sm.sums[i][w][1]; }
        sm.qh[i][c] *= inv_norm_value(norm_form_of<FORMS>(p), sq);     // 1 where the caller normalised
        sm.kh[i][c] *= inv_norm_value(norm_form_of<FORMS>(p), sk);
    }
    __syncthreads();
}

// §eager: K3's instances with EAGER (DecodeArgs::eager_loads, kda_nb.plan's K3_EAGER_LOADS; K = V = 128) stage a
// sequence of one tile (at most DEC_TILE tokens: decode, and the verification of drafts) here, before its state is in
// registers, with every load of the tile issued at once (stage_tokens with EAGER): the block waits for memory once a
// tile, not once a token, and the values go through the same arithmetic in the same order, so the outputs and states
// are bit for bit those without it. A longer sequence is staged token by token, as without EAGER: from its second tile
// on, its state is in registers, and the tile's loads beside it would spill. True where it staged.
template <GateForm GF, bool FORMS, bool DIMS, int IN, bool EAGER, bool REPLAY = false>
__device__ __forceinline__ bool stage_early(const DecodeArgs& p, DecodeSmem& sm, int h, int vbase, int64_t t0, int len,
                                            float A, float dtb, int kd, int vd, const ReplayRows& rr = {}) {
    if constexpr (EAGER) {
        if (len <= 0 || len > DEC_TILE) return false;
        stage_tokens<GF, FORMS, DIMS, IN, true, REPLAY>(p, sm, h, vbase, t0, len, A, dtb, kd, vd, 0, rr);
        return true;
    }
    return false;
}

// One block's work: (sequence n, head h, pair of slices vp), and the state it reads and writes.
struct DecodeItem {
    int n, h, vp;
    bool has_slot, reads;
    int64_t sbase;            // the first slice's first element in the state tensors (the second follows it)
};

// §dims: the instances with DIMS take the head dims of DecodeArgs::dim_k, dim_v (multiples of 8, at most 128): q, k, g
// [.., K], dt_bias [H, K], v and out [.., V], the states [.., V, K]. Only the pairs of slices that hold rows < V are
// launched (V = 64: half the blocks of V = 128), and a slice with no row < V is skipped. A slice's bulk copy brings its
// rows < V, each K wide, packed (row stride K in shared memory); the registers hold zeros for channels >= K and rows
// >= V, which are never written out. Staging thread c >= K holds zeros for q, k (so the norms are the K channels'), and
// a decay of its own (g = 0 there) that only ever multiplies zeros: a zero channel of k and q keeps S k^, S q^ and the
// state's column c at 0. Without DIMS, K = V = 128 and the kernel is as it is without the feature.
// §slot: the state a sequence reads and writes: its own (n), or a pool slot; a slot outside the pool
// (-1 marks padding) means no state is read or written, and zero outputs.
// (pairs: the pairs of slices per (sequence, head), DEC_PAIRS without DIMS; kd, vd: K and V)
__device__ __forceinline__ DecodeItem decode_item(const DecodeArgs& p, int64_t it, int pairs, int kd, int vd) {
    DecodeItem x;
    x.vp = static_cast<int>(it % pairs);
    it /= pairs;
    x.h = static_cast<int>(it % p.H);
    x.n = static_cast<int>(it / p.H);
    int64_t slot = x.n;
    if (p.state_slot) slot = p.slot_int32 ? static_cast<const int*>(p.state_slot)[x.n]
                                          : static_cast<const int64_t*>(p.state_slot)[x.n];
    x.has_slot = slot >= 0 && slot < p.n_slots;
    x.reads = x.has_slot && p.state_in_kind != STATE_NONE;
    x.sbase = ((slot * p.H + x.h) * vd + x.vp * DEC_BLOCK_ROWS) * kd;
    return x;
}

// §state_in: one bulk copy per slice (16 KB in fp32) into its buffer, completing its barrier's phase;
// both are asked for at once, and a block keeps no registers waiting for them. With DIMS a slice is its rows < V, K
// wide (none: the barrier's phase completes with no copy)
template <bool DIMS>
__device__ __forceinline__ void issue_state(const DecodeArgs& p, DecodeSmem& sm, const DecodeItem& x, int kd, int vd) {
    if (!x.reads) return;
    const int bytes = p.state_in_kind == STATE_FP32 ? 4 : 2;
#pragma unroll
    for (int s = 0; s < DEC_SLICES; ++s) {
        const int rows = DIMS ? max(0, min(DEC_VB, vd - (x.vp * DEC_BLOCK_ROWS + s * DEC_VB))) : DEC_VB;
        mbar_arrive_expect_tx(&sm.bar[s], rows * kd * bytes);
        if (!DIMS || rows > 0)
            bulk_copy_g2s(sm.state[s], static_cast<const uint8_t*>(p.state_in) + (x.sbase + s * DEC_VB * kd) * bytes,
                          rows * kd * bytes, &sm.bar[s]);
    }
}

// §item: a block's work on one item `cur`, its tokens through its state, whose slices the bulk copies of issue_state
// leave in the state buffers (fp32-sized ones; with WIDE bf16-sized ones from `slice0` on, §wide), each completing
// its barrier of `bars`
template <GateForm GF, bool FORMS, bool STORES, bool DIMS, int IN, bool EAGER, bool REPLAY, int R, bool WIDE>
__device__ __forceinline__ void decode_run(const DecodeArgs& p, DecodeSmem& sm, const DecodeItem& cur, int KD, int VD,
                                           int slice0, uint64_t* bars) {
    static_assert(!(EAGER && DIMS), "the eager instances take K = V = 128");
    static_assert(R == DEC_ROWS || (R == 4 && EAGER), "four rows a thread: the eager instances only (§four rows)");
    static_assert(!WIDE || (EAGER && !DIMS && !STORES && !REPLAY && R == DEC_ROWS), "wide: eager, two rows, K = V = 128");
    constexpr int PR = 4 * DEC_WARPS * R;                           // state rows updated at once: a slice, or both
    constexpr int PASSES = DEC_BLOCK_ROWS / PR;                     // ... the passes over the block's rows
    static_assert(!REPLAY || (STORES && EAGER), "a replay read in place stores its state after the replayed tokens (eager instances)");
    using T = typename In<IN>::T;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & (DEC_LANES - 1), r = lane / DEC_LANES;
    // local rows of this thread in a pass: 4 R warp + r + 4 i, i < R (a warp's rows are contiguous)
    auto row_of = [&](int i) { return 4 * R * warp + r + 4 * i; };
    T* out = static_cast<T*>(p.out);
    {
        const int n = cur.n, h = cur.h, vbase = cur.vp * DEC_BLOCK_ROWS;
        int64_t t0, t1;
        decode_bounds<REPLAY>(p, n, t0, t1, sm.red);
        if constexpr (REPLAY) {                                         // (the caller zeroed out: §replay)
            if (!cur.has_slot) return;
        } else {
        if (n == 0) zero_rows<DIMS, IN>(p, h, vbase, 0, t0, VD);                  // before the first sequence
        if (n == p.n_seq - 1) zero_rows<DIMS, IN>(p, h, vbase, t1, p.total, VD);  // after the last
        if (!cur.has_slot) {                                            // padding: no copy was issued for it
            zero_rows<DIMS, IN>(p, h, vbase, t0, t1, VD);
            return;
        }
        }

        const float A = GF == GateForm::Given ? 1.f : gate_rate<GF>(__ldg(p.A_log + h));   // the given gate: no A_log,
        const float dtb = GF == GateForm::Given || (DIMS && static_cast<int>(threadIdx.x) >= KD) ? 0.f
                          : __ldg(p.dt_bias + h * KD + threadIdx.x);   // no dt_bias

        float S[R][4 * DEC_PIECES];
        const int len = static_cast<int>(t1 - t0);     // (tokens of one sequence: fewer than 2^31 on any GPU)
        const bool one_tile = len <= DEC_TILE;          // decode: the tokens are staged once for both slices
        const ReplayRows rr = replay_rows<REPLAY>(p, n, len, cur.has_slot);
        bool early;
        early = stage_early<GF, FORMS, DIMS, IN, EAGER, REPLAY>(p, sm, h, vbase, t0, len, A, dtb, KD, VD, rr);
#pragma unroll 1
        for (int sl = 0; sl < PASSES; ++sl) {
        const int vrow = sl * PR;                       // this pass's first row among the block's
        if (DIMS && vbase + vrow >= VD) break;          // no row < V (block-uniform; the first slice always has one)
        const int64_t sbase = cur.sbase + static_cast<int64_t>(sl) * PR * KD;
        // with DIMS: whether local row `row` of the slice and channel `col` lie inside [V, K]
        auto inside = [&](int row, int col) { return !DIMS || (vbase + vrow + row < VD && col < KD); };
        // the pass's rows, from shared memory to registers: slice sl's (R = 2), or both slices' (R = 4: local row x of
        // the block is row x % DEC_VB of slice x / DEC_VB, the same for a warp's rows)
        auto load_state = [&]() {
            if (cur.reads)
#pragma unroll
                for (int s = vrow / DEC_VB; s < (vrow + PR) / DEC_VB; ++s) mbar_wait(&bars[s], 0);
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int m = 0; m < DEC_PIECES; ++m) {
                    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
                    const int buf = R == DEC_ROWS ? sl : (vrow + row_of(i)) / DEC_VB;
                    const int e = (R == DEC_ROWS ? row_of(i) : (vrow + row_of(i)) % DEC_VB) * KD + 32 * m + 4 * j;
                    if (!inside(row_of(i), 32 * m + 4 * j)) {
                    } else if (cur.reads && p.state_in_kind == STATE_FP32) s = lds4(sm.state[buf] + e);
                    else if (cur.reads) s = bf16x4(*reinterpret_cast<const uint2*>(
                        (WIDE ? reinterpret_cast<const __nv_bfloat16*>(sm.state) + (slice0 + buf) * DEC_VB * D
                              : reinterpret_cast<const __nv_bfloat16*>(sm.state[buf])) + e));
                    S[i][4 * m] = s.x; S[i][4 * m + 1] = s.y; S[i][4 * m + 2] = s.z; S[i][4 * m + 3] = s.w;
                }
        };
        // §state_out: the pass's rows from registers to state_out at element `at` (its first row), 128 contiguous bytes
        // per row and piece across the 8 lanes, in fp32 or rounded to bf16: the state out, and the per-token stores
        auto store_state = [&](int64_t at) {
            if (p.state_out_kind == STATE_FP32) {
                float* base = static_cast<float*>(p.state_out) + at;
#pragma unroll
                for (int i = 0; i < R; ++i)
#pragma unroll
                    for (int m = 0; m < DEC_PIECES; ++m)
                        if (inside(row_of(i), 32 * m + 4 * j))
                        *reinterpret_cast<float4*>(base + row_of(i) * KD + 32 * m + 4 * j) =
                            make_float4(S[i][4 * m], S[i][4 * m + 1], S[i][4 * m + 2], S[i][4 * m + 3]);
            } else if (p.state_out_kind == STATE_BF16) {
                __nv_bfloat16* base = static_cast<__nv_bfloat16*>(p.state_out) + at;
#pragma unroll
                for (int i = 0; i < R; ++i)
#pragma unroll
                    for (int m = 0; m < DEC_PIECES; ++m)
                        if (inside(row_of(i), 32 * m + 4 * j))
                        *reinterpret_cast<uint2*>(base + row_of(i) * KD + 32 * m + 4 * j) =
                            make_uint2(pack_bf16(S[i][4 * m], S[i][4 * m + 1]), pack_bf16(S[i][4 * m + 2], S[i][4 * m + 3]));
            }
        };
        // §out: the 8 lanes of a row agree on its output; one of them leaves it in shared memory, and lane l < R / 2
        // writes rows 8 l .. 8 l + 7 of the warp's 4 R contiguous rows as one 16-byte store, rounded to the inputs' type:
        // token t of the sequence, at batch row tok (with REPLAY the row replay_row gives, a new token only)
        auto put_out = [&](const float (&o)[R], int64_t tok, int t) {
            if (j == 0) {
#pragma unroll
                for (int ii = 0; ii < R; ++ii) sm.o[row_of(ii)] = o[ii];
            }
            __syncwarp();
            if (lane < R / 2) {
                const int part = R == DEC_ROWS ? 0 : 8 * lane;         // (R = 2: lane 0, rows 0 .. 7)
                int64_t row = tok;
                bool ok = !DIMS || vbase + vrow + 4 * R * warp + part < VD;
                if constexpr (REPLAY) {                                 // a new token only, at its batch row (§replay)
                    bool rec;
                    row = replay_row(p, rr, t, rec, ok);
                    ok = ok && !rec;
                }
                if (ok) {
                    const float* w = sm.o + 4 * R * warp + part;
                    T* dst = out + (row * p.H + h) * VD + vbase + vrow + 4 * R * warp + part;
                    *reinterpret_cast<uint4*>(dst) = make_uint4(In<IN>::pack(w[0], w[1]), In<IN>::pack(w[2], w[3]),
                                                                In<IN>::pack(w[4], w[5]), In<IN>::pack(w[6], w[7]));
                }
            }
            __syncwarp();
        };
        // §stores: the state after token t of the sequence into the slot the table names for it (§slots); none past the
        // table's width W, none for a value outside the pool
        auto store_token = [&](int t) {
            if constexpr (STORES) {
                const int64_t slot = token_slot(p, n, t);
                if (slot >= 0 && slot < p.n_slots) store_state(((slot * p.H + h) * VD + vbase + vrow) * KD);
            }
        };
        bool loaded = false;
        // §tiles: the tokens a tile at a time, staged once for both slices where they fit one tile
#pragma unroll 1
        for (int done = 0; done < len; done += DEC_TILE) {
            const int64_t tb = t0 + done;
            const int nt = min(DEC_TILE, len - done);
            if ((sl == 0 && !early) || !one_tile) {
                if (loaded || sl > 0) __syncthreads();              // the previous tile is read
                stage_tokens<GF, FORMS, DIMS, IN, false, REPLAY>(p, sm, h, vbase, tb, nt, A, dtb, KD, VD, done, rr);
            }
            if (!loaded) { load_state(); loaded = true; }
#pragma unroll 1
            for (int i = 0; i < nt; ++i) {
            // §update: forget and S k^ (both rows per piece, so each piece of decay and k^ is read once),
            // the delta-rule correction, then S q^
            float dot[R], rd[R], o[R];
#pragma unroll
            for (int ii = 0; ii < R; ++ii) dot[ii] = rd[ii] = 0.f;
#pragma unroll
            for (int m = 0; m < DEC_PIECES; ++m) {
                const float4 d = lds4(&sm.decay[i][32 * m + 4 * j]), k = lds4(&sm.kh[i][32 * m + 4 * j]);
#pragma unroll
                for (int ii = 0; ii < R; ++ii) {
                    float* s = &S[ii][4 * m];
                    s[0] *= d.x; s[1] *= d.y; s[2] *= d.z; s[3] *= d.w;
                    dot[ii] = fmaf(s[0], k.x, dot[ii]); dot[ii] = fmaf(s[1], k.y, dot[ii]);
                    dot[ii] = fmaf(s[2], k.z, dot[ii]); dot[ii] = fmaf(s[3], k.w, dot[ii]);
                }
            }
            float be[R];
#pragma unroll
            for (int ii = 0; ii < R; ++ii) {
#pragma unroll
                for (int w = 1; w < DEC_LANES; w <<= 1) dot[ii] += __shfl_xor_sync(0xffffffffu, dot[ii], w);
                be[ii] = sm.b[i] * (sm.v[i][vrow + row_of(ii)] - dot[ii]);
            }
#pragma unroll
            for (int m = 0; m < DEC_PIECES; ++m) {
                const float4 k = lds4(&sm.kh[i][32 * m + 4 * j]), q = lds4(&sm.qh[i][32 * m + 4 * j]);
#pragma unroll
                for (int ii = 0; ii < R; ++ii) {
                    float* s = &S[ii][4 * m];
                    s[0] = fmaf(be[ii], k.x, s[0]); s[1] = fmaf(be[ii], k.y, s[1]);
                    s[2] = fmaf(be[ii], k.z, s[2]); s[3] = fmaf(be[ii], k.w, s[3]);
                    rd[ii] = fmaf(s[0], q.x, rd[ii]); rd[ii] = fmaf(s[1], q.y, rd[ii]);
                    rd[ii] = fmaf(s[2], q.z, rd[ii]); rd[ii] = fmaf(s[3], q.w, rd[ii]);
                }
            }
            if constexpr (REPLAY) {
                if (done + i < rr.j) { store_token(done + i); continue; }  // §replayed: no output, so no S q^ sums
            }
#pragma unroll
            for (int ii = 0; ii < R; ++ii) {
#pragma unroll
                for (int w = 1; w < DEC_LANES; w <<= 1) rd[ii] += __shfl_xor_sync(0xffffffffu, rd[ii], w);
                o[ii] = p.scale * rd[ii];
            }
            put_out(o, tb + i, done + i);
            store_token(done + i);
        }
        }
        if (!loaded) load_state();                                  // a sequence of no tokens: state out = in
        if (!STORES || p.write_final) store_state(sbase);           // the state out: after the sequence's last token
        }
    }
}

template <GateForm GF, bool FORMS, bool STORES, bool DIMS, int IN, bool EAGER, bool REPLAY = false, int R = DEC_ROWS>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MIN_BLOCKS) kda_decode(DecodeArgs p) {
    extern __shared__ __align__(128) uint8_t dec_smem[];
    DecodeSmem& sm = *reinterpret_cast<DecodeSmem*>(dec_smem);
    const int KD = DIMS ? p.dim_k : D, VD = DIMS ? p.dim_v : D;     // the head dims (§dims)
    const int pairs = DIMS ? (VD + DEC_BLOCK_ROWS - 1) / DEC_BLOCK_ROWS : DEC_PAIRS;
    const DecodeItem cur = decode_item(p, blockIdx.x, pairs, KD, VD);
    if (threadIdx.x == 0) {                                         // the slices are asked for before anything else
#pragma unroll
        for (int s = 0; s < DEC_SLICES; ++s) mbar_init(&sm.bar[s], 1);
        mbar_init_fence();
        issue_state<DIMS>(p, sm, cur, KD, VD);
    }
    __syncthreads();
    decode_run<GF, FORMS, STORES, DIMS, IN, EAGER, REPLAY, R, false>(p, sm, cur, KD, VD, 0, sm.bar);
}

// §wide: K3's wide instances (DecodeArgs::k3_wide; eager, two rows a thread, K = V = 128, no per-token stores) take
// a state that is read in bf16, or not read: one block per (sequence, head) runs both of its items, the pairs of
// slices one after the other, as two blocks would. The four bf16 slices fit the two fp32-sized buffers, so the block
// asks for all four at once (each with its own barrier) and the second pair's bytes arrive while the first is updated:
// a block moves the bytes of an fp32 one, where a block of the pair instances moves half of them in about the same
// time. Each item's arithmetic is the pair instance's, in the same order, so the outputs and states are the same bits.
struct DecodeWideSmem {
    DecodeSmem sm;
    uint64_t bar[DEC_PAIRS * DEC_SLICES];     // slice s of pair i: bar[DEC_SLICES i + s], its buffer DEC_SLICES i + s
};

template <GateForm GF, bool FORMS, int IN>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MIN_BLOCKS) kda_decode_wide(DecodeArgs p) {
    extern __shared__ __align__(128) uint8_t dec_smem[];
    DecodeWideSmem& w = *reinterpret_cast<DecodeWideSmem*>(dec_smem);
    auto item = [&](int i) { return decode_item(p, static_cast<int64_t>(blockIdx.x) * DEC_PAIRS + i, DEC_PAIRS, D, D); };
    if (threadIdx.x == 0) {                                         // every slice of the head asked for at once
#pragma unroll
        for (int s = 0; s < DEC_PAIRS * DEC_SLICES; ++s) mbar_init(&w.bar[s], 1);
        mbar_init_fence();
#pragma unroll
        for (int i = 0; i < DEC_PAIRS; ++i) {
            const DecodeItem x = item(i);
            if (!x.reads) continue;                                 // (the launcher takes bf16 states in, or none)
#pragma unroll
            for (int s = 0; s < DEC_SLICES; ++s) {
                constexpr int bytes = DEC_VB * D * 2;
                mbar_arrive_expect_tx(&w.bar[DEC_SLICES * i + s], bytes);
                bulk_copy_g2s(reinterpret_cast<__nv_bfloat16*>(w.sm.state) + (DEC_SLICES * i + s) * DEC_VB * D,
                              static_cast<const __nv_bfloat16*>(p.state_in) + x.sbase + s * DEC_VB * D, bytes,
                              &w.bar[DEC_SLICES * i + s]);
            }
        }
    }
    __syncthreads();
#pragma unroll 1
    for (int i = 0; i < DEC_PAIRS; ++i) {
        if (i > 0) __syncthreads();                                 // the first item is done with the staged tokens
        decode_run<GF, FORMS, false, false, IN, true, false, DEC_ROWS, true>(p, w.sm, item(i), D, D, DEC_SLICES * i,
                                                                            w.bar + DEC_SLICES * i);
    }
}

cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t stream) {
    if (!dims_valid(a.dim_k, a.dim_v)) return cudaErrorInvalidValue;
    if (a.replay_table && (native_dims(a.dim_k, a.dim_v) || !a.token_slots)) return cudaErrorInvalidValue;   // (§replay)
    if (a.k3_rows != DEC_ROWS && (a.k3_rows != 4 || !a.eager_loads)) return cudaErrorInvalidValue;      // (§four rows)
    const bool dims = native_dims(a.dim_k, a.dim_v);
    if (a.k3_wide) {                                                // §wide: one block per (sequence, head)
        if (dims || !a.eager_loads || a.k3_rows != DEC_ROWS || a.token_slots || a.replay_table ||
            a.state_in_kind == STATE_FP32)
            return cudaErrorInvalidValue;
        const int64_t heads = static_cast<int64_t>(a.n_seq) * a.H;
        if (heads == 0) return cudaSuccess;
        if (heads > INT32_MAX) return cudaErrorInvalidConfiguration;
        constexpr int smem = sizeof(DecodeWideSmem);
        static_assert(smem <= 48 * 1024, "fits the default dynamic shared memory");
        return dispatch_fwd_dims(a.gate_form, a.beta_form, a.norm_form, a.group_shift, a.input_kind, false,
                                 [&](auto gf, auto forms, auto in, auto dm) {
            if constexpr (!decltype(dm)::value)
                kda_decode_wide<static_cast<GateForm>(decltype(gf)::value), decltype(forms)::value, decltype(in)::value>
                    <<<static_cast<unsigned>(heads), DEC_THREADS, smem, stream>>>(a);
            return cudaGetLastError();
        });
    }
    // one per (sequence, head, pair of slices); with DIMS the pairs that hold rows < V
    const int pairs = dims ? (a.dim_v + DEC_BLOCK_ROWS - 1) / DEC_BLOCK_ROWS : DEC_PAIRS;
    const int64_t blocks = static_cast<int64_t>(a.n_seq) * a.H * pairs;
    if (blocks == 0) return cudaSuccess;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    constexpr int smem = sizeof(DecodeSmem);
    static_assert(smem <= 48 * 1024, "fits the default dynamic shared memory");
    // the call's form, the inputs' type and the head dims pick the instantiation (kda_switch.h: dispatch_fwd_dims),
    // a table of per-token stores the one with STORES, and eager loads (§eager; K = V = 128) the one with EAGER; a replay
    // read in place (§replay; K = V = 128, with stores) the one with REPLAY, which loads eagerly; among the eager ones,
    // k3_rows = 4 the one with R = 4 (§four rows)
    return dispatch_bool(a.token_slots != nullptr, [&](auto stores) {
        return dispatch_fwd_dims(a.gate_form, a.beta_form, a.norm_form, a.group_shift, a.input_kind, dims,
                                 [&](auto gf, auto forms, auto in, auto dm) {
            constexpr GateForm G = static_cast<GateForm>(decltype(gf)::value);
            constexpr bool F = decltype(forms)::value, S = decltype(stores)::value, DM = decltype(dm)::value;
            constexpr int I = decltype(in)::value;
            if constexpr (!DM && S) {
                if (a.replay_table) {
                    if (a.k3_rows == 4)
                        kda_decode<G, F, true, false, I, true, true, 4><<<static_cast<unsigned>(blocks), DEC_THREADS, smem, stream>>>(a);
                    else
                        kda_decode<G, F, true, false, I, true, true><<<static_cast<unsigned>(blocks), DEC_THREADS, smem, stream>>>(a);
                    return cudaGetLastError();
                }
            }
            if constexpr (!DM) {
                if (a.eager_loads) {
                    if (a.k3_rows == 4)
                        kda_decode<G, F, S, false, I, true, false, 4><<<static_cast<unsigned>(blocks), DEC_THREADS, smem, stream>>>(a);
                    else
                        kda_decode<G, F, S, false, I, true><<<static_cast<unsigned>(blocks), DEC_THREADS, smem, stream>>>(a);
                    return cudaGetLastError();
                }
            }
            kda_decode<G, F, S, DM, I, false><<<static_cast<unsigned>(blocks), DEC_THREADS, smem, stream>>>(a);
            return cudaGetLastError();
        });
    });
}

}  // namespace kda

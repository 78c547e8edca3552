// kda_common.cuh: constants, the workspace record K1 leaves for K2, thin wrappers around the warp-level
// PTX the kernels use (mma.sync, ldmatrix, cp.async, conversions).
// Compiles with nvcc alone: no torch headers. The chunk size and the layout rules: kda_layout.cuh.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kda_launch.h"
#include "kda_layout.cuh"

namespace kda {

constexpr int D = 128;           // head dimension, K = V = D
constexpr float LOG2E = 1.4426950408889634f;
constexpr int TILE = CHUNK * D;          // elements of one [CHUNK][D] tile (a chunk's rows of one head)
constexpr int SMALL = CHUNK * CHUNK;     // elements of one [CHUNK][CHUNK] matrix (INVb, A, Mqk)

// §record --------------------------------------------------------------------------------------
// The record K1 writes for every (chunk, head) and K2 reads back. It is laid out exactly as K2 wants
// it in shared memory, so K2 fetches it with one bulk copy. In this order (bytes):
//   kd   [CHUNK][D] bf16      k_hat * exp(G)             (decayed keys)
//   qd   [CHUNK][D] bf16      q_hat * exp(G)             (decayed queries, *without* scale)
//   kr   [CHUNK][D] fp16      k_hat * exp(G_last - G)    (restored keys, |kr| <= 1)
//   invb [CHUNK][CHUNK] fp16  (I + L)^-1 diag(beta)      (entries bounded by 2^14)
//   mqk  [CHUNK][CHUNK] fp16  lower_incl_diag(qd ki^T)   (|entries| <= 1)
//   decay[D]    fp32    exp(G_last)                    (the chunk's total decay per channel)
//   norm, pad   fp32 x4 max row sum of |invb|          (K2's bound on |U| / |X|)
// No padding: the 16-byte pieces of each row are swizzled instead, so that the eight rows an ldmatrix
// reads at once fall in different banks. Piece p of row r of kd, qd, kr sits at p ^ (r % 8)
// (`swz_row`); piece p (0 or 1) of row r of invb, mqk at p ^ ((r / 4) % 2) (`swz_small`).
// ---------------------------------------------------------------------------------------------
constexpr int ROW = D;           // 256-byte rows of kd, qd, kr
constexpr int SROW = CHUNK;          // 32-byte rows of invb, mqk
constexpr int REC_KD = 0;
constexpr int REC_QD = REC_KD + CHUNK * ROW * 2;
constexpr int REC_KR = REC_QD + CHUNK * ROW * 2;
constexpr int REC_INVB = REC_KR + CHUNK * ROW * 2;
constexpr int REC_MQK = REC_INVB + CHUNK * SROW * 2;
constexpr int REC_DECAY = REC_MQK + CHUNK * SROW * 2;
constexpr int REC_NORM = REC_DECAY + D * 4;
constexpr int REC_BYTES = REC_NORM + 16;      // 13840 = 865 x 16 bytes
// element offset of (row r, first element of 16-byte piece p) in kd, qd, kr, and in invb, mqk
__host__ __device__ constexpr int swz_row(int r, int p) { return r * ROW + 8 * (p ^ (r & 7)); }
__host__ __device__ constexpr int swz_small(int r, int p) { return r * SROW + 8 * (p ^ ((r >> 2) & 1)); }
static_assert(REC_BYTES % 16 == 0, "record must be a whole number of 16-byte pieces");
// The parts of a record the states alone read (K2's states only, kda_recurrence.cuh §states): kd, then kr and invb,
// then decay and norm; qd and mqk make only the outputs. 9232 of the 13840 bytes.
constexpr int STATES_REC_BYTES = (REC_QD - REC_KD) + (REC_MQK - REC_KR) + (REC_BYTES - REC_DECAY);
static_assert(REC_QD % 16 == 0 && REC_KR % 16 == 0 && REC_MQK % 16 == 0 && REC_DECAY % 16 == 0,
              "the states' parts of a record start and end on 16-byte pieces (bulk copies)");

// §conversions --------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);     // .x (low half) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
// a bf16 is the top half of its fp32: the low and the high bf16 of a 32-bit word, both of a word, and element i of a
// bf16 array in global memory
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float2 unpack_bf16(uint32_t u) { return make_float2(bf16_lo(u), bf16_hi(u)); }
__device__ __forceinline__ float bf16_at(const void* base, int64_t i) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}
// §input: the inputs' element type (kda_args.h: InputKind), a template parameter of the forward's kernels. Only the
// reads of q, k, v, g, beta and the store of the output depend on it: every value read is widened to fp32 (both
// types are exact in fp32) before any arithmetic, and no tensor-core operand is an input element itself. The
// operands are the kernels' own intermediates, whose formats are chosen by their ranges, not by the inputs' type:
// the decayed keys and queries kd, qd (k_hat 2^G and q_hat 2^G, down to 2^-116 with the safe gate's floor, below
// fp16's smallest subnormal, 2^-24) and the state (fp32, of no bound: it may pass fp16's 65504) stay bf16 for
// S kd^T and S qd^T; kr, INV diag(beta), Mqk, X and U stay fp16, bounded or rescaled as they are for bf16 inputs
// (kda_common.cuh §record, kda_recurrence.cuh §range). So K1's record is the same for both types, and so is every
// mma instruction. The output is rounded to the inputs' type: fp16 keeps three more mantissa bits than bf16 but
// overflows past 65504, as any fp16 tensor of the caller's would.
// In<IN>: T, the element; unpack (two elements of a 32-bit word, the low one first), pair (the same by the type's
// own conversion: the residual's), to_float, pack (two floats rounded into one word) and round (one float).
template <int IN> struct In;
template <> struct In<INPUT_BF16> {
    using T = __nv_bfloat16;
    static __device__ __forceinline__ float2 unpack(uint32_t w) { return unpack_bf16(w); }
    static __device__ __forceinline__ float2 pair(uint32_t w) {
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
    }
    static __device__ __forceinline__ float to_float(T x) { return __bfloat162float(x); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_bf16(lo, hi); }
    static __device__ __forceinline__ T round(float x) { return __float2bfloat16_rn(x); }
};
template <> struct In<INPUT_F16> {
    using T = __half;
    static __device__ __forceinline__ float2 unpack(uint32_t w) { return __half22float2(*reinterpret_cast<const __half2*>(&w)); }
    static __device__ __forceinline__ float2 pair(uint32_t w) { return unpack(w); }
    static __device__ __forceinline__ float to_float(T x) { return __half2float(x); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_f16(lo, hi); }
    static __device__ __forceinline__ T round(float x) { return __float2half_rn(x); }
};
// element i of an input array in global memory, widened to fp32
template <int IN> __device__ __forceinline__ float input_at(const void* base, int64_t i) {
    return In<IN>::to_float(static_cast<const typename In<IN>::T*>(base)[i]);
}
__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }   // 16-byte aligned
__device__ __forceinline__ float fast_exp2(float x) {   // ex2.approx: 2^x, flushes tiny results to 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// §fragments ----------------------------------------------------------------------------------
// mma.sync m16n8k16, fp32 accumulators. Lane = 4 * g + t (g = "group", t = "thread in group").
//   A 16x16 (row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B 16x8  (k x n):     b[0] = (k = 2t..2t+1, n = g), b[1] = (k = 2t+8..2t+9, n = g)
//   C 16x8:              c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// Two C tiles side by side (n = 0..7, 8..15) are, element for element, one A tile: this is how
// results computed by one product become the left operand of the next without leaving registers.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// mma.sync m16n8k8 with tf32 operands (fp32 range, 10-bit mantissa), fp32 accumulators.
//   A 16x8: a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4)
//   B 8x8 (k x n): b0 = (k = t, n = g), b1 = (k = t+4, n = g); C as above.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x = hi + lo, the "3xTF32" split: hi keeps x's top 10 mantissa bits (a tf32), lo = x - hi is exact in
// fp32 and the tensor core reads its top 10 bits. hi*hi + hi*lo + lo*hi recovers an fp32 product to
// about 2^-20, so three tf32 products stand in for one fp32 product.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}
// x rounded to the nearest tf32 (ties away from zero): an operand of mma_tf32 one product stands on. (The tensor core
// would otherwise drop x's low 13 mantissa bits, a bias towards zero that a recurrence accumulates.)
__device__ __forceinline__ uint32_t tf32_rn(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float tf32_rounded(float x) { return __uint_as_float(tf32_rn(x)); }
// d += a b in 3xTF32 (about fp32's accuracy): a and b split by split_tf32 into hi and lo parts, the small products first,
// the lo x lo product left out. b0, b1: the B fragment's two registers.
__device__ __forceinline__ void mma3(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                     uint32_t bh0, uint32_t bl0, uint32_t bh1, uint32_t bl1) {
    mma_tf32(d, al, bh0, bh1);
    mma_tf32(d, ah, bl0, bl1);
    mma_tf32(d, ah, bh0, bh1);
}
// S <- S diag(decay) for a warp's NJ C fragments of a state (S[j]: columns 8 j + 2 t, + 1 of rows g, g + 8), decay
// at the fragments' first column: the state step's forgetting, forward (kda_recurrence.cuh) and backward (kda_bwd_states.cu)
template <int NJ>
__device__ __forceinline__ void apply_decay(float (&S)[NJ][4], const float* decay, int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const float2 d = *reinterpret_cast<const float2*>(decay + 8 * j + 2 * t);
        S[j][0] *= d.x; S[j][1] *= d.y; S[j][2] *= d.x; S[j][3] *= d.y;
    }
}
// x as an operand of mma_tf32, rounded as tf32_rn rounds it, in one integer add: half a tf32 ulp added to its bits, and
// the tensor core drops the low 13 bits itself (the same operand for every finite x). cvt.rna.tf32.f32 takes about 2.5
// instructions: 15 to 18% of the backward passes' instructions if they used it.
__device__ __forceinline__ uint32_t tf32_op(float x) { return __float_as_uint(x) + 0x1000u; }
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Four 8x8 b16 matrices; lane l gives the address of row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// The inverse of ldmatrix_x4_trans: register i of lane l holds (row l / 4, columns 2 (l % 4), + 1) of
// matrix i, stored transposed; lane l gives the address of stored row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void stmatrix_x4_trans(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(smem_addr(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Four 8x8 b16 matrices stored as they are held: register i of lane l holds (row l / 4, columns 2 (l % 4), + 1)
// of matrix i; lane l gives the address of row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void stmatrix_x4(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(smem_addr(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// §prefetch: ask the bulk copy engine to bring `bytes` (a multiple of 16) from 16-byte aligned global memory into
// L2, without waiting and without registers: for data a block reads later from global memory itself
__device__ __forceinline__ void prefetch_l2(const void* gmem, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(gmem), "r"(bytes) : "memory");
}

// §copies -------------------------------------------------------------------------------------
// 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes zeros (used past a sequence's end).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N));
}

// §bulk: Hopper's bulk copy engine (cp.async.bulk, "TMA" without a tensor map) and the mbarrier it
// signals. One thread asks for N bytes; the barrier's phase completes when they have all landed.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {   // release: this thread's earlier accesses come first
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "\t@!done bra WAIT;\n}"
                 :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}
// bytes and both addresses: multiples of 16
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(smem)), "l"(gmem), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// Which sequence owns global chunk `c`: the last n with cu_chunks[n] <= c (binary search).
__device__ __forceinline__ int find_sequence(const int64_t* cu_chunks, int n_seq, int64_t c) {
    int lo = 0, hi = n_seq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (cu_chunks[mid] <= c) lo = mid; else hi = mid - 1;
    }
    return lo;
}

}  // namespace kda

// kda_prepare.cu: K1 "prepare". Everything of the chunked form that does not depend on the state,
// for one (chunk of 16 tokens, head) at a time: the activations (L2 norm, safe gate, beta), the
// cumulative decay, the decayed / restored keys and decayed queries, the 16x16 matrices Mqk and
// (I + L)^-1 diag(beta), and the chunk's total decay. It leaves one record per (chunk, head) in the
// workspace for K2 (layout in kda_common.cuh), already in K2's shared-memory layout.
//
// A persistent grid: each block of 128 threads walks (chunk, head) items with a stride of the grid
// size. As soon as the current item's q, k, g have been read (after §decay), it starts copying the
// next item's into shared memory (cp.async), so the copy overlaps the matrix work of this one.
#include "kda_common.cuh"
#include "kda_launch.h"

namespace kda {

constexpr int K1_THREADS = 128;
constexpr int FS = D + 4;    // fp32 row stride in shared memory: 16-byte aligned rows, fewer bank conflicts
constexpr int MS = C + 2;    // row stride of the 16x16 fp32 matrices: 8-byte aligned rows, no bank conflicts

struct K1Smem {
    __nv_bfloat16 raw[3][C][D];        // q, k, g of the item, as loaded
    float qs[C][FS];                   // qd = q_hat exp(G)      (fp32, for Mqk)
    float ks[C][FS];                   // kd = k_hat exp(G)      (fp32, for L)
    float gs[C][FS];                   // ki = k_hat exp(-G)     (fp32, for L and Mqk)
    float Ls[C][MS];
    float rq[C], rk[C], bs[C];
};

// One unit of K1's work: a (chunk, head) pair, its first token and its length (<= 16).
struct Item {
    int64_t chunk;
    int h, len;
    int64_t t0;
};

// §locate: item = chunk * H + head. Which sequence the chunk belongs to (binary search in cu_chunks),
// where the chunk starts, and how many of its 16 tokens are real.
__device__ __forceinline__ Item locate(const FwdArgs& p, int64_t item) {
    Item it;
    it.chunk = item / p.H;
    it.h = static_cast<int>(item - it.chunk * p.H);
    const int n = find_sequence(p.cu_chunks, p.n_seq, it.chunk);
    it.t0 = p.cu_seqlens[n] + (it.chunk - p.cu_chunks[n]) * C;
    const int64_t left = p.cu_seqlens[n + 1] - it.t0;
    it.len = static_cast<int>(left < C ? left : C);
    return it;
}

__global__ void __launch_bounds__(K1_THREADS) kda_fwd_prepare(FwdArgs p) {
    extern __shared__ __align__(16) uint8_t smem_raw[];
    K1Smem& sm = *reinterpret_cast<K1Smem*>(smem_raw);
    auto& qs = sm.qs; auto& ks = sm.ks; auto& gs = sm.gs; auto& Ls = sm.Ls;
    // the inverse's powers and products, two buffers each, reuse qs once L and Mqk are done
    float (*Ps)[C][MS] = reinterpret_cast<float (*)[C][MS]>(&qs[0][0]);
    float (*Is)[C][MS] = Ps + 2;
    static_assert(4 * C * MS <= C * FS, "the inverse's buffers fit in qs");

    const int tid = threadIdx.x, H = p.H;
    const int64_t n_items = p.n_chunks * H;
    const __nv_bfloat16* beta_g = static_cast<const __nv_bfloat16*>(p.beta);

    // §load: copy item `item`'s q, k, g rows into raw (zeros past the sequence's end: identity tokens),
    // 16 bytes per cp.async, and fetch its beta logit into a register of threads 0..15.
    auto prefetch = [&](int64_t item, Item& it, float& beta_logit) {
        if (item < n_items) {
            it = locate(p, item);
            // thread tid copies piece tid % 16 of rows tid / 16 and tid / 16 + 8 of q, k and g
            const int r = tid >> 4, piece = tid & 15;
            const int64_t row0 = ((it.t0 + r) * H + it.h) * static_cast<int64_t>(D) + piece * 8;
            const int64_t row8 = row0 + 8 * static_cast<int64_t>(H) * D;
            const bool in0 = r < it.len, in8 = r + 8 < it.len;
            const void* srcs[3] = {p.q, p.k, p.g};
#pragma unroll
            for (int w = 0; w < 3; ++w) {
                const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(srcs[w]);
                cp_async16(&sm.raw[w][r][piece * 8], src + (in0 ? row0 : 0), in0 ? 16 : 0);
                cp_async16(&sm.raw[w][r + 8][piece * 8], src + (in8 ? row8 : 0), in8 ? 16 : 0);
            }
            if (tid < C) beta_logit = tid < it.len ? __bfloat162float(beta_g[(it.t0 + tid) * H + it.h]) : 0.f;
        }
        cp_async_commit();
    };

    Item cur, nxt;
    float beta_cur = 0.f, beta_nxt = 0.f;
    prefetch(blockIdx.x, cur, beta_cur);
#pragma unroll 1
    for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
        cp_async_wait<0>();                                     // this item's rows have landed
        if (tid < C) sm.bs[tid] = tid < cur.len ? sigmoid(beta_cur) : 0.f;
        __syncthreads();
        const int h = cur.h, len = cur.len;
        uint8_t* rec = static_cast<uint8_t*>(p.workspace) + (cur.chunk * H + h) * REC_BYTES;
        const __nv_bfloat16 (*rq_raw)[D] = sm.raw[0];
        const __nv_bfloat16 (*rk_raw)[D] = sm.raw[1];
        const __nv_bfloat16 (*rg_raw)[D] = sm.raw[2];

        // the record's padding, as zeros: the 17th piece of each 272-byte row, the 3rd of each 48-byte row
        if (tid < 3 * C) reinterpret_cast<uint4*>(rec + REC_KD + tid * ROW * 2)[D / 8] = make_uint4(0, 0, 0, 0);
        else if (tid < 5 * C)
            reinterpret_cast<uint4*>(rec + REC_INVB + (tid - 3 * C) * SROW * 2)[C / 8] = make_uint4(0, 0, 0, 0);

        // §norms: 1 / sqrt(|q|^2 + 1e-6) per token; 8 threads per token, 16 channels each
        {
            const int r = tid >> 3, s = tid & 7;
            float sq = 0.f, sk = 0.f;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const uint4 qa = *reinterpret_cast<const uint4*>(&rq_raw[r][s * 16 + 8 * half]);
                const uint4 ka = *reinterpret_cast<const uint4*>(&rk_raw[r][s * 16 + 8 * half]);
                const __nv_bfloat162* q2 = reinterpret_cast<const __nv_bfloat162*>(&qa);
                const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&ka);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float2 a = __bfloat1622float2(q2[j]), b = __bfloat1622float2(k2[j]);
                    sq = fmaf(a.x, a.x, fmaf(a.y, a.y, sq));
                    sk = fmaf(b.x, b.x, fmaf(b.y, b.y, sk));
                }
            }
#pragma unroll
            for (int o = 4; o; o >>= 1) {
                sq += __shfl_xor_sync(0xffffffffu, sq, o);
                sk += __shfl_xor_sync(0xffffffffu, sk, o);
            }
            if (s == 0) { sm.rq[r] = rsqrtf(sq + 1e-6f); sm.rk[r] = rsqrtf(sk + 1e-6f); }
        }
        __syncthreads();

        // §decay: one thread per channel c. Safe gate in base 2, cumulative decay G over the chunk, and
        // the key copies. G >= 16 * lower_bound * log2(e) >= -116, so 2^G and 2^-G are normal floats.
        // kd, qd and kr go straight to the record (each warp stores 64 contiguous bytes per row).
        {
            const int c = tid;
            const float A = __expf(p.A_log[h]);
            const float bias = p.dt_bias[h * D + c];
            const float lb2 = p.lower_bound * LOG2E;
            __nv_bfloat16* kd = reinterpret_cast<__nv_bfloat16*>(rec + REC_KD);
            __nv_bfloat16* qd = reinterpret_cast<__nv_bfloat16*>(rec + REC_QD);
            __half* kr = reinterpret_cast<__half*>(rec + REC_KR);
            float G = 0.f;
#pragma unroll
            for (int r = 0; r < C; ++r) {
                G += r < len ? lb2 * sigmoid(A * (__bfloat162float(rg_raw[r][c]) + bias)) : 0.f;
                const float e = fast_exp2(G), ei = fast_exp2(-G);
                const float kh = __bfloat162float(rk_raw[r][c]) * sm.rk[r];
                const float qh = __bfloat162float(rq_raw[r][c]) * sm.rq[r];
                ks[r][c] = kh * e;      // kd
                qs[r][c] = qh * e;      // qd (the output scale is applied by K2)
                gs[r][c] = kh * ei;     // ki
                kd[r * ROW + c] = __float2bfloat16_rn(kh * e);
                qd[r * ROW + c] = __float2bfloat16_rn(qh * e);
            }
            const float decay = fast_exp2(G);
            reinterpret_cast<float*>(rec + REC_DECAY)[c] = decay;
#pragma unroll
            for (int r = 0; r < C; ++r) kr[r * ROW + c] = __float2half_rn(gs[r][c] * decay);   // k_hat 2^(G_last - G_r), <= 1
        }
        __syncthreads();
        prefetch(item + gridDim.x, nxt, beta_nxt);             // raw is free: overlap the next item's copy

        // §lmqk: L = strictly_lower(kd ki^T) * beta_i and Mqk = lower_incl_diag(qd ki^T) on the tensor cores,
        // to fp32 accuracy with the 3xTF32 split. Warp w computes one 16x8 tile: matrix w / 2 (L, Mqk),
        // columns 8 (w % 2) .. +7, over the 128 channels in 16 steps of 8. Four accumulators break the chains.
        {
            const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
            const int mat = warp >> 1, nt = warp & 1;
            const float* a0 = mat ? &qs[g][0] : &ks[g][0];          // rows g and g + 8 of kd (or qd)
            const float* a1 = a0 + 8 * FS;
            const float* b = &gs[8 * nt + g][0];                     // row 8 nt + g of ki: column g of ki^T
            float big[2][4] = {}, small[2][4] = {};
#pragma unroll
            for (int kk = 0; kk < D / 8; ++kk) {
                const int k0 = 8 * kk + t;
                uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
                split_tf32(a0[k0], ah[0], al[0]);
                split_tf32(a1[k0], ah[1], al[1]);
                split_tf32(a0[k0 + 4], ah[2], al[2]);
                split_tf32(a1[k0 + 4], ah[3], al[3]);
                split_tf32(b[k0], bh0, bl0);
                split_tf32(b[k0 + 4], bh1, bl1);
                mma_tf32(small[0], al, bh0, bh1);
                mma_tf32(small[1], ah, bl0, bl1);
                mma_tf32(big[kk & 1], ah, bh0, bh1);
            }
            __half* mqk = reinterpret_cast<__half*>(rec + REC_MQK);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = g + 8 * (e >> 1), j = 8 * nt + 2 * t + (e & 1);
                const float x = (small[0][e] + small[1][e]) + (big[0][e] + big[1][e]);
                if (mat == 0) Ls[i][j] = j < i ? sm.bs[i] * x : 0.f;
                else mqk[i * SROW + j] = __float2half_rn(j <= i ? x : 0.f);
            }
        }
        __syncthreads();

        // §inverse: (I + L)^-1 = (I - L)(I + L^2)(I + L^4)(I + L^8), exact because L^16 = 0.
        // Is holds the running product, Ps the running power of L, each in two buffers so that a product
        // never overwrites what it reads. Thread (i, jc) owns entries (i, jc) and (i, jc + 1). Every matrix
        // here is lower triangular, so the sums stop at row i: at 4 w + 4 for the rows of warp w.
        const int ir = tid >> 3, jc = 2 * (tid & 7), mend = 4 * (tid >> 5) + 4;
        {
            const float2 l = *reinterpret_cast<const float2*>(&Ls[ir][jc]);
            *reinterpret_cast<float2*>(&Ps[0][ir][jc]) = l;
            *reinterpret_cast<float2*>(&Is[0][ir][jc]) =
                make_float2((ir == jc ? 1.f : 0.f) - l.x, (ir == jc + 1 ? 1.f : 0.f) - l.y);
        }
        __syncthreads();
#pragma unroll
        for (int step = 0; step < 3; ++step) {
            const int cur_b = step & 1, nxt_b = cur_b ^ 1;
            float2 s = make_float2(0.f, 0.f);                  // power <- power^2
#pragma unroll 4
            for (int m = 0; m < mend; ++m) {
                const float a = Ps[cur_b][ir][m];
                const float2 bm = *reinterpret_cast<const float2*>(&Ps[cur_b][m][jc]);
                s.x = fmaf(a, bm.x, s.x);
                s.y = fmaf(a, bm.y, s.y);
            }
            *reinterpret_cast<float2*>(&Ps[nxt_b][ir][jc]) = s;
            __syncthreads();
            s = *reinterpret_cast<const float2*>(&Is[cur_b][ir][jc]);   // product <- product (I + power)
#pragma unroll 4
            for (int m = 0; m < mend; ++m) {
                const float a = Is[cur_b][ir][m];
                const float2 bm = *reinterpret_cast<const float2*>(&Ps[nxt_b][m][jc]);
                s.x = fmaf(a, bm.x, s.x);
                s.y = fmaf(a, bm.y, s.y);
            }
            *reinterpret_cast<float2*>(&Is[nxt_b][ir][jc]) = s;
            __syncthreads();
        }
        const float (*INV)[MS] = Is[1];                          // after three steps: (I + L)^-1

        // §invb: fold beta into the inverse's columns, store fp16, and the largest row sum of |INV diag(beta)|
        {
            __half2* invb = reinterpret_cast<__half2*>(rec + REC_INVB + (ir * SROW + jc) * 2);
            *invb = __floats2half2_rn(INV[ir][jc] * sm.bs[jc], INV[ir][jc + 1] * sm.bs[jc + 1]);
            if (tid < 32) {                                    // warp 0: lanes 0..15 own one row each
                float row = 0.f;
                if (tid < C)
                    for (int j = 0; j < C; ++j) row += fabsf(INV[tid][j] * sm.bs[j]);
#pragma unroll
                for (int o = 16; o; o >>= 1) row = fmaxf(row, __shfl_xor_sync(0xffffffffu, row, o));
                if (tid == 0) *reinterpret_cast<float4*>(rec + REC_NORM) = make_float4(row, 0.f, 0.f, 0.f);
            }
        }
        __syncthreads();                                       // shared memory is free for the next item
        cur = nxt;
        beta_cur = beta_nxt;
    }
    cp_async_wait<0>();
}

size_t record_bytes() { return REC_BYTES; }

cudaError_t launch_prepare(const FwdArgs& a, cudaStream_t stream) {
    if (a.n_chunks == 0) return cudaSuccess;
    constexpr int smem = sizeof(K1Smem);
    constexpr int MAX_DEVICES = 64;
    static int blocks_per_sm[MAX_DEVICES] = {}, sms[MAX_DEVICES] = {};   // per device, set on its first launch
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device >= MAX_DEVICES) return cudaErrorInvalidDevice;
    if (blocks_per_sm[device] == 0) {
        err = cudaFuncSetAttribute(kda_fwd_prepare, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device);
        int bps = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kda_fwd_prepare, K1_THREADS, smem);
        blocks_per_sm[device] = bps > 0 ? bps : 1;
    }
    const int64_t resident = static_cast<int64_t>(blocks_per_sm[device]) * sms[device];
    const int64_t items = a.n_chunks * a.H;
    const int64_t grid = items < resident ? items : resident;
    kda_fwd_prepare<<<static_cast<unsigned>(grid), K1_THREADS, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace kda

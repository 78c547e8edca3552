// kda_bwd_states.cu: the two sequential passes of the backward (kda_nb.backward's chunk_states and
// chunk_state_adjoint), one block per (sequence, head) walking that sequence's chunks; everything between
// them (the chunk factors before, the token-parallel adjoint after) runs over all chunks at once.
//
// Chunks sit in step-major rows, as kda_nb.backward lays them out: sequences sorted by chunk count (most
// first), row step_off[i] + n holds chunk i of sorted sequence n, which has chunks[n] chunks. The state is
// [V][K] (S^T of the math), fp32, with the head dimension K = V = 128. Thread t owns row v = t / 2 of the
// state and half t % 2 of its channels: 64 fp32 registers, for the whole sequence. Per chunk:
//
//   forward  (kda_bwd_states):   Sc = S;  R = V - kd S^T;  U = INVb R;  S <- S diag(decay) + U^T kr
//   backward (kda_bwd_dstates):  dSo = dS;  dU += kr dS^T;  dR = INVb^T dU;
//                                dS <- dS diag(decay) + dP^T qd - dR^T kd
//
// The products with the state are a row of S against a chunk's 16 x 128 tile: each thread forms its half
// of the 16 sums and one shuffle adds the other half. The next chunk's tiles arrive in shared memory
// (cp.async, two buffers) while this chunk's arithmetic runs. Plain fp32 arithmetic: this is the first
// version of the backward, correct before it is fast.
#include "kda_common.cuh"
#include "kda_layout.cuh"

namespace kda {
namespace bwd {

constexpr int THREADS = 2 * D;              // two threads per state row
constexpr int HALF = D / 2;                 // channels per thread
constexpr int TILE = CHUNK * D;             // floats in one [CHUNK][D] tile
constexpr int SMALL = CHUNK * CHUNK;        // floats in INVb

using kda::StatesArgs;
using kda::DStatesArgs;

// copy `floats` floats (a multiple of 4, 16-byte aligned) global -> shared, all threads taking part
__device__ __forceinline__ void copy_tile(float* dst, const float* src, int floats) {
    for (int i = 4 * threadIdx.x; i < floats; i += 4 * THREADS) cp_async16(dst + i, src + i);
}

__device__ __forceinline__ void store_row(void* base, bool bf16, int64_t off, const float (&x)[HALF]) {
    if (bf16) {
        auto* p = static_cast<__nv_bfloat16*>(base) + off;
#pragma unroll
        for (int j = 0; j < HALF; j += 8) {
            uint4 w;
            __nv_bfloat162 h[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) h[e] = __floats2bfloat162_rn(x[j + 2 * e], x[j + 2 * e + 1]);
            w.x = *reinterpret_cast<uint32_t*>(&h[0]); w.y = *reinterpret_cast<uint32_t*>(&h[1]);
            w.z = *reinterpret_cast<uint32_t*>(&h[2]); w.w = *reinterpret_cast<uint32_t*>(&h[3]);
            *reinterpret_cast<uint4*>(p + j) = w;
        }
    } else {
        float* p = static_cast<float*>(base) + off;
#pragma unroll
        for (int j = 0; j < HALF; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(x[j], x[j + 1], x[j + 2], x[j + 3]);
    }
}

// sum over this thread's channels of tile[c][.] * x, for every row c; then the other half's share added
__device__ __forceinline__ void row_products(const float* tile, int k0, const float (&x)[HALF], float (&out)[CHUNK]) {
#pragma unroll
    for (int c = 0; c < CHUNK; ++c) {
        const float4* t = reinterpret_cast<const float4*>(tile + c * D + k0);
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < HALF / 4; ++j) {
            const float4 w = t[j];
            acc = fmaf(w.x, x[4 * j], acc); acc = fmaf(w.y, x[4 * j + 1], acc);
            acc = fmaf(w.z, x[4 * j + 2], acc); acc = fmaf(w.w, x[4 * j + 3], acc);
        }
        out[c] = acc + __shfl_xor_sync(0xffffffffu, acc, 1);
    }
}

// shared memory of one buffer: the chunk's tiles, in this order
struct Buf {
    static constexpr int A = 0, B = TILE, C = 2 * TILE, INVB = 3 * TILE, DECAY = 3 * TILE + SMALL;
    static constexpr int FLOATS = DECAY + D;
};

// §states: the forward's loop again, keeping each chunk's entering state, R and U
__global__ void __launch_bounds__(THREADS) kda_bwd_states(StatesArgs p) {
    extern __shared__ __align__(16) float smem[];
    const int n = blockIdx.x, h = blockIdx.y;
    const int v = threadIdx.x >> 1, k0 = (threadIdx.x & 1) * HALF;
    const int H = p.heads, nch = p.chunks[n];
    float S[HALF];
    const int64_t s0_off = ((static_cast<int64_t>(n) * H + h) * D + v) * D + k0;
#pragma unroll
    for (int j = 0; j < HALF; ++j) S[j] = p.s0[s0_off + j];
    auto load = [&](int i, float* buf) {
        const int64_t rh = (p.step_off[i] + n) * H + h;                // (row, head)
        copy_tile(buf + Buf::A, p.kd + rh * TILE, TILE);
        copy_tile(buf + Buf::B, p.kr + rh * TILE, TILE);
        copy_tile(buf + Buf::C, p.v + rh * TILE, TILE);
        copy_tile(buf + Buf::INVB, p.invb + rh * SMALL, SMALL);
        copy_tile(buf + Buf::DECAY, p.decay + rh * D, D);
        cp_async_commit();
    };
    if (nch > 0) load(0, smem);
    for (int i = 0; i < nch; ++i) {
        float* buf = smem + (i & 1) * Buf::FLOATS;
        if (i + 1 < nch) { load(i + 1, smem + ((i + 1) & 1) * Buf::FLOATS); cp_async_wait<1>(); }
        else cp_async_wait<0>();
        __syncthreads();
        const int64_t rh = (p.step_off[i] + n) * H + h;
        store_row(p.sc, p.sc_bf16, (rh * D + v) * D + k0, S);         // the state entering chunk i
        float R[CHUNK], U[CHUNK];
        row_products(buf + Buf::A, k0, S, R);                          // (kd S^T)[c][v]
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) R[c] = buf[Buf::C + c * D + v] - R[c];
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            float acc = 0.f;
#pragma unroll
            for (int e = 0; e < CHUNK; ++e) acc = fmaf(buf[Buf::INVB + c * CHUNK + e], R[e], acc);
            U[c] = acc;
        }
        float* out = (threadIdx.x & 1) ? p.u : p.r;                    // half 0 writes R, half 1 writes U
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) out[rh * TILE + c * D + v] = (threadIdx.x & 1) ? U[c] : R[c];
#pragma unroll
        for (int j = 0; j < HALF; ++j) {
            float acc = S[j] * buf[Buf::DECAY + k0 + j];
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) acc = fmaf(U[c], buf[Buf::B + c * D + k0 + j], acc);
            S[j] = acc;
        }
        __syncthreads();                                               // buf is refilled two chunks on
    }
}

// §dstates: the loop backwards, dS from the last chunk to the first
__global__ void __launch_bounds__(THREADS) kda_bwd_dstates(DStatesArgs p) {
    extern __shared__ __align__(16) float smem[];
    const int n = blockIdx.x, h = blockIdx.y;
    const int v = threadIdx.x >> 1, k0 = (threadIdx.x & 1) * HALF;
    const int H = p.heads, nch = p.chunks[n];
    float dS[HALF];
    const int64_t s_off = ((static_cast<int64_t>(n) * H + h) * D + v) * D + k0;
#pragma unroll
    for (int j = 0; j < HALF; ++j) dS[j] = p.ds_final[s_off + j];
    // buffer: A = qd, B = kd, C = kr, then INVb and decay; dP and dU are read from global memory (once each)
    auto load = [&](int i, float* buf) {
        const int64_t rh = (p.step_off[i] + n) * H + h;
        copy_tile(buf + Buf::A, p.qd + rh * TILE, TILE);
        copy_tile(buf + Buf::B, p.kd + rh * TILE, TILE);
        copy_tile(buf + Buf::C, p.kr + rh * TILE, TILE);
        copy_tile(buf + Buf::INVB, p.invb + rh * SMALL, SMALL);
        copy_tile(buf + Buf::DECAY, p.decay + rh * D, D);
        cp_async_commit();
    };
    if (nch > 0) load(nch - 1, smem + ((nch - 1) & 1) * Buf::FLOATS);
    for (int i = nch - 1; i >= 0; --i) {
        float* buf = smem + (i & 1) * Buf::FLOATS;
        if (i > 0) { load(i - 1, smem + ((i - 1) & 1) * Buf::FLOATS); cp_async_wait<1>(); }
        else cp_async_wait<0>();
        __syncthreads();
        const int64_t rh = (p.step_off[i] + n) * H + h;
        store_row(p.dso, p.sc_bf16, (rh * D + v) * D + k0, dS);       // dS leaving chunk i
        float dU[CHUNK], dR[CHUNK], dP[CHUNK];
        row_products(buf + Buf::C, k0, dS, dU);                        // (kr dS^T)[c][v]
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            dU[c] += p.du[rh * TILE + c * D + v];
            dP[c] = p.dp[rh * TILE + c * D + v];
        }
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            float acc = 0.f;
#pragma unroll
            for (int e = 0; e < CHUNK; ++e) acc = fmaf(buf[Buf::INVB + e * CHUNK + c], dU[e], acc);
            dR[c] = acc;
        }
        __syncwarp();
        if (threadIdx.x & 1) {
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) p.dr[rh * TILE + c * D + v] = dR[c];
        } else {
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) p.du[rh * TILE + c * D + v] = dU[c];
        }
#pragma unroll
        for (int j = 0; j < HALF; ++j) {
            float acc = dS[j] * buf[Buf::DECAY + k0 + j];
#pragma unroll
            for (int c = 0; c < CHUNK; ++c)
                acc = fmaf(dP[c], buf[Buf::A + c * D + k0 + j], fmaf(-dR[c], buf[Buf::B + c * D + k0 + j], acc));
            dS[j] = acc;
        }
        __syncthreads();
    }
    float* out = p.ds0 + s_off;
#pragma unroll
    for (int j = 0; j < HALF; j += 4) *reinterpret_cast<float4*>(out + j) = make_float4(dS[j], dS[j + 1], dS[j + 2], dS[j + 3]);
}

}  // namespace bwd

constexpr size_t BWD_SMEM = 2 * bwd::Buf::FLOATS * sizeof(float);

cudaError_t launch_bwd_states(const StatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_states, cudaFuncAttributeMaxDynamicSharedMemorySize, BWD_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_states<<<dim3(a.n_seq, a.heads), bwd::THREADS, BWD_SMEM, stream>>>(a);
    return cudaGetLastError();
}
cudaError_t launch_bwd_dstates(const DStatesArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0 || a.heads == 0) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(bwd::kda_bwd_dstates, cudaFuncAttributeMaxDynamicSharedMemorySize, BWD_SMEM);
    if (err != cudaSuccess) return err;
    bwd::kda_bwd_dstates<<<dim3(a.n_seq, a.heads), bwd::THREADS, BWD_SMEM, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace kda

// kda_fwd_fused.cu: the fused kernel, K1 and K2 in one: one block per (sequence, head) holds the whole state
// in FUSED_WARPS recurrence warps (the chunk loop of kda_recurrence.cuh, as K2), and FUSED_PREP more warps
// make each chunk's record themselves (kda_chunk_prep.cuh, K1's work) straight into the pipeline's stages,
// so neither K1 nor the workspace is needed, and each record is made once and read where it is made.
#include "kda_common.cuh"
#include "kda_launch.h"
#include "kda_layout.cuh"
#include "kda_chunk_prep.cuh"
#include "kda_recurrence.cuh"

namespace kda {

// 8 recurrence warps (the whole state of one head) and 4 preparing warps per block, 8 stages of shared
// memory: 213 KB, one block per SM. On the H200 (8 x 1024 tokens, H = 64 and 96) two preparing warps were
// 1.5x slower than four: the preparation, not the recurrence, sets its pace.
constexpr int FUSED_WARPS = 8;
constexpr int FUSED_PREP = 4;
constexpr int FUSED_STAGES = 8;
using FusedLayout = K2Layout<FUSED_WARPS>;
static_assert(FUSED_STAGES % FUSED_PREP == 0 && FusedLayout::VB == D, "the whole state per block, one preparing warp per stage");

// §prepare: preparing warp w makes the records of chunks w, w + FUSED_PREP, ... into their stages, chunk c
// into stage c % FUSED_STAGES once every recurrence warp is done with chunk c - FUSED_STAGES, and then
// arrives on full[stage] from every lane (each lane's arrive releases its own writes). FUSED_STAGES is a
// multiple of FUSED_PREP, so each stage has one preparing warp and its phases come in order. Each next
// item's loads are issued while the current one computes, as in K1.
template <GateForm GF, bool FORMS, bool DIMS, int IN>
struct FusedPrepare {
    static __device__ __forceinline__ void warp(const FwdArgs& p, int w, int h, int64_t tok0, int64_t tok1, int nch,
                                                int lane, uint8_t* smem, uint64_t* full, uint64_t* empty) {
        constexpr int NSTAGE = FUSED_STAGES, PREP = FUSED_PREP;
        using Ly = FusedLayout;
        K1Warp& scratch = reinterpret_cast<K1Warp*>(smem + NSTAGE * Ly::STAGE + Ly::OUT_BYTES)[w];
        auto item_of = [&](int c) {
            Item it;
            it.h = h;
            it.t0 = tok0 + static_cast<int64_t>(c) * CHUNK;
            it.len = static_cast<int>(min(static_cast<int64_t>(CHUNK), tok1 - it.t0));
            return it;
        };
        if (w < nch) {
            Fetched<IN> f;
            f.it = item_of(w);
            prep_fetch<GF, DIMS, IN>(p, f, lane);
            prep_fetch_qk<FORMS, DIMS, IN>(p, f.it, scratch, lane);
#pragma unroll 1
            for (int c = w; c < nch; c += PREP) {
                const int stage = c % NSTAGE;
                if (c >= NSTAGE) mbar_wait(&empty[stage], ((c - NSTAGE) / NSTAGE) & 1);
                prep_item<GF, FORMS, DIMS, IN>(p, f, scratch, smem + stage * Ly::STAGE,
                          [&](Item& nx) { if (c + PREP >= nch) return false; nx = item_of(c + PREP); return true; }, lane);
                mbar_arrive(&full[stage]);
            }
        }
        cp_async_wait<0>();
    }
};

// DIMS: the head dims of FwdArgs::dim_k, dim_v (kda_recurrence.cuh, kda_chunk_prep.cuh §dims). The template takes it,
// but the launcher builds no instance with it: at this kernel's budget of 168 registers (one block of 12 warps per SM)
// the DIMS instances spill in the chunk loop (the softplus gate's: 44 to 96 bytes, by how the addresses are formed), so
// the head dims below 128 reach the fused kernel zero-padded (kda_nb.plan keeps the 'pad' route for its path)
// CKPT: the instance that stores the checkpoints of FwdArgs::ckpt_offsets (kda_recurrence.cuh), built with FORMS true
// (FlashKDA's form reads its forms at run time) for the safe gate and the gate given outside, for either input type;
// without a table the instance without them runs. The softplus gate has none: at the kernel's 168 registers its
// instance with checkpoints spilled (56 bytes for bf16 inputs, 8 for fp16), so its checkpoints are K2's
// (kda_nb.serving: checkpoint_launch_plan; the launcher refuses the call).
template <GateForm GF, bool FORMS, bool CKPT, bool DIMS, int IN>
__global__ void __launch_bounds__(32 * (FUSED_WARPS + FUSED_PREP), 1) kda_fwd_fused(FwdArgs p) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t full[FUSED_STAGES];     // full[s]: stage s's record has been made
    __shared__ __align__(8) uint64_t empty[FUSED_STAGES];    // empty[s]: every recurrence warp is done with stage s
    recurrence_block<FUSED_WARPS, FUSED_STAGES, FUSED_PREP, FusedPrepare<GF, FORMS, DIMS, IN>, CKPT, DIMS, IN>(p, smem, full, empty);
}

// The whole batch in one launch: one block per (sequence, head)
// ready: the form's own, per device (launch_fused keeps them: a template's static would be one object for every
// build loaded in a process)
template <GateForm GF, bool FORMS, bool CKPT, bool DIMS, int IN>
cudaError_t launch_fused_form(const FwdArgs& a, cudaStream_t stream, bool* ready) {
    int device = 0;
    cudaError_t err = current_device(device);
    if (err != cudaSuccess) return err;
    constexpr int smem = FUSED_STAGES * FusedLayout::STAGE + FusedLayout::OUT_BYTES + FUSED_PREP * static_cast<int>(sizeof(K1Warp));
    if (!ready[device]) {
        err = cudaFuncSetAttribute(kda_fwd_fused<GF, FORMS, CKPT, DIMS, IN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        ready[device] = true;
    }
    const int ys = a.n_seq < K2_MAX_GRID_Y ? a.n_seq : K2_MAX_GRID_Y;
    const dim3 grid(a.H, ys, (a.n_seq + K2_MAX_GRID_Y - 1) / K2_MAX_GRID_Y);
    kda_fwd_fused<GF, FORMS, CKPT, DIMS, IN><<<grid, FusedLayout::THREADS + 32 * FUSED_PREP, smem, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_fused(const FwdArgs& a, cudaStream_t stream) {
    if (a.n_seq == 0) return cudaSuccess;
    if (a.dim_k != D || a.dim_v != D) return cudaErrorInvalidValue;    // K = V = 128 only (see kda_fwd_fused above)
    static bool ready[FWD_INPUT_INSTANCES][MAX_DEVICES] = {};    // the shared-memory attribute, once per instance and device
    if (a.ckpt_offsets != nullptr && a.ckpt_slots != nullptr && a.ckpt_count > 0) {
        // a table of checkpoints: the instances with CKPT (FORMS true; the safe gate and the gate given outside)
        static bool ready_ckpt[2][2][MAX_DEVICES] = {};
        if (a.beta_form < 0 || a.beta_form > 2 || a.norm_form < 0 || a.norm_form > 1 || a.group_shift < 0)
            return cudaErrorInvalidValue;
        return dispatch<INPUT_BF16, INPUT_F16>(a.input_kind, [&](auto in) {
            constexpr int SAFE = static_cast<int>(GateForm::SafeSigmoid), GIVEN = static_cast<int>(GateForm::Given);
            return dispatch<SAFE, GIVEN>(a.gate_form, [&](auto gf) {
                constexpr int F = decltype(gf)::value, IN = decltype(in)::value;
                return launch_fused_form<static_cast<GateForm>(F), true, true, false, IN>(
                    a, stream, ready_ckpt[F == GIVEN][IN == INPUT_F16]);
            });
        });
    }
    return dispatch_fwd(a.gate_form, a.beta_form, a.norm_form, a.group_shift, a.input_kind, [&](auto gf, auto forms, auto in) {
        constexpr int F = decltype(gf)::value, IN = decltype(in)::value;
        constexpr bool FORMS = decltype(forms)::value;
        return launch_fused_form<static_cast<GateForm>(F), FORMS, false, false, IN>(a, stream, ready[fwd_input_instance(F, FORMS, IN)]);
    });
}

}  // namespace kda

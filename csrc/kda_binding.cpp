// kda_binding.cpp: the torch side of the kernels. Checks what the kernels assume (devices, dtypes,
// shapes), makes misaligned or strided tensors safe to hand over, builds the batch layout on the device,
// fills kda::FwdArgs (or DecodeArgs) and launches the kernels of one path on torch's current stream of the
// inputs' device. It chooses nothing: one entry point per path, each with the same 14 arguments
// (KDA_CALL_PARAMS), and the choice between them (and of the pipeline's steps) is kda_nb.plan's, in Python:
//   kda_fwd_chunked(<14>, steps)  the layout kernel (variable lengths), K1 and K2, in `steps` pipeline steps
//   kda_fwd_fused(<14>)           the layout kernel (variable lengths) and the fused kernel
//   kda_decode(<14>)              K3; kda_decode_plan(<14>) / kda_decode_run(id) / kda_decode_free(id)
//   kda_bwd_prepare(...)          the backward's chunk factors, the tiles for the passes (kda_bwd_chunk.cu)
//   kda_bwd_states(...), kda_bwd_dstates(...)  the backward's two passes over each sequence's chunks, on those
//                                 tiles and the caller's v and dO (kda_bwd_states.cu)
//   kda_bwd_adjoint(...)          the rest of the backward, into the gradients (kda_bwd_chunk.cu)
// It needs torch's headers and the CUDA runtime's headers only, so it also compiles against a CPU build of
// torch (CI does). kda_nb's Python layer (kda_nb.api) validates inputs with friendlier messages before it
// gets here; these checks are the last line of defence for direct callers.
#include <torch/extension.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kda_launch.h"

// The 14 arguments of every entry point, as parameters and as the names passed on: written once here.
#define KDA_CALL_PARAMS                                                                                        \
    torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor g, torch::Tensor beta, double scale,        \
        torch::Tensor out, torch::Tensor A_log, torch::Tensor dt_bias, double lower_bound,                       \
        c10::optional<torch::Tensor> initial_state, c10::optional<torch::Tensor> final_state,                    \
        c10::optional<torch::Tensor> cu_seqlens, c10::optional<torch::Tensor> state_indices
#define KDA_CALL_TENSORS q, k, v, g, beta, out, A_log, dt_bias, initial_state, final_state, cu_seqlens, state_indices

namespace {

// Integers and shapes in error messages go to TORCH_CHECK as C strings: streaming an int64_t (or sizes())
// into its message killed the process (SIGSEGV) instead of raising, seen on the H200 with torch 2.11.
std::string num(int64_t v) { return std::to_string(v); }

// "[2, 3, 4]": a tensor's shape for error messages
std::string shape_of(const torch::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
}

void check_tensor(const torch::Tensor& t, const char* name, at::ScalarType dtype, const torch::Tensor& like) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.device() == like.device(), name, " must be on ", like.device(), ", got ", t.device());
    TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

int state_kind(const c10::optional<torch::Tensor>& s, const char* name, const torch::Tensor& like,
               int64_t N, int64_t H) {
    if (!s.has_value()) return kda::STATE_NONE;
    const auto& t = *s;
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
                " must be float32 or bfloat16, got ", t.scalar_type());
    check_tensor(t, name, t.scalar_type(), like);
    TORCH_CHECK(t.dim() == 4 && t.size(0) == N && t.size(1) == H && t.size(2) == 128 && t.size(3) == 128,
                name, " must have shape [", num(N).c_str(), ", ", num(H).c_str(), ", 128, 128], got ", shape_of(t).c_str());
    return t.scalar_type() == at::kFloat ? kda::STATE_FP32 : kda::STATE_BF16;
}

// Do the bytes of a and b overlap? (kda_nb.api checks the same, with the same words.)
bool overlap(const torch::Tensor& a, const torch::Tensor& b) {
    const auto pa = reinterpret_cast<uintptr_t>(a.data_ptr()), pb = reinterpret_cast<uintptr_t>(b.data_ptr());
    return a.device() == b.device() && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// A float32 tensor: `t` itself if it is one (no dispatch), else a converted copy.
torch::Tensor as_float(const torch::Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); }

// 16-byte aligned and contiguous, as the kernels' vector loads need: `t` itself, or a copy of it. A view
// at an odd offset (flat[1:].view(...)) gets a copy here instead of a misaligned-address fault.
bool usable_as_is(const torch::Tensor& t) {
    return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
torch::Tensor kernel_ready(const torch::Tensor& t) {
    if (usable_as_is(t)) return t;
    return t.is_contiguous() ? t.clone() : t.contiguous();     // fresh allocations are aligned
}


// The checked, kernel-ready form of a call's tensors, shared by every path (kda_fwd_chunked, kda_fwd_fused,
// kda_decode, kda_decode_plan). q, k, v, g: [B, T, H, 128] bf16; beta [B, T, H] bf16; out like v; A_log [H], dt_bias
// [H, 128] fp32; states [N, H, 128, 128] fp32 or bf16, or pools [P, H, 128, 128] with state_indices [N]
// (int32 or int64). cu_seqlens: int64 [N + 1] on the device, or none for a fixed-length batch (N = B).
// Inputs that are misaligned or not contiguous are copied; outputs that are get a temporary (`o`,
// `s_out`), which `finish` copies back.
struct Call {
    torch::Tensor qc, kc, vc, gc, bc, Ac, dc, o, slots, cu;
    c10::optional<torch::Tensor> s_in, s_out;
    int64_t B = 0, T = 0, H = 0, N = 0, P = 0;
    bool varlen = false, pooled = false;
    int in_kind = kda::STATE_NONE, out_kind = kda::STATE_NONE;
    cudaStream_t stream = nullptr;
};

Call prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
             const torch::Tensor& beta, const torch::Tensor& out, const torch::Tensor& A_log,
             const torch::Tensor& dt_bias, const c10::optional<torch::Tensor>& initial_state,
             const c10::optional<torch::Tensor>& final_state, const c10::optional<torch::Tensor>& cu_seqlens,
             const c10::optional<torch::Tensor>& state_indices, bool slots_as_int64) {
    Call c;
    TORCH_CHECK(q.dim() == 4 && q.size(3) == 128, "q must be [B, T, H, 128], got ", shape_of(q).c_str());
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    c.B = q.size(0); c.T = q.size(1); c.H = q.size(2);
    c.varlen = cu_seqlens.has_value();
    if (c.varlen) {
        TORCH_CHECK(cu_seqlens->dim() == 1 && cu_seqlens->numel() >= 2, "cu_seqlens must be [N + 1] with N >= 1");
        TORCH_CHECK(cu_seqlens->scalar_type() == at::kLong, "cu_seqlens must be int64, got ", cu_seqlens->scalar_type());
        TORCH_CHECK(c.B == 1, "with cu_seqlens the batch must be one row (B = 1), got B = ", num(c.B).c_str());
        const torch::Tensor& cu = *cu_seqlens;
        c.cu = cu.device() == q.device() && cu.is_contiguous() ? cu : cu.to(q.device()).contiguous();
    }
    c.N = c.varlen ? cu_seqlens->numel() - 1 : c.B;
    TORCH_CHECK(c.B >= 1 && c.T >= 1 && c.H >= 1, "q must have B, T, H >= 1, got ", shape_of(q).c_str());
    TORCH_CHECK(c.N <= INT32_MAX && c.H <= INT32_MAX, "too many sequences or heads");
    const torch::Tensor* same_shape[] = {&q, &k, &v, &g, &out};
    const char* names[] = {"q", "k", "v", "g", "out"};
    for (int i = 0; i < 5; ++i) {
        check_tensor(*same_shape[i], names[i], at::kBFloat16, q);
        TORCH_CHECK(same_shape[i]->sizes() == q.sizes(), names[i], " must have the shape of q ", shape_of(q).c_str(),
                    ", got ", shape_of(*same_shape[i]).c_str());
    }
    check_tensor(beta, "beta", at::kBFloat16, q);
    TORCH_CHECK(beta.dim() == 3 && beta.size(0) == c.B && beta.size(1) == c.T && beta.size(2) == c.H,
                "beta must be [B, T, H], got ", shape_of(beta).c_str());
    for (const auto* t : {&A_log, &dt_bias}) {
        const char* name = t == &A_log ? "A_log" : "dt_bias";
        TORCH_CHECK(t->scalar_type() == at::kFloat || t->scalar_type() == at::kDouble, name,
                    " must be float32 or float64, got ", t->scalar_type());
        TORCH_CHECK(t->device() == q.device(), name, " must be on ", q.device(), ", got ", t->device());
    }
    TORCH_CHECK(A_log.dim() == 1 && A_log.size(0) == c.H, "A_log must be [H] = [", num(c.H).c_str(), "], got ", shape_of(A_log).c_str());
    TORCH_CHECK(dt_bias.dim() == 2 && dt_bias.size(0) == c.H && dt_bias.size(1) == 128, "dt_bias must be [H, 128] = [",
                num(c.H).c_str(), ", 128], got ", shape_of(dt_bias).c_str());
    {   // fwd leaves its inputs untouched: out and final_state must not share memory with them
        const torch::Tensor* ins[] = {&q, &k, &v, &g, &beta, &A_log, &dt_bias};
        const char* in_names[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias"};
        for (int i = 0; i < 7; ++i)
            TORCH_CHECK(!overlap(out, *ins[i]), "out must not share memory with ", in_names[i],
                        ": fwd leaves its inputs untouched");
        if (initial_state.has_value())
            TORCH_CHECK(!overlap(out, *initial_state), "out must not share memory with initial_state: fwd leaves its inputs untouched");
        if (final_state.has_value()) {
            for (int i = 0; i < 5; ++i)
                TORCH_CHECK(!overlap(*final_state, *ins[i]), "final_state must not share memory with ", in_names[i]);
            TORCH_CHECK(!overlap(*final_state, out), "final_state must not share memory with out");
        }
    }

    c.qc = kernel_ready(q); c.kc = kernel_ready(k); c.vc = kernel_ready(v); c.gc = kernel_ready(g);
    c.bc = kernel_ready(beta);
    c.Ac = kernel_ready(as_float(A_log)); c.dc = kernel_ready(as_float(dt_bias));
    c.o = usable_as_is(out) ? out : torch::empty_like(out, at::MemoryFormat::Contiguous);
    // States: one per sequence ([N, H, 128, 128]), or pools of P slots with state_indices [N] naming the
    // slot each sequence reads and writes (-1: a padding sequence); the two may be one tensor.
    c.pooled = state_indices.has_value();
    c.P = c.N;
    if (c.pooled) {
        TORCH_CHECK(state_indices->dim() == 1 && state_indices->numel() == c.N, "state_indices must be [N = ", num(c.N).c_str(),
                    "], got ", shape_of(*state_indices).c_str());
        TORCH_CHECK(state_indices->scalar_type() == at::kLong || state_indices->scalar_type() == at::kInt,
                    "state_indices must be int32 or int64, got ", state_indices->scalar_type());
        TORCH_CHECK(state_indices->device() == q.device(), "state_indices must be on ", q.device(), ", got ",
                    state_indices->device());
        const torch::Tensor& idx = *state_indices;
        c.slots = slots_as_int64 && idx.scalar_type() != at::kLong ? idx.to(at::kLong).contiguous() : idx.contiguous();
        c.P = initial_state.has_value() ? initial_state->size(0) : final_state.has_value() ? final_state->size(0) : INT64_MAX;
        TORCH_CHECK(!(initial_state.has_value() && final_state.has_value()) || initial_state->size(0) == final_state->size(0),
                    "initial_state and final_state must be pools of the same size");
    }
    if (initial_state.has_value()) {
        state_kind(initial_state, "initial_state", q, c.P, c.H);
        c.s_in = kernel_ready(*initial_state);
    }
    if (final_state.has_value()) {
        state_kind(final_state, "final_state", q, c.P, c.H);
        if (usable_as_is(*final_state)) c.s_out = *final_state;
        else if (c.pooled) c.s_out = final_state->contiguous().clone();      // slots no sequence names keep their values
        else c.s_out = torch::empty_like(*final_state, at::MemoryFormat::Contiguous);
    }
    c.in_kind = state_kind(c.s_in, "initial_state", q, c.P, c.H);
    c.out_kind = state_kind(c.s_out, "final_state", q, c.P, c.H);
    c.stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(q.device()).native_handle());
    return c;
}

// The fields kda::FwdArgs and kda::DecodeArgs share, from a prepared call.
template <typename Args>
void fill_common(Args& a, const Call& c, double scale, double lower_bound) {
    a.q = c.qc.data_ptr(); a.k = c.kc.data_ptr(); a.v = c.vc.data_ptr(); a.g = c.gc.data_ptr(); a.beta = c.bc.data_ptr();
    a.A_log = c.Ac.data_ptr<float>(); a.dt_bias = c.dc.data_ptr<float>(); a.out = c.o.data_ptr();
    a.state_in = c.s_in.has_value() ? c.s_in->data_ptr() : nullptr;
    a.state_out = c.s_out.has_value() ? c.s_out->data_ptr() : nullptr;
    a.state_in_kind = c.in_kind;
    a.state_out_kind = c.out_kind;
    a.n_slots = c.P;
    a.n_seq = static_cast<int>(c.N); a.H = static_cast<int>(c.H);
    a.scale = static_cast<float>(scale); a.lower_bound = static_cast<float>(lower_bound);
}

void finish(const Call& c, torch::Tensor& out, const c10::optional<torch::Tensor>& final_state) {
    if (!c.o.is_same(out)) out.copy_(c.o);
    if (final_state.has_value() && !c.s_out->is_same(*final_state)) final_state->copy_(*c.s_out);
}

// §pipeline: K2 runs each sequence's chunks one after another, so a batch of one long sequence gives it
// few blocks (192 at H = 96: two per head) and leaves most of the GPU idle while it runs. Such a batch can
// be cut into steps of consecutive chunks: K1 prepares step s + 1 on the caller's stream while K2 runs step
// s on a second stream of higher priority, and the state passes from one step to the next in fp32 (the
// carry), so the results are bitwise those of one step. Which batches take it, and in how many steps, is
// kda_nb.plan's rule (the kernels notebook and the plan notebook say why); how the chunks are cut into the steps
// is step_edge's (below): each step PIPELINE_GROWTH times the one before. Measured on the H200 in one process
// (benchmarks/pipeline_growth_h200.md), 4 steps, one sequence of 8192: H = 96 0.967 -> 0.946 ms, H = 64
// 0.755 -> 0.737 ms, of 32768 at H = 32 the same; other growths (1.3 to 3) were bumpy around it. Equal steps
// until the growth's commit.
constexpr int MAX_STEPS = 8;
constexpr double PIPELINE_GROWTH = 1.6;    // §steps: each step this many times the one before (1: equal steps)

struct SideStream {                        // per thread and device: the second stream and the events that join it
    cudaStream_t stream = nullptr;
    cudaEvent_t ready[MAX_STEPS + 1] = {};
};

cudaError_t side_stream(SideStream*& out) {
    thread_local SideStream sides[kda::MAX_DEVICES];
    int device = 0;
    const cudaError_t found = kda::current_device(device);
    if (found != cudaSuccess) return found;
    SideStream& s = sides[device];
    if (!s.stream) {
        int least = 0, greatest = 0;
        cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (err == cudaSuccess) err = cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, greatest);
        for (auto& e : s.ready)
            if (err == cudaSuccess) err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err != cudaSuccess) { s.stream = nullptr; return err; }
    }
    out = &s;
    return cudaSuccess;
}

// §steps: K1 and K2 over the whole batch on `stream`, in `steps` steps as above; `carry` holds two
// [H, 128, 128] fp32 states when steps > 1 (step s reads the one step s - 1 wrote). Step s covers the chunks
// [step_edge(s), step_edge(s + 1)) of each sequence: each step `growth` times as long as the one before (1: equal
// steps), so that the first, whose K1 runs alone while K2 waits for it, is short.
int64_t step_edge(int64_t s, int64_t steps, int64_t chunks, double growth) {
    if (s <= 0) return 0;
    if (s >= steps) return chunks;
    const double w = growth == 1.0 ? double(s) / double(steps) : (std::pow(growth, double(s)) - 1.0) / (std::pow(growth, double(steps)) - 1.0);
    const int64_t edge = static_cast<int64_t>(std::llround(w * double(chunks)));
    return std::max<int64_t>(s, std::min<int64_t>(chunks - (steps - s), edge));   // at least one chunk a step
}

cudaError_t launch_chunked(const kda::FwdArgs& a, int64_t steps, float* carry, cudaStream_t stream,
                           double growth = PIPELINE_GROWTH) {
    cudaError_t err;
    if (steps == 1) {
        if ((err = kda::launch_prepare(a, stream)) != cudaSuccess) return err;
        return kda::launch_recurrence(a, stream);
    }
    SideStream* side = nullptr;
    if ((err = side_stream(side)) != cudaSuccess) return err;
    const int64_t carry_floats = static_cast<int64_t>(a.H) * 128 * 128;
    for (int64_t s = 0; s < steps; ++s) {
        kda::FwdArgs step = a;
        step.chunk_lo = step_edge(s, steps, a.max_chunks, growth);
        step.chunk_hi = s + 1 == steps ? INT64_MAX : step_edge(s + 1, steps, a.max_chunks, growth);
        step.carry_in = s > 0 ? carry + ((s - 1) & 1) * carry_floats : nullptr;
        step.carry_out = s + 1 < steps ? carry + (s & 1) * carry_floats : nullptr;
        if ((err = kda::launch_prepare(step, stream)) != cudaSuccess) return err;
        if ((err = cudaEventRecord(side->ready[s], stream)) != cudaSuccess) return err;
        if ((err = cudaStreamWaitEvent(side->stream, side->ready[s], 0)) != cudaSuccess) return err;
        if ((err = kda::launch_recurrence(step, side->stream)) != cudaSuccess) return err;
    }
    if ((err = cudaEventRecord(side->ready[steps], side->stream)) != cudaSuccess) return err;
    return cudaStreamWaitEvent(stream, side->ready[steps], 0);     // the caller's stream goes on after the last step
}

// §forward: what both forward paths share. The call's FwdArgs, with the layout tables [offsets N+1 | chunk
// offsets N+1 | order, N int32] filled by the layout kernel from cu_seqlens (a fixed-length batch needs
// none: the kernels find its chunks by division), and the bound on the chunks (kda_layout.cuh) that sizes
// K1's grid and the workspace. Everything is derived on the device from shapes and cu_seqlens, with no copy
// to the host, so the call can be captured in a CUDA graph. `tables` keeps the tables alive.
kda::FwdArgs forward_args(const Call& c, double scale, double lower_bound, torch::Tensor& tables) {
    const int64_t B = c.B, T = c.T, H = c.H, N = c.N;
    kda::FwdArgs a{};
    fill_common(a, c, scale, lower_bound);
    a.state_slot = c.pooled ? c.slots.data_ptr<int64_t>() : nullptr;
    tables = torch::empty({2 * (N + 1) + (N + 1) / 2}, c.qc.options().dtype(at::kLong));
    int64_t* t = tables.data_ptr<int64_t>();
    int* order = c.varlen && N > 1 ? reinterpret_cast<int*>(t + 2 * (N + 1)) : nullptr;
    a.cu_seqlens = t; a.cu_chunks = t + (N + 1); a.seq_order = order;
    a.max_chunks = c.varlen ? kda::max_chunks_varlen(B * T, N) : kda::max_chunks_fixed(B, T);
    a.seq_len = c.varlen ? 0 : T;                      // fixed length: the kernels need no tables
    if (c.varlen) {
        const cudaError_t err = kda::launch_layout(c.cu.data_ptr<int64_t>(), a.n_seq, B * T, t, t + (N + 1), order,
                                                   c.o.data_ptr(), H * 128 * 2, c.stream);
        TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    }
    return a;
}

}  // namespace

// The chunked path: the layout kernel (variable lengths only), K1 and K2, on torch's current stream of q's
// device, in `steps` pipeline steps (1 to 8, at most one per chunk; K2 on a second stream joined back to
// the caller's, if steps > 1). The workspace holds K1's records, then (a pipeline) the two carry states.
void kda_fwd_chunked(KDA_CALL_PARAMS, int64_t steps) {
    TORCH_CHECK(steps >= 1 && steps <= MAX_STEPS, "steps must be 1 to ", num(MAX_STEPS).c_str(), ", got ", num(steps).c_str());
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    const Call c = prepare(KDA_CALL_TENSORS, true);
    torch::Tensor tables;
    kda::FwdArgs a = forward_args(c, scale, lower_bound, tables);
    steps = std::max<int64_t>(1, std::min<int64_t>(steps, a.max_chunks));
    const int64_t H = c.H;
    const int64_t rec_bytes = a.max_chunks * H * static_cast<int64_t>(kda::record_bytes());
    const int64_t ws_bytes = rec_bytes + (steps > 1 ? 2 * H * 128 * 128 * 4 : 0);
    const torch::Tensor ws = torch::empty({std::max<int64_t>(ws_bytes, 16)}, q.options().dtype(at::kByte));
    a.workspace = ws.data_ptr();
    const cudaError_t err = launch_chunked(a, steps, reinterpret_cast<float*>(static_cast<uint8_t*>(a.workspace) + rec_bytes),
                                           c.stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_chunked: launching K1 and K2 failed: ", cudaGetErrorString(err));
    finish(c, out, final_state);
}

// The fused path: the layout kernel (variable lengths only) and the fused kernel (kda_fwd_fused.cu), one
// launch for the whole batch, with no workspace.
void kda_fwd_fused(KDA_CALL_PARAMS) {
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    const Call c = prepare(KDA_CALL_TENSORS, true);
    torch::Tensor tables;
    kda::FwdArgs a = forward_args(c, scale, lower_bound, tables);
    const torch::Tensor ws = torch::empty({16}, q.options().dtype(at::kByte));
    a.workspace = ws.data_ptr();
    const cudaError_t err = kda::launch_fused(a, c.stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_fused: launching the fused kernel failed: ", cudaGetErrorString(err));
    finish(c, out, final_state);
}

// K3's arguments from a prepared call: it reads the caller's cu_seqlens itself, and the slots as given
static kda::DecodeArgs decode_args(const Call& c, double scale, double lower_bound) {
    kda::DecodeArgs a{};
    fill_common(a, c, scale, lower_bound);
    a.state_slot = c.pooled ? c.slots.data_ptr() : nullptr;      // int32 or int64, as given
    a.slot_int32 = c.pooled && c.slots.scalar_type() == at::kInt;
    a.cu_seqlens = c.varlen ? c.cu.data_ptr<int64_t>() : nullptr;
    a.seq_len = c.varlen ? 0 : c.T;
    a.total = c.B * c.T;
    return a;
}

// The decode path: K3 alone, one launch, the token recurrence on each state (kda_decode.cu). Same
// arguments and results as the forward paths; fast for sequences of a few tokens, slow for long ones
// (kda_nb.plan picks the path by the shapes).
void kda_decode(KDA_CALL_PARAMS) {
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    const Call c = prepare(KDA_CALL_TENSORS, false);
    const cudaError_t err = kda::launch_decode(decode_args(c, scale, lower_bound), c.stream);
    TORCH_CHECK(err == cudaSuccess, "kda_decode launch failed: ", cudaGetErrorString(err));
    finish(c, out, final_state);
}

// §plans: a decode call prepared once (kda_nb.DecodeStep). A serving loop calls the same step on the same
// buffers every token; kda_decode checks and packs its 14 arguments each time, which costs more host time
// than K3 takes on the GPU for a small batch. A plan does that once: kda_decode_plan checks the tensors as
// kda_decode does, refuses any that would need a copy (a plan runs on the caller's tensors themselves, so
// that what the caller writes into them before a call is what that call reads), and keeps them alive;
// kda_decode_run(id) launches K3 on torch's current stream; kda_decode_free(id) lets the tensors go.
// The kernel reads cu_seqlens and state_indices on the device at every launch and makes any values safe,
// so a plan stays in bounds whatever is written into them between calls.
namespace {

struct DecodePlan {
    Call c;
    kda::DecodeArgs a{};
};
std::mutex plans_mutex;
std::unordered_map<int64_t, std::shared_ptr<const DecodePlan>> plans;
int64_t next_plan = 1;

// `used` (what prepare made of `given`) must be `given` itself: a copy would be read once, at planning
void require_as_is(const torch::Tensor& given, const torch::Tensor& used, const char* name,
                   const char* what = "contiguous and 16-byte aligned") {
    TORCH_CHECK(used.is_same(given), name, " must be ", what,
                " for a prepared decode step: it runs on the tensors themselves at every call");
}

}  // namespace

int64_t kda_decode_plan(KDA_CALL_PARAMS) {
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    auto plan = std::make_shared<DecodePlan>();
    plan->c = prepare(KDA_CALL_TENSORS, false);
    const Call& c = plan->c;
    require_as_is(q, c.qc, "q"); require_as_is(k, c.kc, "k"); require_as_is(v, c.vc, "v"); require_as_is(g, c.gc, "g");
    require_as_is(beta, c.bc, "beta"); require_as_is(A_log, c.Ac, "A_log", "float32, contiguous and 16-byte aligned");
    require_as_is(dt_bias, c.dc, "dt_bias", "float32, contiguous and 16-byte aligned");
    require_as_is(out, c.o, "out");
    if (initial_state.has_value()) require_as_is(*initial_state, *c.s_in, "initial_state");
    if (final_state.has_value()) require_as_is(*final_state, *c.s_out, "final_state");
    if (c.varlen) require_as_is(*cu_seqlens, c.cu, "cu_seqlens", "contiguous and on q's device");
    if (c.pooled) require_as_is(*state_indices, c.slots, "state_indices");
    plan->a = decode_args(c, scale, lower_bound);
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const int64_t id = next_plan++;
    plans.emplace(id, std::move(plan));
    return id;
}

void kda_decode_run(int64_t id) {
    std::shared_ptr<const DecodePlan> plan;
    {
        const std::lock_guard<std::mutex> lock(plans_mutex);
        const auto it = plans.find(id);
        TORCH_CHECK(it != plans.end(), "no prepared decode step ", num(id).c_str(), " (freed, or never made)");
        plan = it->second;
    }
    const c10::Device device = plan->c.qc.device();
    const c10::DeviceGuard guard(device);
    const cudaStream_t stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle());
    const cudaError_t err = kda::launch_decode(plan->a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_decode launch failed: ", cudaGetErrorString(err));
}

bool kda_decode_free(int64_t id) {
    std::shared_ptr<const DecodePlan> plan;          // released after the lock: its tensors' destructors run outside it
    const std::lock_guard<std::mutex> lock(plans_mutex);
    const auto it = plans.find(id);
    if (it == plans.end()) return false;
    plan = std::move(it->second);
    plans.erase(it);
    return true;
}

// The layout kernel alone, for the tests: (safe offsets [N+1], chunk offsets [N+1], order [N] int32,
// zeroed [T] bytes: 1 where the token's output row would have been zeroed) for cu_seqlens [N+1] on the
// device and T tokens.
std::vector<torch::Tensor> kda_layout(torch::Tensor cu_seqlens, int64_t total) {
    TORCH_CHECK(cu_seqlens.is_cuda() && cu_seqlens.scalar_type() == at::kLong && cu_seqlens.dim() == 1 &&
                cu_seqlens.numel() >= 2, "cu_seqlens must be a CUDA int64 tensor [N + 1], N >= 1");
    const c10::DeviceGuard guard(cu_seqlens.device());
    const int64_t N = cu_seqlens.numel() - 1;
    const torch::Tensor cu = cu_seqlens.contiguous();
    const torch::Tensor safe = torch::empty({N + 1}, cu.options()), chunks = torch::empty({N + 1}, cu.options());
    const torch::Tensor order = torch::empty({N}, cu.options().dtype(at::kInt));
    const torch::Tensor rows = torch::ones({total, 16}, cu.options().dtype(at::kByte));
    const cudaStream_t stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(cu.device()).native_handle());
    const cudaError_t err = kda::launch_layout(cu.data_ptr<int64_t>(), static_cast<int>(N), total,
                                               safe.data_ptr<int64_t>(), chunks.data_ptr<int64_t>(),
                                               order.data_ptr<int>(), rows.data_ptr(), 16, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    return {safe, chunks, order, rows.select(1, 0).eq(0)};
}

int64_t kda_record_bytes() { return static_cast<int64_t>(kda::record_bytes()); }
// floats of the small factors kda_bwd_prepare keeps for kda_bwd_adjoint, per (chunk row, head)
int64_t kda_bwd_factor_floats() { return kda::BWD_FACTOR_FLOATS; }

// The backward's kernels. Their tables are made on the host by the caller (kda_nb.backward_kernels) and checked here
// before they are copied to the device, so that no kernel can be sent outside its tensors, whatever cu_seqlens held:
// row_tok [M] int64 and row_len [M] int32 (row r: the tokens row_tok[r] .. row_tok[r] + row_len[r] - 1, 1 to 16 of
// them, inside the caller's tokens), and for the passes step_off [steps + 1] int64 and chunks [N] int32 (row
// step_off[i] + n is chunk i of sorted sequence n, which has chunks[n] chunks), against M and N.
namespace {
void check_tile(const torch::Tensor& t, const char* name, const torch::Tensor& like, std::vector<int64_t> shape,
                at::ScalarType dtype = at::kFloat) {
    check_tensor(t, name, dtype, like);
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
    TORCH_CHECK(t.sizes() == c10::IntArrayRef(shape), name, " has shape ", shape_of(t).c_str());
}
void check_steps(const torch::Tensor& step_off_host, const torch::Tensor& chunks_host, int64_t M, int64_t N) {
    TORCH_CHECK(step_off_host.device().is_cpu() && step_off_host.scalar_type() == at::kLong && step_off_host.dim() == 1 &&
                step_off_host.is_contiguous(), "step_off must be a contiguous CPU int64 tensor");
    TORCH_CHECK(chunks_host.device().is_cpu() && chunks_host.scalar_type() == at::kInt && chunks_host.numel() == N &&
                chunks_host.is_contiguous(), "chunks must be a contiguous CPU int32 tensor [N]");
    const int64_t* off = step_off_host.data_ptr<int64_t>();
    const int* ch = chunks_host.data_ptr<int>();
    const int64_t steps = step_off_host.numel() - 1;
    TORCH_CHECK(steps >= 0 && off[0] == 0 && off[steps] == M, "step_off must run from 0 to M");
    for (int64_t n = 0; n < N; ++n)
        TORCH_CHECK(ch[n] >= 0 && ch[n] <= steps && (n == 0 || ch[n] <= ch[n - 1]), "chunks must fall from the first sequence");
    for (int64_t i = 0; i < steps; ++i) {                  // step i holds the sequences with more than i chunks
        int64_t active = 0;
        while (active < N && ch[active] > i) ++active;
        TORCH_CHECK(off[i + 1] - off[i] == active, "step_off does not match chunks at step ", num(i).c_str());
    }
}
void check_rows(const torch::Tensor& row_tok_host, const torch::Tensor& row_len_host, int64_t total) {
    TORCH_CHECK(row_tok_host.device().is_cpu() && row_tok_host.scalar_type() == at::kLong && row_tok_host.dim() == 1 &&
                row_tok_host.is_contiguous(), "row_tok must be a contiguous CPU int64 tensor [M]");
    const int64_t M = row_tok_host.numel();
    TORCH_CHECK(row_len_host.device().is_cpu() && row_len_host.scalar_type() == at::kInt && row_len_host.numel() == M &&
                row_len_host.is_contiguous(), "row_len must be a contiguous CPU int32 tensor [M]");
    const int64_t* tok = row_tok_host.data_ptr<int64_t>();
    const int* len = row_len_host.data_ptr<int>();
    for (int64_t r = 0; r < M; ++r)
        TORCH_CHECK(len[r] >= 1 && len[r] <= 16 && tok[r] >= 0 && tok[r] + len[r] <= total,
                    "row ", num(r).c_str(), " must be 1 to 16 tokens inside the ", num(total).c_str(), " given");
}
// a caller's [..., H, 128] tensor of tokens that a pass copies with cp.async: contiguous, 16-byte aligned; its tokens
int64_t check_tokens(const torch::Tensor& t, const char* name, int64_t H, const torch::Tensor& like) {
    TORCH_CHECK(t.dim() >= 2 && t.size(-1) == 128 && t.size(-2) == H, name, " must be [..., H, 128] with H = ", num(H).c_str(),
                ", got ", shape_of(t).c_str());
    TORCH_CHECK(t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be contiguous and 16-byte aligned");
    check_tensor(t, name, t.scalar_type(), like);
    return t.numel() / (H * 128);
}
// a small host table on the device without waiting for the stream: staged in pinned memory (PyTorch's caching
// host allocator keeps the staging buffer until the copy is done). Until a358908 of main a pageable .to(device),
// which synchronizes the stream: eight times a backward call, the GPU idle while the host caught up.
torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& dev) {
    return host.pin_memory().to(dev, /*non_blocking=*/true);
}
// the steps [lo, hi) of one launch of a pass, or the rows [lo, hi) of one launch of the chunk kernels, inside [0, n)
void check_range(int64_t lo, int64_t hi, int64_t n, const char* what) {
    TORCH_CHECK(0 <= lo && lo <= hi && hi <= n, what, " ", num(lo).c_str(), " to ", num(hi).c_str(), " must lie in 0 to ",
                num(n).c_str());
}
// the passes' k-split: 1 or 2 warps to a group of 16 state rows
int check_ksplit(int64_t ksplit) {
    TORCH_CHECK(ksplit == 1 || ksplit == 2, "ksplit must be 1 or 2, got ", num(ksplit).c_str());
    return static_cast<int>(ksplit);
}
cudaStream_t stream_of(const torch::Tensor& t) {
    return static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()).native_handle());
}
}  // namespace

void kda_bwd_states(torch::Tensor kd, torch::Tensor kr, torch::Tensor invb, torch::Tensor decay, torch::Tensor v,
                    torch::Tensor row_tok_host, torch::Tensor row_len_host, torch::Tensor s0, torch::Tensor step_off_host,
                    torch::Tensor chunks_host, torch::Tensor sc, torch::Tensor r, torch::Tensor u, int64_t ksplit,
                    int64_t step_lo, int64_t step_hi) {
    TORCH_CHECK(kd.dim() == 4, "kd must be [M, H, 16, 128]");
    const int64_t M = kd.size(0), H = kd.size(1), N = s0.size(0);
    for (auto [t, name] : {std::pair{kd, "kd"}, {kr, "kr"}}) check_tile(t, name, kd, {M, H, 16, 128}, at::kHalf);
    for (auto [t, name] : {std::pair{r, "r"}, {u, "u"}}) check_tile(t, name, kd, {M, H, 16, 128});
    check_tile(invb, "invb", kd, {M, H, 16, 16});
    check_tile(decay, "decay", kd, {M, H, 128});
    check_tile(s0, "s0", kd, {N, H, 128, 128});
    TORCH_CHECK(v.scalar_type() == at::kBFloat16, "v must be bfloat16");
    check_rows(row_tok_host, row_len_host, check_tokens(v, "v", H, kd));
    TORCH_CHECK(row_tok_host.numel() == M, "row_tok must have a row per tile row (", num(M).c_str(), ")");
    TORCH_CHECK(sc.scalar_type() == at::kFloat || sc.scalar_type() == at::kBFloat16, "sc must be float32 or bfloat16");
    check_tensor(sc, "sc", sc.scalar_type(), kd);
    TORCH_CHECK(sc.is_contiguous() && sc.sizes() == c10::IntArrayRef({M, H, 128, 128}), "sc must be [M, H, 128, 128]");
    check_steps(step_off_host, chunks_host, M, N);
    TORCH_CHECK(N < (int64_t(1) << 31) && H <= 65535, "too many sequences or heads");
    const c10::DeviceGuard guard(kd.device());
    const torch::Device dev = kd.device();
    const torch::Tensor step_off = to_device_async(step_off_host, dev), chunks = to_device_async(chunks_host, dev);
    const torch::Tensor row_tok = to_device_async(row_tok_host, dev), row_len = to_device_async(row_len_host, dev);
    kda::StatesArgs a{kd.data_ptr(), kr.data_ptr(), invb.data_ptr<float>(), decay.data_ptr<float>(), s0.data_ptr<float>(),
                      v.data_ptr(), row_tok.data_ptr<int64_t>(), row_len.data_ptr<int>(), step_off.data_ptr<int64_t>(),
                      chunks.data_ptr<int>(), sc.data_ptr(), r.data_ptr<float>(), u.data_ptr<float>(), static_cast<int>(N),
                      static_cast<int>(H), sc.scalar_type() == at::kBFloat16, check_ksplit(ksplit)};
    check_range(step_lo, step_hi, step_off_host.numel() - 1, "steps");
    a.step_lo = static_cast<int>(step_lo); a.step_hi = static_cast<int>(step_hi);
    const cudaError_t err = kda::launch_bwd_states(a, stream_of(kd));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_states launch failed: ", cudaGetErrorString(err));
}

void kda_bwd_dstates(torch::Tensor qd, torch::Tensor kd, torch::Tensor kr, torch::Tensor invb, torch::Tensor decay,
                     torch::Tensor dout, double scale, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     torch::Tensor ds_final, torch::Tensor step_off_host, torch::Tensor chunks_host,
                     torch::Tensor du, torch::Tensor dso, torch::Tensor dr, torch::Tensor ds0, int64_t ksplit,
                     int64_t step_lo, int64_t step_hi) {
    TORCH_CHECK(kd.dim() == 4, "kd must be [M, H, 16, 128]");
    const int64_t M = kd.size(0), H = kd.size(1), N = ds_final.size(0);
    for (auto [t, name] : {std::pair{qd, "qd"}, {kd, "kd"}, {kr, "kr"}}) check_tile(t, name, kd, {M, H, 16, 128}, at::kHalf);
    for (auto [t, name] : {std::pair{du, "du"}, {dr, "dr"}}) check_tile(t, name, kd, {M, H, 16, 128});
    check_tile(invb, "invb", kd, {M, H, 16, 16});
    check_tile(decay, "decay", kd, {M, H, 128});
    check_tile(ds_final, "ds_final", kd, {N, H, 128, 128});
    check_tile(ds0, "ds0", kd, {N, H, 128, 128});
    TORCH_CHECK(row_tok_host.numel() == M, "row_tok must have a row per tile row (", num(M).c_str(), ")");
    if (dout.numel()) {
        TORCH_CHECK(dout.scalar_type() == at::kBFloat16 || dout.scalar_type() == at::kFloat, "dout must be bfloat16 or float32");
        check_rows(row_tok_host, row_len_host, check_tokens(dout, "dout", H, kd));
    } else {
        check_rows(row_tok_host, row_len_host, INT64_MAX);  // (no tokens are read)
    }
    TORCH_CHECK(dso.scalar_type() == at::kFloat || dso.scalar_type() == at::kBFloat16, "dso must be float32 or bfloat16");
    check_tensor(dso, "dso", dso.scalar_type(), kd);
    TORCH_CHECK(dso.is_contiguous() && dso.sizes() == c10::IntArrayRef({M, H, 128, 128}), "dso must be [M, H, 128, 128]");
    check_steps(step_off_host, chunks_host, M, N);
    TORCH_CHECK(N < (int64_t(1) << 31) && H <= 65535, "too many sequences or heads");
    const c10::DeviceGuard guard(kd.device());
    const torch::Device dev = kd.device();
    const torch::Tensor step_off = to_device_async(step_off_host, dev), chunks = to_device_async(chunks_host, dev);
    const torch::Tensor row_tok = to_device_async(row_tok_host, dev), row_len = to_device_async(row_len_host, dev);
    kda::DStatesArgs a{qd.data_ptr(), kd.data_ptr(), kr.data_ptr(), invb.data_ptr<float>(), decay.data_ptr<float>(),
                       ds_final.data_ptr<float>(), dout.numel() ? dout.data_ptr() : nullptr, dout.scalar_type() == at::kFloat,
                       static_cast<float>(scale), row_tok.data_ptr<int64_t>(), row_len.data_ptr<int>(),
                       step_off.data_ptr<int64_t>(), chunks.data_ptr<int>(), du.data_ptr<float>(), dso.data_ptr(),
                       dr.data_ptr<float>(), ds0.data_ptr<float>(), static_cast<int>(N), static_cast<int>(H),
                       dso.scalar_type() == at::kBFloat16, check_ksplit(ksplit)};
    check_range(step_lo, step_hi, step_off_host.numel() - 1, "steps");
    a.step_lo = static_cast<int>(step_lo); a.step_hi = static_cast<int>(step_hi);
    const cudaError_t err = kda::launch_bwd_dstates(a, stream_of(kd));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_dstates launch failed: ", cudaGetErrorString(err));
}

// The backward's token-parallel kernels (kda_bwd_chunk.cu). q, k, v, g: bf16 [..., H, 128] contiguous (any
// leading shape; `total` tokens), beta bf16 with H last, dout shaped like v (bf16 or fp32) or empty (zero), A_log fp32 [H], dt_bias
// fp32 [H, 128]; the row tables as above.
namespace {
struct ChunkRows { int64_t M, H, total; torch::Tensor tok, len; };
ChunkRows check_chunk_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& g,
                             const torch::Tensor& beta, const torch::Tensor& dout, const torch::Tensor& A_log,
                             const torch::Tensor& dt_bias, const torch::Tensor& row_tok_host, const torch::Tensor& row_len_host) {
    TORCH_CHECK(q.dim() >= 2 && q.size(-1) == 128, "q must be [..., H, 128]");
    const int64_t H = q.size(-2), total = q.numel() / (H * 128);
    for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {g, "g"}}) {
        check_tensor(t, name, at::kBFloat16, q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == q.sizes(), name, " must be contiguous and shaped like q");
    }
    check_tensor(beta, "beta", at::kBFloat16, q);
    TORCH_CHECK(beta.is_contiguous() && beta.numel() == total * H && beta.size(-1) == H, "beta must be contiguous [..., H]");
    if (dout.numel()) {
        TORCH_CHECK(dout.scalar_type() == at::kBFloat16 || dout.scalar_type() == at::kFloat, "dout must be bfloat16 or float32");
        check_tensor(dout, "dout", dout.scalar_type(), q);
        TORCH_CHECK(dout.is_contiguous() && dout.sizes() == q.sizes(), "dout must be contiguous and shaped like q");
    }
    check_tensor(A_log, "A_log", at::kFloat, q);
    check_tensor(dt_bias, "dt_bias", at::kFloat, q);
    TORCH_CHECK(A_log.is_contiguous() && A_log.numel() == H, "A_log must be contiguous [H]");
    TORCH_CHECK(dt_bias.is_contiguous() && dt_bias.numel() == H * 128, "dt_bias must be contiguous [H, 128]");
    check_rows(row_tok_host, row_len_host, total);
    const int64_t M = row_tok_host.numel();
    TORCH_CHECK(M < (int64_t(1) << 31) && H <= 65535, "too many rows or heads");
    return {M, H, total, to_device_async(row_tok_host, q.device()), to_device_async(row_len_host, q.device())};
}
kda::ChunkArgs chunk_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& g, const torch::Tensor& beta,
                          const torch::Tensor& dout, const torch::Tensor& A_log, const torch::Tensor& dt_bias,
                          const ChunkRows& rows, double scale, double lower_bound) {
    return kda::ChunkArgs{q.data_ptr(), k.data_ptr(), g.data_ptr(), beta.data_ptr(), dout.numel() ? dout.data_ptr() : nullptr,
                          dout.scalar_type() == at::kFloat, A_log.data_ptr<float>(), dt_bias.data_ptr<float>(), rows.tok.data_ptr<int64_t>(),
                          rows.len.data_ptr<int>(), rows.M, static_cast<int>(rows.H), static_cast<float>(scale),
                          static_cast<float>(lower_bound)};
}
}  // namespace

void kda_bwd_prepare(torch::Tensor q, torch::Tensor k, torch::Tensor g, torch::Tensor beta, torch::Tensor dout,
                     torch::Tensor A_log, torch::Tensor dt_bias, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     double scale, double lower_bound, torch::Tensor qd, torch::Tensor kd, torch::Tensor kr, torch::Tensor du,
                     torch::Tensor invb, torch::Tensor decay, torch::Tensor factors, int64_t row_lo, int64_t row_hi) {
    const ChunkRows rows = check_chunk_inputs(q, k, g, beta, dout, A_log, dt_bias, row_tok_host, row_len_host);
    const int64_t M = rows.M, H = rows.H;
    for (auto [t, name] : {std::pair{qd, "qd"}, {kd, "kd"}, {kr, "kr"}}) check_tile(t, name, q, {M, H, 16, 128}, at::kHalf);
    check_tile(du, "du", q, {M, H, 16, 128});
    check_tile(invb, "invb", q, {M, H, 16, 16});
    check_tile(decay, "decay", q, {M, H, 128});
    check_tile(factors, "factors", q, {M, H, kda::BWD_FACTOR_FLOATS});
    const c10::DeviceGuard guard(q.device());
    kda::PrepArgs a{chunk_args(q, k, g, beta, dout, A_log, dt_bias, rows, scale, lower_bound)};
    a.qd = qd.data_ptr(); a.kd = kd.data_ptr(); a.kr = kr.data_ptr(); a.du = du.data_ptr<float>();
    a.invb = invb.data_ptr<float>(); a.decay = decay.data_ptr<float>(); a.factors = factors.data_ptr<float>();
    check_range(row_lo, row_hi, M, "rows");
    a.row0 = row_lo; a.rows = row_hi - row_lo;
    const cudaError_t err = kda::launch_bwd_prepare(a, stream_of(q));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_prepare launch failed: ", cudaGetErrorString(err));
}

void kda_bwd_adjoint(torch::Tensor q, torch::Tensor k, torch::Tensor g, torch::Tensor beta, torch::Tensor dout,
                     torch::Tensor A_log, torch::Tensor dt_bias, torch::Tensor row_tok_host, torch::Tensor row_len_host,
                     double scale, double lower_bound, torch::Tensor sc, torch::Tensor dso, torch::Tensor u,
                     torch::Tensor r, torch::Tensor du, torch::Tensor dr, torch::Tensor factors, torch::Tensor dq, torch::Tensor dk,
                     torch::Tensor dv, torch::Tensor dg, torch::Tensor dbeta, torch::Tensor dA_part, torch::Tensor ddt_part,
                     int64_t row_lo, int64_t row_hi) {
    const ChunkRows rows = check_chunk_inputs(q, k, g, beta, dout, A_log, dt_bias, row_tok_host, row_len_host);
    const int64_t M = rows.M, H = rows.H;
    for (auto [t, name] : {std::pair{u, "u"}, {r, "r"}, {du, "du"}, {dr, "dr"}}) check_tile(t, name, q, {M, H, 16, 128});
    check_tile(factors, "factors", q, {M, H, kda::BWD_FACTOR_FLOATS});
    TORCH_CHECK(sc.scalar_type() == dso.scalar_type() && (sc.scalar_type() == at::kFloat || sc.scalar_type() == at::kBFloat16),
                "sc and dso must both be float32 or both bfloat16");
    for (auto [t, name] : {std::pair{sc, "sc"}, {dso, "dso"}}) {
        check_tensor(t, name, sc.scalar_type(), q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == c10::IntArrayRef({M, H, 128, 128}), name, " must be [M, H, 128, 128]");
    }
    const auto grad_type = dq.scalar_type();
    TORCH_CHECK(grad_type == at::kFloat || grad_type == at::kBFloat16, "dq must be float32 or bfloat16");
    for (auto [t, name] : {std::pair{dq, "dq"}, {dk, "dk"}, {dv, "dv"}, {dg, "dg"}}) {
        check_tensor(t, name, grad_type, q);
        TORCH_CHECK(t.is_contiguous() && t.sizes() == q.sizes(), name, " must be contiguous, shaped like q, of dq's dtype");
    }
    check_tensor(dbeta, "dbeta", grad_type, q);
    TORCH_CHECK(dbeta.is_contiguous() && dbeta.sizes() == beta.sizes(), "dbeta must be contiguous, shaped like beta, of dq's dtype");
    check_tile(dA_part, "dA_part", q, {M, H});
    check_tile(ddt_part, "ddt_part", q, {M, H, 128});
    const c10::DeviceGuard guard(q.device());
    kda::AdjointArgs a{chunk_args(q, k, g, beta, dout, A_log, dt_bias, rows, scale, lower_bound)};
    a.sc = sc.data_ptr(); a.dso = dso.data_ptr(); a.states_bf16 = sc.scalar_type() == at::kBFloat16;
    a.u = u.data_ptr<float>(); a.r = r.data_ptr<float>(); a.du = du.data_ptr<float>(); a.dr = dr.data_ptr<float>();
    a.factors = factors.data_ptr<float>();
    a.dq = dq.data_ptr(); a.dk = dk.data_ptr(); a.dv = dv.data_ptr(); a.dg = dg.data_ptr();
    a.dbeta = dbeta.data_ptr(); a.grads_bf16 = grad_type == at::kBFloat16; a.dA_part = dA_part.data_ptr<float>(); a.ddt_part = ddt_part.data_ptr<float>();
    check_range(row_lo, row_hi, M, "rows");
    a.row0 = row_lo; a.rows = row_hi - row_lo;
    const cudaError_t err = kda::launch_bwd_adjoint(a, stream_of(q));
    TORCH_CHECK(err == cudaSuccess, "kda_bwd_adjoint launch failed: ", cudaGetErrorString(err));
}

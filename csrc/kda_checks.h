// kda_checks.h: what the binding (kda_binding.cpp) checks before it hands tensors to a launcher: the devices,
// dtypes and shapes the kernels assume, misaligned or strided tensors made safe (copied), a forward call's tensors
// gathered into its kernel-ready form (Call), and the backward's host-made tables checked against the tensors they
// index. kda_nb's Python layer (kda_nb.api) validates inputs with friendlier messages first; these checks are the
// last line of defence for direct callers. Included by the binding only (torch's headers, no nvcc).
#pragma once
#include <torch/extension.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "kda_launch.h"

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
               int64_t N, int64_t H, int64_t V = 128, int64_t K = 128) {
    if (!s.has_value()) return kda::STATE_NONE;
    const auto& t = *s;
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
                " must be float32 or bfloat16, got ", t.scalar_type());
    check_tensor(t, name, t.scalar_type(), like);
    TORCH_CHECK(t.dim() == 4 && t.size(0) == N && t.size(1) == H && t.size(2) == V && t.size(3) == K,
                name, " must have shape [", num(N).c_str(), ", ", num(H).c_str(), ", ", num(V).c_str(), ", ", num(K).c_str(),
                "] (V = v's last dim, K = q's), got ", shape_of(t).c_str());
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


// The form (kda_activations.cuh's GateForm, BetaForm, NormForm; kda_nb.layout.Form.codes): a number outside them is
// refused here, so the launchers' dispatch (kda_switch.h) never sees one.
void check_form_codes(int64_t gate_form, int64_t beta_form, int64_t norm_form) {
    TORCH_CHECK(gate_form >= 0 && gate_form <= 2, "gate_form must be 0 (safe), 1 (softplus) or 2 (given), got ", num(gate_form).c_str());
    TORCH_CHECK(beta_form >= 0 && beta_form <= 2, "beta_form must be 0 (logits), 1 (probabilities) or 2 (logits, allow_neg_eigval), got ",
                num(beta_form).c_str());
    TORCH_CHECK(norm_form >= 0 && norm_form <= 1, "norm_form must be 0 (L2 inside) or 1 (normalised outside), got ", num(norm_form).c_str());
}

// §input: the forward's inputs q, k, v, g, beta and its output share one dtype, bfloat16 or float16 (the kernels' element
// type, kda_args.h: InputKind); a tensor of another dtype is refused by name.
int input_kind_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                  const torch::Tensor& beta, const torch::Tensor& out) {
    const at::ScalarType dt = q.scalar_type();
    TORCH_CHECK(dt == at::kBFloat16 || dt == at::kHalf, "q must be bfloat16 or float16 (the forward's kernels take "
                "either), got ", dt);
    const torch::Tensor* others[] = {&k, &v, &g, &beta, &out};
    const char* names[] = {"k", "v", "g", "beta", "out"};
    for (int i = 0; i < 5; ++i)
        TORCH_CHECK(others[i]->scalar_type() == dt, names[i], " must have q's dtype ", dt, " (q, k, v, g, beta and out "
                    "share one dtype, bfloat16 or float16), got ", others[i]->scalar_type());
    return dt == at::kHalf ? kda::INPUT_F16 : kda::INPUT_BF16;
}

// §dims: the forward's head dims, K (q, k, g, dt_bias, the states' rows) and V (v, out, the states' row count), each a
// multiple of 8 from 8 to 128 (16-byte pieces of bf16 or fp16): the kernels' instances with DIMS (kda_switch.h) take
// any such pair other than K = V = 128. Any other K or V is refused here; kda_nb's plan zero-pads those to 128.
void check_head_dim(int64_t d, const char* what, const torch::Tensor& t) {
    TORCH_CHECK(d >= 8 && d <= 128 && d % 8 == 0, what, " must be a multiple of 8 from 8 to 128 (the kernels' head dims), "
                "got ", shape_of(t).c_str());
}

// The checked, kernel-ready form of a call's tensors, shared by every path (kda_forward's three, and a prepared
// decode step). q, k: [B, T, Hq, K] bf16 or fp16; v: [B, T, H, V] with H = 2^s Hq (grouped value heads; Call::H
// counts the value heads); g [B, T, H, K]; beta [B, T, H]; out like v; q, k, v, g, beta and out of one dtype
// (`input_kind_of`); A_log [H], dt_bias [H, K] fp32 (None for the given gate, gate_form 2); states [N, H, V, K] fp32 or
// bf16, or pools [P, H, V, K] with state_indices [N] (int32 or int64); K and V as check_head_dim says. cu_seqlens: int64 [N + 1] on the device, or none for a fixed-length batch (N = B).
// Inputs that are misaligned or not contiguous are copied; outputs that are get a temporary (`o`,
// `s_out`), which `finish` copies back.
struct Call {
    torch::Tensor qc, kc, vc, gc, bc, Ac, dc, o, slots, cu;
    c10::optional<torch::Tensor> s_in, s_out;
    int64_t B = 0, T = 0, H = 0, N = 0, P = 0;
    bool varlen = false, pooled = false;
    int in_kind = kda::STATE_NONE, out_kind = kda::STATE_NONE;
    int gate_form = 0, beta_form = 0, norm_form = 0;   // the form's codes (prepare checks them)
    int input_kind = kda::INPUT_BF16;                    // the dtype of q, k, v, g, beta and out (kda_args.h: InputKind)
    int64_t group = 1;                                   // value heads per q and k head (GVA)
    int64_t K = 128, V = 128;                            // the head dims (§dims)
    cudaStream_t stream = nullptr;
};

Call prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
             const torch::Tensor& beta, const torch::Tensor& out, const c10::optional<torch::Tensor>& A_log_opt,
             const c10::optional<torch::Tensor>& dt_bias_opt, const c10::optional<torch::Tensor>& initial_state,
             const c10::optional<torch::Tensor>& final_state, const c10::optional<torch::Tensor>& cu_seqlens,
             const c10::optional<torch::Tensor>& state_indices, bool slots_as_int64, int64_t gate_form,
             int64_t beta_form, int64_t norm_form) {
    Call c;
    check_form_codes(gate_form, beta_form, norm_form);
    c.gate_form = static_cast<int>(gate_form); c.beta_form = static_cast<int>(beta_form); c.norm_form = static_cast<int>(norm_form);
    // The gate's parameters: the safe and softplus gates (gate_form 0, 1) take A_log and dt_bias; a given gate (2) has
    // none, and the kernels never read them (null pointers).
    const bool given = gate_form == 2;
    for (const auto* t : {&A_log_opt, &dt_bias_opt}) {
        const char* name = t == &A_log_opt ? "A_log" : "dt_bias";
        if (given) {
            TORCH_CHECK(!t->has_value(), name, " must be None with the given gate (gate_form = 2): g is the log-decay itself");
        } else {
            TORCH_CHECK(t->has_value(), name, " is needed by the gate computed inside (gate_form = ", num(gate_form).c_str(), ")");
        }
    }
    // the given gate: stand-ins (q's own memory, never read) so that the checks below stay one code path
    const int64_t H0 = v.dim() == 4 ? v.size(2) : 1;
    const torch::Tensor A_log = given ? torch::empty({H0}, q.options().dtype(at::kFloat)) : *A_log_opt;
    TORCH_CHECK(q.dim() == 4, "q must be [B, T, H, K], got ", shape_of(q).c_str());
    c.K = q.size(3);
    check_head_dim(c.K, "q's K (its last dim)", q);
    const torch::Tensor dt_bias = given ? torch::empty({H0, c.K}, q.options().dtype(at::kFloat)) : *dt_bias_opt;
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    c.B = q.size(0); c.T = q.size(1);
    // Grouped value heads (GVA): v, g, out, beta, A_log, dt_bias and the states have HV heads, a multiple of q's and k's
    // H; c.H counts the value heads, value head h reads q and k head h / group.
    const int64_t Hq = q.size(2);
    TORCH_CHECK(v.dim() == 4 && v.size(0) == c.B && v.size(1) == c.T && v.size(2) >= 1 && Hq >= 1 &&
                v.size(2) % Hq == 0, "v must be [B, T, HV, V] with q's B, T and HV a multiple of q's H = ", num(Hq).c_str(),
                " (grouped value heads), got ", shape_of(v).c_str());
    c.V = v.size(3);
    check_head_dim(c.V, "v's V (its last dim)", v);
    c.H = v.size(2);
    c.group = c.H / Hq;
    TORCH_CHECK((c.group & (c.group - 1)) == 0, "the value heads per query head (HV / H = ", num(c.group).c_str(),
                ") must be a power of two in the kernels (grouped value heads)");
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
    c.input_kind = input_kind_of(q, k, v, g, beta, out);
    const torch::Tensor* same_shape[] = {&q, &k, &v, &out};
    const char* names[] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; ++i) {
        const torch::Tensor& like = i < 2 ? q : v;     // q and k: H heads; v and out: HV
        check_tensor(*same_shape[i], names[i], q.scalar_type(), q);
        TORCH_CHECK(same_shape[i]->sizes() == like.sizes(), names[i], " must have the shape of ", i < 2 ? "q " : "v ",
                    shape_of(like).c_str(), ", got ", shape_of(*same_shape[i]).c_str());
    }
    check_tensor(g, "g", q.scalar_type(), q);            // g: v's heads, q's K
    TORCH_CHECK(g.dim() == 4 && g.size(0) == c.B && g.size(1) == c.T && g.size(2) == c.H && g.size(3) == c.K,
                "g must be [B, T, HV, K] = [", num(c.B).c_str(), ", ", num(c.T).c_str(), ", ", num(c.H).c_str(), ", ",
                num(c.K).c_str(), "], got ", shape_of(g).c_str());
    check_tensor(beta, "beta", q.scalar_type(), q);
    TORCH_CHECK(beta.dim() == 3 && beta.size(0) == c.B && beta.size(1) == c.T && beta.size(2) == c.H,
                "beta must be [B, T, HV] (v's heads), got ", shape_of(beta).c_str());
    for (const auto* t : {&A_log, &dt_bias}) {
        const char* name = t == &A_log ? "A_log" : "dt_bias";
        TORCH_CHECK(t->scalar_type() == at::kFloat || t->scalar_type() == at::kDouble, name,
                    " must be float32 or float64, got ", t->scalar_type());
        TORCH_CHECK(t->device() == q.device(), name, " must be on ", q.device(), ", got ", t->device());
    }
    TORCH_CHECK(A_log.dim() == 1 && A_log.size(0) == c.H, "A_log must be [H] = [", num(c.H).c_str(), "], got ", shape_of(A_log).c_str());
    TORCH_CHECK(dt_bias.dim() == 2 && dt_bias.size(0) == c.H && dt_bias.size(1) == c.K, "dt_bias must be [H, K] = [",
                num(c.H).c_str(), ", ", num(c.K).c_str(), "], got ", shape_of(dt_bias).c_str());
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
        state_kind(initial_state, "initial_state", q, c.P, c.H, c.V, c.K);
        c.s_in = kernel_ready(*initial_state);
    }
    if (final_state.has_value()) {
        state_kind(final_state, "final_state", q, c.P, c.H, c.V, c.K);
        if (usable_as_is(*final_state)) c.s_out = *final_state;
        else if (c.pooled) c.s_out = final_state->contiguous().clone();      // slots no sequence names keep their values
        else c.s_out = torch::empty_like(*final_state, at::MemoryFormat::Contiguous);
    }
    c.in_kind = state_kind(c.s_in, "initial_state", q, c.P, c.H, c.V, c.K);
    c.out_kind = state_kind(c.s_out, "final_state", q, c.P, c.H, c.V, c.K);
    c.stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(q.device()).native_handle());
    return c;
}

// K3's per-token stores (kda::DecodeArgs::token_slots): the table token_slots [N, W], int32 or int64, contiguous, on
// q's device; the state after token t < W of sequence n goes into slot token_slots[n, t] of final_state, the pool (a
// value outside it: no store, checked in the kernel). write_final false (no state written after a sequence's last
// token) only with a table. What needs no CUDA tensor is checked first (`check_token_slots`, before `prepare`), the
// shape against the call's N and the device after it (`token_slots_fit`). A prepared decode step takes no table.
void check_token_slots(const c10::optional<torch::Tensor>& token_slots, bool write_final, const std::string& path,
                       bool keep, const c10::optional<torch::Tensor>& final_state) {
    if (!token_slots.has_value()) {
        TORCH_CHECK(write_final, "write_final=False (no state written after a sequence's last token) is for calls with "
                    "token_slots; without them, pass final_state=None");
        return;
    }
    const torch::Tensor& t = *token_slots;
    TORCH_CHECK(path == "decode", "token_slots (per-token state stores) are K3's: the path must be 'decode', got '", path, "'");
    TORCH_CHECK(!keep, "token_slots are not taken by a prepared decode step (keep)");
    TORCH_CHECK(final_state.has_value(), "token_slots need final_state: the pool the states after the tokens go into");
    TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, "token_slots must be int32 or int64, got ",
                t.scalar_type());
    TORCH_CHECK(t.dim() == 2 && t.size(1) >= 1, "token_slots must be [N, W] with W >= 1, got ", shape_of(t).c_str());
    TORCH_CHECK(t.is_contiguous(), "token_slots must be contiguous: the kernel reads the table as it is");
}
void token_slots_fit(const torch::Tensor& t, int64_t N, const torch::Tensor& q) {
    TORCH_CHECK(t.size(0) == N, "token_slots must be [N, W] with N = ", num(N).c_str(), " sequences, got ", shape_of(t).c_str());
    TORCH_CHECK(t.device() == q.device(), "token_slots must be on ", q.device(), ", got ", t.device());
}

// §replay: a replay read in place (kda::DecodeArgs::replay_table, kda_decode.cu §replay): replay = [rec_k, rec_v,
// rec_g, rec_beta, table], K3 only, with token_slots (the store after the replayed tokens) and not in a prepared step.
// The records: R rows a multiple of the pool's slots, heads and head dims as q (rec_k), v (rec_v), g (rec_g) and beta
// (rec_beta) have them, q's dtype and device, contiguous; the table [2, N] int64, contiguous, on q's device. Checked
// after `prepare` (the call's N, heads and pool). Returns the records' rows a slot.
int64_t replay_fit(const std::vector<torch::Tensor>& r, const std::string& path, bool keep, bool has_token_slots,
                   const Call& c, const torch::Tensor& q) {
    TORCH_CHECK(path == "decode", "replay (the records read in place) is K3's: the path must be 'decode', got '", path, "'");
    TORCH_CHECK(!keep, "replay is not taken by a prepared decode step (keep)");
    TORCH_CHECK(has_token_slots, "replay needs token_slots: the slot the state after the replayed tokens goes into");
    TORCH_CHECK(r.size() == 5, "replay must be [rec_k, rec_v, rec_g, rec_beta, table], got ", num(r.size()).c_str(), " tensors");
    TORCH_CHECK(c.K == 128 && c.V == 128, "replay is read in place by K3's instances for K = V = 128, got K = ",
                num(c.K).c_str(), ", V = ", num(c.V).c_str());
    TORCH_CHECK(c.pooled && c.P >= 1, "replay reads the records of pool slots: pass state_indices and a pool");
    const char* names[] = {"rec_k", "rec_v", "rec_g", "rec_beta"};
    const int64_t R = r[0].dim() >= 1 ? r[0].size(0) : -1;
    TORCH_CHECK(R >= c.P && R % c.P == 0, "the records' rows (rec_k's first dim, ", num(R).c_str(),
                ") must be a positive multiple of the pool's ", num(c.P).c_str(), " slots");
    const std::vector<int64_t> want[] = {{R, c.H / c.group, c.K}, {R, c.H, c.V}, {R, c.H, c.K}, {R, c.H}};
    for (int i = 0; i < 4; ++i) {
        TORCH_CHECK(r[i].scalar_type() == q.scalar_type(), names[i], " must be ", q.scalar_type(), " (q's dtype), got ",
                    r[i].scalar_type());
        TORCH_CHECK(r[i].device() == q.device(), names[i], " must be on ", q.device(), ", got ", r[i].device());
        TORCH_CHECK(r[i].is_contiguous(), names[i], " must be contiguous: the kernel reads the records as they are");
        std::string dims = "[";
        for (size_t d = 0; d < want[i].size(); ++d) dims += (d ? ", " : "") + num(want[i][d]);
        TORCH_CHECK(r[i].sizes() == c10::IntArrayRef(want[i]), names[i], " must be ", dims.c_str(), "], got ",
                    shape_of(r[i]).c_str());
    }
    const torch::Tensor& t = r[4];
    TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() == 2 && t.size(0) == 2 && t.size(1) == c.N && t.is_contiguous()
                && t.device() == q.device(), "the replay table must be [2, N] int64, contiguous, on ", q.device(),
                ", with N = ", num(c.N).c_str(), ", got ", shape_of(t).c_str(), " ", t.scalar_type());
    return R / c.P;
}

// §records: K1's records in a tensor of the caller's ('chunked' path, one step), so that calls over the same q, k, g,
// beta, cu_seqlens, form and heads (what K1 reads; v and the states may differ) share one K1: reuse_records runs K2
// alone on the records an earlier call left. Checked before `prepare` what needs no size, the size after it.
void check_records(const c10::optional<torch::Tensor>& records, bool reuse, const std::string& path, int64_t steps) {
    if (!records.has_value()) {
        TORCH_CHECK(!reuse, "reuse_records=True needs records: the tensor an earlier call left K1's records in");
        return;
    }
    const torch::Tensor& r = *records;
    TORCH_CHECK(path == "chunked", "records (K1's records kept for a later call) are for the 'chunked' path, got '", path, "'");
    TORCH_CHECK(steps == 1, "records are for a call of one step (no pipeline), got steps = ", num(steps).c_str());
    TORCH_CHECK(r.scalar_type() == at::kByte, "records must be a uint8 tensor, got ", r.scalar_type());
    TORCH_CHECK(r.is_contiguous(), "records must be contiguous");
}
void records_fit(const torch::Tensor& r, int64_t bytes, const torch::Tensor& q) {
    TORCH_CHECK(r.device() == q.device(), "records must be on ", q.device(), ", got ", r.device());
    TORCH_CHECK(r.numel() >= bytes, "records must hold at least ", num(bytes).c_str(), " bytes (K1's records of this call), got ",
                num(r.numel()).c_str());
}

// §checkpoints: the table of K2 and the fused kernel (kda::FwdArgs::ckpt_offsets, ckpt_slots; 'chunked' or 'fused'
// path): ckpt_offsets and ckpt_slots, both
// [N, C] int64, contiguous, on q's device; after the chunk that ends at token offset ckpt_offsets[n, c] of sequence n
// (a multiple of 16, or the sequence's length; 0: its entering state) the state goes into slot ckpt_slots[n, c] of
// final_state, the pool. Any other offset, or a slot outside the pool, means no store (checked in the kernel, so no
// value of the table can send a write outside the pool). What needs no CUDA tensor is checked first
// (`check_checkpoints`, before `prepare`), the shape against the call's N and the device after it (`checkpoints_fit`).
void check_checkpoints(const c10::optional<torch::Tensor>& offsets, const c10::optional<torch::Tensor>& slots,
                       const std::string& path, const c10::optional<torch::Tensor>& final_state) {
    if (!offsets.has_value() && !slots.has_value()) return;
    TORCH_CHECK(offsets.has_value() && slots.has_value(), "ckpt_offsets and ckpt_slots go together: pass both or neither");
    TORCH_CHECK(path == "chunked" || path == "fused", "checkpoints (ckpt_offsets, ckpt_slots) are written by K2 and the "
                "fused kernel: the path must be 'chunked' or 'fused', got '", path, "'");
    TORCH_CHECK(final_state.has_value(), "checkpoints need final_state: the pool the checkpoints' states go into");
    for (const auto* t : {&*offsets, &*slots}) {
        const char* name = t == &*offsets ? "ckpt_offsets" : "ckpt_slots";
        TORCH_CHECK(t->scalar_type() == at::kLong, name, " must be int64, got ", t->scalar_type());
        TORCH_CHECK(t->dim() == 2, name, " must be [N, C], got ", shape_of(*t).c_str());
        TORCH_CHECK(t->is_contiguous(), name, " must be contiguous: the kernel reads the table as it is");
    }
    TORCH_CHECK(offsets->sizes() == slots->sizes(), "ckpt_offsets and ckpt_slots must have one shape [N, C], got ",
                shape_of(*offsets).c_str(), " and ", shape_of(*slots).c_str());
}
void checkpoints_fit(const torch::Tensor& offsets, const torch::Tensor& slots, int64_t N, const torch::Tensor& q) {
    TORCH_CHECK(offsets.size(0) == N, "ckpt_offsets and ckpt_slots must be [N, C] with N = ", num(N).c_str(),
                " sequences, got ", shape_of(offsets).c_str());
    for (const auto* t : {&offsets, &slots})
        TORCH_CHECK(t->device() == q.device(), t == &offsets ? "ckpt_offsets" : "ckpt_slots", " must be on ", q.device(),
                    ", got ", t->device());
}

// The fields kda::FwdArgs and kda::DecodeArgs share, from a prepared call.
template <typename Args>
void fill_common(Args& a, const Call& c, double scale, double lower_bound) {
    a.q = c.qc.data_ptr(); a.k = c.kc.data_ptr(); a.v = c.vc.data_ptr(); a.g = c.gc.data_ptr(); a.beta = c.bc.data_ptr();
    const bool given = c.gate_form == 2;         // no A_log, no dt_bias: the kernels get null there
    a.A_log = given ? nullptr : c.Ac.data_ptr<float>(); a.dt_bias = given ? nullptr : c.dc.data_ptr<float>();
    a.out = c.o.data_ptr();
    a.gate_form = c.gate_form; a.beta_form = c.beta_form; a.norm_form = c.norm_form;
    a.input_kind = c.input_kind;
    a.group_shift = 0;
    while ((int64_t{1} << a.group_shift) < c.group) ++a.group_shift;
    a.state_in = c.s_in.has_value() ? c.s_in->data_ptr() : nullptr;
    a.state_out = c.s_out.has_value() ? c.s_out->data_ptr() : nullptr;
    a.state_in_kind = c.in_kind;
    a.state_out_kind = c.out_kind;
    a.n_slots = c.P;
    a.n_seq = static_cast<int>(c.N); a.H = static_cast<int>(c.H);
    a.dim_k = static_cast<int>(c.K); a.dim_v = static_cast<int>(c.V);     // (K = V = 128: the instances without DIMS)
    a.scale = static_cast<float>(scale); a.lower_bound = static_cast<float>(lower_bound);
}

void finish(const Call& c, torch::Tensor& out, const c10::optional<torch::Tensor>& final_state, bool outputs = true) {
    if (outputs && !c.o.is_same(out)) out.copy_(c.o);
    if (final_state.has_value() && !c.s_out->is_same(*final_state)) final_state->copy_(*c.s_out);
}

// The backward's kernels. Their tables are made on the host by the caller (kda_nb.backward_kernels) and checked here
// before they are copied to the device, so that no kernel can be sent outside its tensors, whatever cu_seqlens held:
// row_tok [M] int64 and row_len [M] int32 (row r: the tokens row_tok[r] .. row_tok[r] + row_len[r] - 1, 1 to 16 of
// them, inside the caller's tokens), and for the passes step_off [steps + 1] int64 and chunks [N] int32 (row
// step_off[i] + n is chunk i of sorted sequence n, which has chunks[n] chunks), against M and N.
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
// host allocator keeps the staging buffer until the copy is done). A pageable copy would synchronize the stream,
// leaving the GPU idle while the host catches up, several times a backward call.
torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& dev) {
    return host.pin_memory().to(dev, /*non_blocking=*/true);
}
// §backward input: the backward's inputs q, k, g, beta (and v, which only the passes read) share one dtype, bfloat16 or
// float16 (the kernels' element type, kda_args.h: InputKind); dO has that dtype or float32, and the gradients the
// adjoint writes have that dtype or float32. Any other is refused by name, before the tensors' devices and shapes are
// looked at. `bwd_input_kind` checks the first tensor of a list and the others against it.
int bwd_input_kind(std::initializer_list<std::pair<const torch::Tensor*, const char*>> same) {
    const auto& [first, first_name] = *same.begin();
    const at::ScalarType dt = first->scalar_type();
    TORCH_CHECK(dt == at::kBFloat16 || dt == at::kHalf, first_name, " must be bfloat16 or float16 (the backward's kernels "
                "take either), got ", dt);
    for (const auto& [t, name] : same)
        TORCH_CHECK(t->scalar_type() == dt, name, " must have ", first_name, "'s dtype ", dt, " (the backward's inputs "
                    "share one dtype, bfloat16 or float16), got ", t->scalar_type());
    return dt == at::kHalf ? kda::INPUT_F16 : kda::INPUT_BF16;
}
// dO (none: empty) of the inputs' dtype `in` (bwd_input_kind's) or float32
void check_dout_dtype(const torch::Tensor& dout, at::ScalarType in) {
    TORCH_CHECK(!dout.numel() || dout.scalar_type() == in || dout.scalar_type() == at::kFloat, "dout must be ", in,
                " (the inputs' dtype) or float32, got ", dout.scalar_type());
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

// §entry scan: kda_entry_scan's tensors (kda_entry_scan.cu): initial [N, HV, V, K], X [P, HV, V, K], M [P, HV, K, K]
// fp32, grid [S, N] int64, all on one CUDA device, V and K 1 to 128; inputs that are misaligned or not contiguous
// come back copied. `check_scan_grid` reads the grid on the host (a synchronization: the caller skips it under
// CUDA-graph capture): each column the rows of one sequence's segments, then only the padding row P, and every row
// 0 .. P-1 named once. The kernel needs none of this to stay inside the tensors (any value outside [0, P) ends its
// sequence); the check turns a wrong table into an error instead of entry states left unwritten.
struct ScanTensors { torch::Tensor initial, X, M, grid; int64_t N, HV, V, K, P, S; };
ScanTensors check_entry_scan(const torch::Tensor& initial, const torch::Tensor& X, const torch::Tensor& M,
                             const torch::Tensor& grid, int64_t rows) {
    TORCH_CHECK(rows == 8 || rows == 16 || rows == 32, "rows (state rows of a block) must be 8, 16 or 32, got ", num(rows).c_str());
    TORCH_CHECK(initial.dim() == 4, "initial must be [N, HV, V, K], got ", shape_of(initial).c_str());
    const int64_t N = initial.size(0), HV = initial.size(1), V = initial.size(2), K = initial.size(3);
    TORCH_CHECK(V >= 1 && V <= 128 && K >= 1 && K <= 128, "the state's V and K must be 1 to 128, got ", shape_of(initial).c_str());
    check_tensor(initial, "initial", at::kFloat, initial);
    check_tensor(X, "X", at::kFloat, initial);
    check_tensor(M, "M", at::kFloat, initial);
    check_tensor(grid, "grid", at::kLong, initial);
    TORCH_CHECK(X.dim() == 4 && X.size(1) == HV && X.size(2) == V && X.size(3) == K, "X must be [P, HV = ", num(HV).c_str(),
                ", V = ", num(V).c_str(), ", K = ", num(K).c_str(), "], got ", shape_of(X).c_str());
    const int64_t P = X.size(0);
    TORCH_CHECK(M.dim() == 4 && M.size(0) == P && M.size(1) == HV && M.size(2) == K && M.size(3) == K, "M must be [P = ",
                num(P).c_str(), ", HV = ", num(HV).c_str(), ", K = ", num(K).c_str(), ", K], got ", shape_of(M).c_str());
    TORCH_CHECK(grid.dim() == 2 && grid.size(1) == N, "grid must be [S, N = ", num(N).c_str(), "], got ", shape_of(grid).c_str());
    TORCH_CHECK(N * HV * ((V + 7) / 8) <= INT32_MAX, "too many sequences and heads for one launch");
    return {kernel_ready(initial), kernel_ready(X), kernel_ready(M), grid.contiguous(), N, HV, V, K, P, grid.size(0)};
}
void check_scan_grid(const torch::Tensor& grid, int64_t P) {
    const torch::Tensor host = grid.to(at::kCPU).contiguous();
    const int64_t S = host.size(0), N = host.size(1);
    const int64_t* g = host.data_ptr<int64_t>();
    std::vector<uint8_t> named(static_cast<size_t>(P), 0);
    for (int64_t n = 0; n < N; ++n) {
        bool ended = false;
        for (int64_t p = 0; p < S; ++p) {
            const int64_t r = g[p * N + n];
            TORCH_CHECK(r >= 0 && r <= P, "grid[", num(p).c_str(), ", ", num(n).c_str(), "] = ", num(r).c_str(),
                        " is outside 0 to P = ", num(P).c_str(), " (P: the padding row past a sequence's last segment)");
            TORCH_CHECK(!ended || r == P, "grid[", num(p).c_str(), ", ", num(n).c_str(), "] = ", num(r).c_str(),
                        " follows the padding row P: a sequence's segments come first, then only padding");
            if (r == P) { ended = true; continue; }
            TORCH_CHECK(!named[r], "grid names segment row ", num(r).c_str(), " twice");
            named[r] = 1;
        }
    }
    for (int64_t r = 0; r < P; ++r)
        TORCH_CHECK(named[r], "grid names no segment of row ", num(r).c_str(), ": every row 0 to P - 1 must be one segment's");
}

}  // namespace

// kda_binding.cpp: the torch side of the kernels. Checks what the kernels assume (devices, dtypes,
// shapes), makes misaligned or strided tensors safe to hand over, builds the batch layout on the device,
// fills kda::FwdArgs and launches the layout kernel, K1 and K2 on torch's current stream of the inputs'
// device. It needs torch's headers and the CUDA runtime's headers only, so it also compiles against a
// CPU build of torch (CI does).
// kda_nb's Python layer (kda_nb.api) validates inputs with friendlier messages before it gets here;
// these checks are the last line of defence for direct callers.
#include <torch/extension.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdint>

#include "kda_launch.h"

namespace {

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
                name, " must have shape [", N, ", ", H, ", 128, 128], got ", t.sizes());
    return t.scalar_type() == at::kFloat ? kda::STATE_FP32 : kda::STATE_BF16;
}

// 16-byte aligned and contiguous, as the kernels' vector loads need: `t` itself, or a copy of it. A view
// at an odd offset (flat[1:].view(...)) gets a copy here instead of a misaligned-address fault.
bool usable_as_is(const torch::Tensor& t) {
    return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
torch::Tensor kernel_ready(const torch::Tensor& t) {
    if (usable_as_is(t)) return t;
    return t.is_contiguous() ? t.clone() : t.contiguous();     // fresh allocations are aligned
}

}  // namespace

// q, k, v, g: [B, T, H, 128] bf16; beta [B, T, H] bf16; out like v; A_log [H], dt_bias [H, 128] fp32;
// states [N, H, 128, 128] fp32 or bf16, or pools [P, H, 128, 128] with state_indices [N] (int32 or int64). cu_seqlens: int64 [N + 1] on the device, or none for a fixed-length
// batch (N = B). Everything the launch needs is derived here on the device from shapes and cu_seqlens,
// with no copy to the host, so the call can be captured in a CUDA graph; it runs on torch's current
// stream of q's device. Inputs that are misaligned or not contiguous are copied; outputs that are get a
// temporary, copied back.
void kda_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor g, torch::Tensor beta,
             double scale, torch::Tensor out, torch::Tensor A_log, torch::Tensor dt_bias, double lower_bound,
             c10::optional<torch::Tensor> initial_state, c10::optional<torch::Tensor> final_state,
             c10::optional<torch::Tensor> cu_seqlens, c10::optional<torch::Tensor> state_indices) {
    TORCH_CHECK(q.dim() == 4 && q.size(3) == 128, "q must be [B, T, H, 128], got ", q.sizes());
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::DeviceGuard guard(q.device());
    const int64_t B = q.size(0), T = q.size(1), H = q.size(2);
    const bool varlen = cu_seqlens.has_value();
    if (varlen) {
        TORCH_CHECK(cu_seqlens->dim() == 1 && cu_seqlens->numel() >= 2, "cu_seqlens must be [N + 1] with N >= 1");
        TORCH_CHECK(cu_seqlens->scalar_type() == at::kLong, "cu_seqlens must be int64, got ", cu_seqlens->scalar_type());
        TORCH_CHECK(B == 1, "with cu_seqlens the batch must be one row (B = 1), got B = ", B);
    }
    const int64_t N = varlen ? cu_seqlens->numel() - 1 : B;
    TORCH_CHECK(varlen || T >= 1, "q must have T >= 1 tokens per row");
    TORCH_CHECK(N <= INT32_MAX && H <= INT32_MAX, "too many sequences or heads");
    const torch::Tensor* same_shape[] = {&q, &k, &v, &g, &out};
    const char* names[] = {"q", "k", "v", "g", "out"};
    for (int i = 0; i < 5; ++i) {
        check_tensor(*same_shape[i], names[i], at::kBFloat16, q);
        TORCH_CHECK(same_shape[i]->sizes() == q.sizes(), names[i], " must have the shape of q ", q.sizes(),
                    ", got ", same_shape[i]->sizes());
    }
    check_tensor(beta, "beta", at::kBFloat16, q);
    TORCH_CHECK(beta.dim() == 3 && beta.size(0) == B && beta.size(1) == T && beta.size(2) == H,
                "beta must be [B, T, H], got ", beta.sizes());
    TORCH_CHECK(A_log.numel() == H && A_log.device() == q.device(), "A_log must be [H] on ", q.device());
    TORCH_CHECK(dt_bias.numel() == H * 128 && dt_bias.device() == q.device(), "dt_bias must be [H, 128] on ", q.device());

    const torch::Tensor qc = kernel_ready(q), kc = kernel_ready(k), vc = kernel_ready(v), gc = kernel_ready(g);
    const torch::Tensor bc = kernel_ready(beta);
    const torch::Tensor Ac = kernel_ready(A_log.to(at::kFloat)), dc = kernel_ready(dt_bias.to(at::kFloat));
    torch::Tensor o = usable_as_is(out) ? out : torch::empty_like(out, at::MemoryFormat::Contiguous);
    // States: one per sequence ([N, H, 128, 128]), or pools of P slots with state_indices [N] naming the
    // slot each sequence reads and writes (-1: a padding sequence); the two may be one tensor.
    const bool pooled = state_indices.has_value();
    int64_t P = N;
    torch::Tensor slots;
    if (pooled) {
        TORCH_CHECK(state_indices->dim() == 1 && state_indices->numel() == N, "state_indices must be [N = ", N,
                    "], got ", state_indices->sizes());
        TORCH_CHECK(state_indices->scalar_type() == at::kLong || state_indices->scalar_type() == at::kInt,
                    "state_indices must be int32 or int64, got ", state_indices->scalar_type());
        slots = state_indices->to(q.device(), at::kLong).contiguous();
        P = initial_state.has_value() ? initial_state->size(0) : final_state.has_value() ? final_state->size(0) : INT64_MAX;
        TORCH_CHECK(!(initial_state.has_value() && final_state.has_value()) || initial_state->size(0) == final_state->size(0),
                    "initial_state and final_state must be pools of the same size");
    }
    c10::optional<torch::Tensor> s_in, s_out;
    if (initial_state.has_value()) {
        state_kind(initial_state, "initial_state", q, P, H);
        s_in = kernel_ready(*initial_state);
    }
    if (final_state.has_value()) {
        state_kind(final_state, "final_state", q, P, H);
        if (usable_as_is(*final_state)) s_out = *final_state;
        else if (pooled) s_out = final_state->contiguous().clone();       // slots no sequence names keep their values
        else s_out = torch::empty_like(*final_state, at::MemoryFormat::Contiguous);
    }

    kda::FwdArgs a{};
    a.q = qc.data_ptr(); a.k = kc.data_ptr(); a.v = vc.data_ptr(); a.g = gc.data_ptr(); a.beta = bc.data_ptr();
    a.A_log = Ac.data_ptr<float>(); a.dt_bias = dc.data_ptr<float>(); a.out = o.data_ptr();
    a.state_in_kind = state_kind(s_in, "initial_state", q, P, H);
    a.state_out_kind = state_kind(s_out, "final_state", q, P, H);
    a.state_slot = pooled ? slots.data_ptr<int64_t>() : nullptr;
    a.n_slots = P;
    a.state_in = s_in.has_value() ? s_in->data_ptr() : nullptr;
    a.state_out = s_out.has_value() ? s_out->data_ptr() : nullptr;
    a.n_seq = static_cast<int>(N); a.H = static_cast<int>(H);
    a.scale = static_cast<float>(scale); a.lower_bound = static_cast<float>(lower_bound);

    const cudaStream_t stream = static_cast<cudaStream_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(q.device()).native_handle());
    // the layout tables [offsets N+1 | chunk offsets N+1 | order, N int32], filled by the layout kernel
    // from cu_seqlens, or by K1 for a fixed-length batch
    const torch::Tensor tables = torch::empty({2 * (N + 1) + (N + 1) / 2}, q.options().dtype(at::kLong));
    int64_t* t = tables.data_ptr<int64_t>();
    int* order = varlen && N > 1 ? reinterpret_cast<int*>(t + 2 * (N + 1)) : nullptr;
    a.cu_seqlens = t; a.cu_chunks = t + (N + 1); a.seq_order = order;
    // sum of ceil(len / 16) over N lengths that add up to at most B * T
    a.max_chunks = varlen ? (T + 15 * N) / 16 : B * ((T + 15) / 16);
    cudaError_t err = cudaSuccess;
    a.seq_len = varlen ? 0 : T;                        // fixed length: K1 writes the two tables itself
    if (varlen) {
        const torch::Tensor cu = cu_seqlens->to(q.device()).contiguous();
        err = kda::launch_layout(cu.data_ptr<int64_t>(), 0, a.n_seq, B * T, t, t + (N + 1), order, o.data_ptr(),
                                 H * 128 * 2, stream);
        TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    }
    const int64_t ws_bytes = a.max_chunks * H * static_cast<int64_t>(kda::record_bytes());
    const torch::Tensor ws = torch::empty({std::max<int64_t>(ws_bytes, 16)}, q.options().dtype(at::kByte));
    a.workspace = ws.data_ptr();

    err = kda::launch_prepare(a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_prepare launch failed: ", cudaGetErrorString(err));
    err = kda::launch_recurrence(a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_recurrence launch failed: ", cudaGetErrorString(err));
    if (!o.is_same(out)) out.copy_(o);
    if (final_state.has_value() && !s_out->is_same(*final_state)) final_state->copy_(*s_out);
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
    const cudaError_t err = kda::launch_layout(cu.data_ptr<int64_t>(), 0, static_cast<int>(N), total,
                                               safe.data_ptr<int64_t>(), chunks.data_ptr<int64_t>(),
                                               order.data_ptr<int>(), rows.data_ptr(), 16, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_layout launch failed: ", cudaGetErrorString(err));
    return {safe, chunks, order, rows.select(1, 0).eq(0)};
}

int64_t kda_record_bytes() { return static_cast<int64_t>(kda::record_bytes()); }

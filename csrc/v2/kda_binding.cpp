// kda_binding.cpp: the torch side of the kernels. Checks what the kernels assume (devices, dtypes,
// shapes, contiguity), fills kda::FwdArgs and launches K1 then K2 on the stream the caller passes
// (kda_nb passes torch's current stream, with the inputs' device made current). Only
// torch/extension.h is needed, so this file also compiles against a CPU build of torch (CI does).
// kda_nb's Python layer (kda_nb.api) validates inputs with friendlier messages before it gets here;
// these checks are the last line of defence for direct callers.
#include <torch/extension.h>

#include "kda_launch.h"

namespace {

void check_tensor(const torch::Tensor& t, const char* name, at::ScalarType dtype, const torch::Tensor& like) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.device() == like.device(), name, " must be on ", like.device(), ", got ", t.device());
    TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
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

}  // namespace

// q, k, v, g: [B, T, H, 128] bf16; beta [B, T, H] bf16; out like v. cu_seqlens, cu_chunks: int64 [N+1]
// on the device (for fixed-length batches, the caller passes b * T and b * ceil(T / 16)). seq_order:
// optional int32 [N], a permutation of the sequences (K2 starts the longest first); it must be one.
void kda_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor g, torch::Tensor beta,
             double scale, torch::Tensor out, torch::Tensor A_log, torch::Tensor dt_bias, double lower_bound,
             c10::optional<torch::Tensor> initial_state, c10::optional<torch::Tensor> final_state,
             torch::Tensor cu_seqlens, torch::Tensor cu_chunks, int64_t n_chunks, torch::Tensor workspace,
             c10::optional<torch::Tensor> seq_order, int64_t stream_handle) {
    TORCH_CHECK(q.dim() == 4 && q.size(3) == 128, "q must be [B, T, H, 128], got ", q.sizes());
    const int64_t H = q.size(2), N = cu_seqlens.numel() - 1;
    const torch::Tensor* same_shape[] = {&q, &k, &v, &g, &out};
    const char* names[] = {"q", "k", "v", "g", "out"};
    for (int i = 0; i < 5; ++i) {
        check_tensor(*same_shape[i], names[i], at::kBFloat16, q);
        TORCH_CHECK(same_shape[i]->sizes() == q.sizes(), names[i], " must have the shape of q ", q.sizes(),
                    ", got ", same_shape[i]->sizes());
    }
    check_tensor(beta, "beta", at::kBFloat16, q);
    TORCH_CHECK(beta.dim() == 3 && beta.size(0) == q.size(0) && beta.size(1) == q.size(1) && beta.size(2) == H,
                "beta must be [B, T, H], got ", beta.sizes());
    check_tensor(A_log, "A_log", at::kFloat, q);
    TORCH_CHECK(A_log.numel() == H, "A_log must have H = ", H, " entries");
    check_tensor(dt_bias, "dt_bias", at::kFloat, q);
    TORCH_CHECK(dt_bias.numel() == H * 128, "dt_bias must be [H, 128]");
    check_tensor(cu_seqlens, "cu_seqlens", at::kLong, q);
    check_tensor(cu_chunks, "cu_chunks", at::kLong, q);
    TORCH_CHECK(cu_chunks.numel() == N + 1, "cu_chunks must have N + 1 entries");
    if (seq_order.has_value()) {
        check_tensor(*seq_order, "seq_order", at::kInt, q);
        TORCH_CHECK(seq_order->numel() == N, "seq_order must have N = ", N, " entries");
    }
    check_tensor(workspace, "workspace", at::kByte, q);
    TORCH_CHECK(workspace.numel() >= n_chunks * H * static_cast<int64_t>(kda::record_bytes()),
                "workspace too small");

    kda::FwdArgs a{};
    a.q = q.data_ptr(); a.k = k.data_ptr(); a.v = v.data_ptr(); a.g = g.data_ptr(); a.beta = beta.data_ptr();
    a.A_log = A_log.data_ptr<float>(); a.dt_bias = dt_bias.data_ptr<float>(); a.out = out.data_ptr();
    a.state_in_kind = state_kind(initial_state, "initial_state", q, N, H);
    a.state_out_kind = state_kind(final_state, "final_state", q, N, H);
    a.state_in = initial_state.has_value() ? initial_state->data_ptr() : nullptr;
    a.state_out = final_state.has_value() ? final_state->data_ptr() : nullptr;
    a.cu_seqlens = cu_seqlens.data_ptr<int64_t>(); a.cu_chunks = cu_chunks.data_ptr<int64_t>();
    a.seq_order = seq_order.has_value() ? seq_order->data_ptr<int>() : nullptr;
    a.n_seq = static_cast<int>(N); a.H = static_cast<int>(H); a.n_chunks = n_chunks;
    a.scale = static_cast<float>(scale); a.lower_bound = static_cast<float>(lower_bound);
    a.workspace = workspace.data_ptr();

    const cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_handle);
    cudaError_t err = kda::launch_prepare(a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_prepare launch failed: ", cudaGetErrorString(err));
    err = kda::launch_recurrence(a, stream);
    TORCH_CHECK(err == cudaSuccess, "kda_fwd_recurrence launch failed: ", cudaGetErrorString(err));
}

int64_t kda_record_bytes() { return static_cast<int64_t>(kda::record_bytes()); }

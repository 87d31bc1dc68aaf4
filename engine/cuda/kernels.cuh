// The forward pass's CUDA kernels and their launchers (engine/cuda/kernels.cu).
//
// Every kernel computes what engine/model computes on the CPU, rounding where
// it rounds: activations quantized per 32-value block as the AVX2 routines do
// (127/amax, half to even), a block's products summed four at a time into
// eight integer lanes, each lane scaled into its own float accumulator with a
// fused multiply-add and the eight folded in the CPU's order; attention's F16
// products in the decode (32-lane) or batch (8-lane) order; exp as ggml's
// polynomial; RoPE from the CPU's own cos/sin table. nvcc compiles this with
// --fmad=false, so nothing is fused that the CPU does not fuse.
//
// A step processes T rows (T <= ENG_GPU_MAX_ROWS): row t is token tokens[t]
// at position pos[t] of sequence seq[t]; the rows' arrays live on the device,
// so a captured graph reads them afresh at each replay.
#ifndef ENGINE_CUDA_KERNELS_CUH
#define ENGINE_CUDA_KERNELS_CUH

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#define ENG_GPU_MAX_ROWS 32
#define ENG_GPU_QK 32

// An activation block: the Q8_1 layout (s = d * sum(qs)); Q8_0 products read
// d and qs only.
struct eng_gpu_act_block {
    uint16_t d, s;
    int8_t qs[ENG_GPU_QK];
};

// A weight matrix on the device: rows of cols values in the file's blocks.
struct eng_gpu_matrix {
    uint32_t type; // ENG_TYPE_Q4_1 or ENG_TYPE_Q8_0
    const void *data;
    uint32_t rows, cols;
};

// The rows of a step on the device.
struct eng_gpu_rows {
    const int32_t *tokens, *seq, *pos;
    int32_t count;
};

// Per layer, per sequence: the K and V base pointers (device table) and the
// strides every sequence shares.
struct eng_gpu_kv {
    void *const *k_base; // [layer * sequences + seq]
    void *const *v_base;
    uint32_t sequences;
    uint64_t token_stride, head_stride; // bytes
};

enum eng_gpu_dot_kind { ENG_GPU_DOT_DECODE = 0, ENG_GPU_DOT_BATCH = 1 };

// x[t] = row tokens[t] of the Q8_0 embedding, as floats.
cudaError_t eng_gpu_embed(cudaStream_t s, const eng_gpu_matrix &embd, eng_gpu_rows rows, float *x);
// act[t] = quantize(rms_norm(x[t]) * w): E values per row, Q8_1 blocks; w
// read from the device table entry *w_at when the kernel runs (a streamed
// layer's norm moves between ring slots under a captured graph).
cudaError_t eng_gpu_rms_norm_quant(cudaStream_t s, const float *x, const float *const *w_at,
                                   uint32_t E, float eps, int32_t T, eng_gpu_act_block *act);
// act[t] = quantize(x[t]) over n values per row.
cudaError_t eng_gpu_quant(cudaStream_t s, const float *x, uint32_t n, int32_t T,
                          eng_gpu_act_block *act);
// For each of count matrices (a device array, total_rows rows in all):
// y_i[t][r] = w_i[r] . act[t] (+ y_i[t][r] when accumulate: the residual);
// ys: a device array of count outputs. All matrices share cols (max_cols:
// the host's copy, which sizes the one-token kernel's shared memory).
cudaError_t eng_gpu_matvec(cudaStream_t s, const eng_gpu_matrix *mats, uint32_t total_rows,
                           uint32_t max_cols, float *const *ys, int count,
                           const eng_gpu_act_block *act, int32_t T, bool accumulate);
// What the one-token product computes its activation row from before its
// rows, in every block (a row of a few hundred values costs less there than a
// kernel of its own): RMS, quantize(rms_norm(x) * *norm) as
// eng_gpu_rms_norm_quant computes it, bit for bit the same blocks.
enum eng_gpu_prologue_kind { ENG_GPU_PROLOGUE_NONE = 0, ENG_GPU_PROLOGUE_RMS = 1 };
struct eng_gpu_prologue {
    int kind;
    const float *x;           // the rows' values
    const float *const *norm; // where the norm's weights' pointer is (a device table)
    uint32_t n;               // values: the matrices' cols
    float eps;
};
// Whether products of cols columns can take a prologue (shared memory).
bool eng_gpu_matvec_prologue_fits(uint32_t cols);
// eng_gpu_matvec for one row whose activations the prologue computes;
// cudaErrorInvalidValue when it does not fit (pro.n must equal cols).
cudaError_t eng_gpu_matvec_prologue(cudaStream_t s, const eng_gpu_matrix *mats, uint32_t total_rows,
                                    uint32_t cols, float *const *ys, int count,
                                    const eng_gpu_prologue &pro, bool accumulate);
// RoPE on q (n_head heads) and k (n_kv heads) in place from the cos/sin
// table (rows of head_dim floats per position), then k and v as halves into
// the KV at (layer, seq[t], pos[t]).
cudaError_t eng_gpu_rope_store(cudaStream_t s, float *q, float *k, const float *v,
                               const float *rope_table, eng_gpu_rows rows, uint32_t n_head,
                               uint32_t n_kv, uint32_t head_dim, uint32_t n_rot,
                               const eng_gpu_kv &kv, uint32_t layer);
// A decode pass's own keys and values for eng_gpu_attention to rotate and
// store itself (eng_gpu_rope_store's work, one kernel fewer per layer): k
// and v unrotated as the product left them; all null when rope_store ran.
struct eng_gpu_new_kv {
    const float *k, *v, *rope; // rope: the cos/sin table
    uint32_t n_rot;
};
// out[t][h] = softmax(q . K / sqrt(D)) V over positions [0, pos[t]] of seq[t].
// scores: T * n_head * n_ctx floats; weights: as many halves. When D is a
// multiple of 32, act gets out quantized too (eng_gpu_attention_quantizes).
// With fresh.k, q is unrotated too; only for ENG_GPU_DOT_DECODE passes,
// whose rows are distinct sequences (else cudaErrorInvalidValue).
cudaError_t eng_gpu_attention(cudaStream_t s, const float *q, const eng_gpu_kv &kv, uint32_t layer,
                              eng_gpu_rows rows, uint32_t n_head, uint32_t n_kv, uint32_t head_dim,
                              uint32_t n_ctx, eng_gpu_dot_kind kind, float *scores,
                              uint16_t *weights, float *out, eng_gpu_act_block *act,
                              const eng_gpu_new_kv &fresh);
inline bool eng_gpu_attention_quantizes(uint32_t head_dim)
{
    return head_dim % ENG_GPU_QK == 0;
}
// act[t] = quantize(silu(gate[t]) * up[t]) over F values.
cudaError_t eng_gpu_swiglu_quant(cudaStream_t s, const float *gate, const float *up, uint32_t F,
                                 int32_t T, eng_gpu_act_block *act);
// next[t] = the largest logit's id of row t (the lowest id on ties); part_v
// and part_i: ENG_GPU_ARGMAX_PARTS per row of scratch.
#define ENG_GPU_ARGMAX_PARTS 32
cudaError_t eng_gpu_argmax(cudaStream_t s, const float *logits, uint32_t n_vocab, int32_t T,
                           float *part_v, int32_t *part_i, int32_t *next);

#endif

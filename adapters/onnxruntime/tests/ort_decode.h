/* Greedy decoding of the tiny test model (make_model.py) two ways, for the
 * adapter's tests and for ortmem-ort-decode:
 *   plain   ORT as a program uses it without ortmem: default allocators, the
 *           past fed from the caller's host arrays and each present copied
 *           back into them;
 *   ortmem  sessions on the environment's registered ortmem allocators, KV
 *           bound through an IoBinding to an ortmem KV cache (ortmem_ort_kv).
 * Both read the same model and feed the same tokens; their logits must match
 * bit for bit. */
#ifndef ORTMEM_ORT_DECODE_H
#define ORTMEM_ORT_DECODE_H

#include "../ortmem_ort.h"

/* make_model.py's dimensions. */
#define TINY_LAYERS 2u
#define TINY_HEADS 4u
#define TINY_HEAD_DIM 16u
#define TINY_VOCAB 64u
#define TINY_POSITIONS 1024u

typedef struct ort_decode_run {
    ortmem_ort *ort;
    OrtEnv *env;
    const char *model_path;
    int cuda; /* the CUDA execution provider (device 0) */
    int use_env_allocators;
    uint32_t steps; /* tokens decoded, one per step */
    int64_t first_token;
    int64_t *tokens; /* steps + 1: the first token, then each step's argmax */
    float *logits;   /* steps * TINY_VOCAB */
    /* ortmem only: the KV binder, and a callback after every step. */
    ortmem_ort_kv *kv;
    void (*after_step)(void *user, uint32_t step);
    void *user;
} ort_decode_run;

ortmem_status ort_decode_plain(ort_decode_run *run);
ortmem_status ort_decode_ortmem(ort_decode_run *run);

/* The test model's path: ORTMEM_ORT_MODEL, else NULL. The library's path:
 * ORTMEM_ORT_LIB, else the first libonnxruntime.so* under ORTMEM_ORT_VENV's
 * site-packages/onnxruntime/capi (scripts/ort-env.sh), else NULL. The
 * returned string is the caller's to free. */
char *ort_decode_library_path(void);

#endif /* ORTMEM_ORT_DECODE_H */

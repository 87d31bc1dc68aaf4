/* ortmem-ort's own shared helpers (not installed). */
#ifndef ORTMEM_ORT_INTERNAL_H
#define ORTMEM_ORT_INTERNAL_H

#include <string.h>

#include "ortmem_ort.h"

/* The names ORT gives CPU and CUDA memory in an OrtMemoryInfo. */
#define ORT_CPU_NAME "Cpu"
#define ORT_CUDA_NAME "Cuda"

/* The ortmem device an OrtMemoryInfo names. */
ortmem_status ort_device_of(const ortmem_ort *ort, const OrtMemoryInfo *info,
                            ortmem_device_kind *kind, int *ordinal);
/* ORTMEM_E_INVALID when the authority's backend is not on that kind of device. */
ortmem_status ort_check_backend(ortmem_authority *authority, ortmem_device_kind kind,
                                const char *what);

#endif /* ORTMEM_ORT_INTERNAL_H */

/* ortmem: memory management for LLM inference engines. One include for all layers. */
#ifndef ORTMEM_ORTMEM_H
#define ORTMEM_ORTMEM_H

#include <ortmem/core.h>
#include <ortmem/gate.h>
#include <ortmem/vmm.h>
#include <ortmem/governance.h>
#include <ortmem/kv.h>
#include <ortmem/offload.h>
#include <ortmem/capture.h>

#endif /* ORTMEM_ORTMEM_H */

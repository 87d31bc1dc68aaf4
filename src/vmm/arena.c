/* Placeholder until the arena lands in this series. */
#include "core/error.h"
#include <ortmem/vmm.h>

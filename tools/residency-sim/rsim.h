/* ortmem-residency-sim: residency policies replayed over a tensor access
 * trace (ortmem_residency_simulate) for a sweep of budgets. Public headers
 * only. The trace format is in docs/memory/OFFLOAD.md, "ortmem-residency-sim". */
#ifndef ORTMEM_TOOLS_RESIDENCY_SIM_H
#define ORTMEM_TOOLS_RESIDENCY_SIM_H

#include <ortmem/offload.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct rs_trace {
    uint32_t count;     /* tensors */
    char **names;       /* [count] */
    uint64_t *bytes;    /* [count] */
    uint32_t *accesses; /* [length]: tensor ids */
    uint64_t length;
    uint64_t steps; /* "access" lines: decode steps by convention */
} rs_trace;

/* Reads a trace file. On failure false, with "LINE: what" (or the I/O
 * error) in err, and nothing kept. */
bool rs_trace_read(const char *path, rs_trace *trace, char *err, size_t err_size);
void rs_trace_free(rs_trace *trace);

/* One policy at one budget. */
typedef struct rs_run {
    ortmem_residency_policy policy;
    double percent;  /* of the weights */
    uint64_t budget; /* bytes, a whole number of granules */
    bool fits;       /* the budget holds the largest tensor; otherwise not run */
    ortmem_residency_sim_stats stats;
} rs_run;

double rs_byte_hit_rate(const ortmem_residency_sim_stats *s);
double rs_count_hit_rate(const ortmem_residency_sim_stats *s);

/* The plot of byte hit rate against budget, one line per policy over
 * points runs (policy-major: runs[p * points + i]), Belady's on top. */
bool rs_plot_draw(const rs_run *runs, size_t points, const char *title, int svg_fd, FILE *err);

#endif

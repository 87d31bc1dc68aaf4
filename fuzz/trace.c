/* ortmem-replay's trace parser (tools/replay/trace.c) on arbitrary text:
 * replay_trace_load either refuses with messages naming lines or hands out
 * a trace whose every op names objects, holders and lines it holds. */
#include <string.h>

#include "../tools/replay/replay.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    if (!path)
        return 0;
    static FILE *sink;
    if (!sink && !(sink = fopen("/dev/null", "w")))
        return 0;
    replay_trace t;
    if (!replay_trace_load(path, sink, 8, &t)) {
        FUZZ_CHECK(t.op_count == 0 && t.ops == NULL, "failed load left %zu ops", t.op_count);
        return 0;
    }
    size_t kinds = 0;
    for (size_t k = 0; k < REPLAY_KIND_COUNT; k++)
        kinds += t.kind_counts[k];
    FUZZ_CHECK(kinds == t.op_count, "kind counts %zu, ops %zu", kinds, t.op_count);
    FUZZ_CHECK(t.holder_count <= REPLAY_MAX_HOLDERS, "%zu holders", t.holder_count);
    for (size_t i = 0; i < t.op_count; i++) {
        const replay_op *op = &t.ops[i];
        FUZZ_CHECK(op->kind < REPLAY_KIND_COUNT, "op %zu kind %u", i, op->kind);
        FUZZ_CHECK(op->object < t.object_count, "op %zu object %u of %zu", i, op->object,
                   t.object_count);
        if (op->kind == REPLAY_SHARE)
            FUZZ_CHECK(op->source < t.object_count, "op %zu source %u", i, op->source);
        FUZZ_CHECK(op->line >= 1, "op %zu line 0", i);
        char line[512];
        replay_op_format(&t, op, line, sizeof line);
        FUZZ_CHECK(strlen(line) < sizeof line, "format");
    }
    for (size_t i = 0; i < t.object_count; i++) {
        FUZZ_CHECK(t.objects[i].name < t.names_len, "object %zu name at %zu of %zu", i,
                   t.objects[i].name, t.names_len);
        FUZZ_CHECK(t.objects[i].holder < t.holder_count || t.holder_count == 0,
                   "object %zu holder %u of %zu", i, t.objects[i].holder, t.holder_count);
        (void)replay_object_name(&t, (uint32_t)i);
    }
    replay_trace_free(&t);
    return 0;
}

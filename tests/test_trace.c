/* Trace recording (ortmem_trace_start/stop, ORTMEM_TRACE) and ortmem-replay.
 *
 * The replay tests run the built tool as a child process. Its path comes from
 * ORTMEM_REPLAY and the bundled traces' folder from ORTMEM_TRACES_DIR, both
 * set by tests/meson.build. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child.h"
#include "json_scan.h"
#include "support.h"
#include "tmpdir.h"

#define G TEST_GRANULE

static void make_tmpdir(void)
{
    tmpdir_make("ortmem-trace");
}

static void remove_tmpdir(void)
{
    (void)ortmem_trace_stop();
    tmpdir_remove();
}

/* Splits text into lines in place; returns the count. */
static size_t split_lines(char *text, char **lines, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < max;
         l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    return n;
}

/* ---- recording ---- */

TestSuite(trace, .init = make_tmpdir, .fini = remove_tmpdir);

Test(trace, start_refuses_bad_paths_and_stop_is_idempotent)
{
    EXPECT_STATUS(ortmem_trace_start(NULL), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_trace_start(""), ORTMEM_E_INVALID);
    EXPECT_STATUS(ortmem_trace_start(tmp_path("no/such/dir/x.trace")), ORTMEM_E_IO);
    cr_assert(strstr(ortmem_last_error(), "no/such/dir") != NULL, "detail: %s",
              ortmem_last_error());
    OK(ortmem_trace_stop());
    OK(ortmem_trace_stop());
}

Test(trace, records_each_region_operation_as_one_exact_line)
{
    ortmem_backend *b = test_backend();
    const char *path = tmp_path("regions.trace");
    OK(ortmem_trace_start(path));
    ortmem_region *a = region_on(b, 3 * G + 1, 0); /* recorded rounded: 4 granules */
    OK(ortmem_region_commit(a, 0, 100));
    OK(ortmem_region_commit(a, G, 2 * G));
    /* Failed calls change nothing, so they are not recorded. */
    EXPECT_STATUS(ortmem_region_commit(a, 3 * G, 2 * G), ORTMEM_E_RANGE);
    ortmem_region *s = region_on(b, 2 * G, 0);
    OK(ortmem_region_share(s, 0, a, 0, G, ORTMEM_ACCESS_READ));
    EXPECT_STATUS(ortmem_region_share(s, G / 2, a, 0, G, ORTMEM_ACCESS_READ), ORTMEM_E_ALIGN);
    OK(ortmem_region_decommit(a, G, G));
    OK(ortmem_region_destroy(s));
    OK(ortmem_region_destroy(a));
    OK(ortmem_trace_stop());
    /* After stop nothing more is written. */
    ortmem_region *late = region_on(b, G, 0);
    OK(ortmem_region_commit(late, 0, G));
    OK(ortmem_region_destroy(late));
    OK(ortmem_backend_destroy(b));

    char *text = read_file(path);
    char *lines[32];
    size_t n = split_lines(text, lines, 32);
    cr_assert_eq(n, 9, "%zu lines recorded", n);
    cr_assert_str_eq(lines[0], "# ortmem trace v1: replay with ortmem-replay");
    /* Region numbers are process-wide; read them off their region lines. */
    unsigned long long ra = 0, rs = 0;
    cr_assert_eq(sscanf(lines[1], "region r%llu", &ra), 1, "line: %s", lines[1]);
    cr_assert_eq(sscanf(lines[4], "region r%llu", &rs), 1, "line: %s", lines[4]);
    cr_assert_neq(ra, rs);
    char want[9][96];
    snprintf(want[1], sizeof want[1], "region r%llu %zu", ra, 4 * G);
    snprintf(want[2], sizeof want[2], "commit r%llu 0 100", ra);
    snprintf(want[3], sizeof want[3], "commit r%llu %zu %zu", ra, G, 2 * G);
    snprintf(want[4], sizeof want[4], "region r%llu %zu", rs, 2 * G);
    snprintf(want[5], sizeof want[5], "share r%llu 0 r%llu 0 %zu ro", rs, ra, G);
    snprintf(want[6], sizeof want[6], "decommit r%llu %zu %zu", ra, G, G);
    snprintf(want[7], sizeof want[7], "destroy r%llu", rs);
    snprintf(want[8], sizeof want[8], "destroy r%llu", ra);
    for (size_t i = 1; i < 9; i++)
        cr_assert_str_eq(lines[i], want[i], "line %zu", i + 1);
    free(text);
}

Test(trace, records_arena_allocations_but_not_the_arena_region)
{
    ortmem_backend *b = test_backend();
    const char *path = tmp_path("arena.trace");
    OK(ortmem_trace_start(path));
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 16 * G;
    ortmem_arena *arena = NULL;
    OK(ortmem_arena_create(b, &opt, &arena));
    void *p = NULL, *q = NULL;
    OK(ortmem_arena_alloc(arena, 1000, 0, &p));
    OK(ortmem_arena_alloc(arena, 3 * G, 4096, &q));
    OK(ortmem_arena_free(arena, p));
    EXPECT_STATUS(ortmem_arena_free(arena, p), ORTMEM_E_DOUBLE_FREE);
    OK(ortmem_arena_free(arena, q));
    OK(ortmem_arena_destroy(arena, 0));
    OK(ortmem_trace_stop());
    OK(ortmem_backend_destroy(b));

    char *text = read_file(path);
    char *lines[16];
    size_t n = split_lines(text, lines, 16);
    cr_assert_eq(n, 5, "%zu lines recorded", n);
    char want[4][96];
    snprintf(want[0], sizeof want[0], "alloc p%lx 1000 0", (unsigned long)(uintptr_t)p);
    snprintf(want[1], sizeof want[1], "alloc p%lx %zu 4096", (unsigned long)(uintptr_t)q, 3 * G);
    snprintf(want[2], sizeof want[2], "free p%lx", (unsigned long)(uintptr_t)p);
    snprintf(want[3], sizeof want[3], "free p%lx", (unsigned long)(uintptr_t)q);
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(lines[i + 1], want[i], "line %zu", i + 2);
    free(text);
}

/* ---- replay ---- */

static const char *replay_path(void)
{
    const char *path = getenv("ORTMEM_REPLAY");
    cr_assert(path && *path, "ORTMEM_REPLAY is not set (tests/meson.build sets it)");
    return path;
}

static const char *bundled_trace(const char *name)
{
    const char *dir = getenv("ORTMEM_TRACES_DIR");
    cr_assert(dir && *dir, "ORTMEM_TRACES_DIR is not set (tests/meson.build sets it)");
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Runs ortmem-replay with args (NULL-terminated). record: ORTMEM_TRACE for the
 * child, or NULL to make sure it records nothing. env: "NAME=value" to set in
 * the child (replacing NAME's value), or NULL. */
static child_result replay_env(const char *record, const char *env, const char *const *args)
{
    char trace_var[600] = "ORTMEM_TRACE";
    if (record)
        snprintf(trace_var, sizeof trace_var, "ORTMEM_TRACE=%s", record);
    const char *changes[] = {trace_var, env, NULL};
    return child_run(replay_path(), args, changes);
}

static child_result replay(const char *record, const char *const *args)
{
    return replay_env(record, NULL, args);
}

static bool json_true(const char *json, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": true", key);
    return strstr(json, pattern) != NULL;
}

/* A replay of every operation kind, granule 64 KiB, arena cache 0; the
 * expected numbers below follow from the region and arena contracts. */
static const char good_trace[] =
    "# every operation once or twice\n"
    "region a 256KiB          # 4 granules of VA\n"
    "commit a 0 100           # maps granule 0\n"
    "commit a 64KiB 128KiB    # granules 1 and 2: one run\n"
    "region b 128KiB\n"
    "share b 0 a 0 64KiB      # b sees granule 0 of a, read-only\n"
    "alloc x 64KiB 64KiB      # two allocations that must own one granule each\n"
    "alloc y 65536 65536\n"
    "\n"
    "free x\n"
    "decommit a 64KiB 64KiB   # granule 1 goes; a keeps granules 0 and 2\n"
    "destroy b\n"
    "destroy a\n"
    "free y\n";

Test(trace, replay_of_a_good_trace_is_clean_with_exact_counts)
{
    const char *path = tmp_path("good.trace");
    write_file(path, good_trace);
    const char *args[] = {path, "--json", "--granule", "64KiB", "--arena-cache", "0", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
    cr_assert_eq(r.out[0], '{', "stdout is one JSON object:\n%s", r.out);
    cr_assert_str_eq(r.err, "", "stderr: %s", r.err);
    cr_assert_eq(json_number(r.out, "ops"), 12);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 0);
    cr_assert_eq(json_number(r.out, "overlaps"), 0);
    cr_assert_eq(json_number(r.out, "corruptions"), 0);
    cr_assert_eq(json_number(r.out, "granule_bytes"), G);
    /* a's 3 granules, x's and y's extents, all live after "alloc y". The
     * replay's arena has the default extent policy (geometric): y grows the
     * tail above x's 1-granule extent by a 2-granule one, a granule past y. */
    cr_assert_eq(json_number(r.out, "peak_owned_bytes"), 6 * G);
    cr_assert_eq(json_number(r.out, "peak_mapped_bytes"), 7 * G); /* plus b's alias */
    cr_assert_eq(json_number(r.out, "final_owned_bytes"), 0);
    cr_assert_eq(json_number(r.out, "final_mapped_bytes"), 0);
    cr_assert_eq(json_number(r.out, "quarantined_bytes"), 0);
    cr_assert(json_true(r.out, "ledger_balanced"));
    /* Backend calls: 2 regions + the arena's; one map per granule, one
     * set-access per run, one unmap per run (a's destroy: 2 runs). */
    cr_assert_eq(json_number(r.out, "reserve"), 3);
    cr_assert_eq(json_number(r.out, "unreserve"), 3);
    cr_assert_eq(json_number(r.out, "create"), 5);
    cr_assert_eq(json_number(r.out, "release"), 5);
    cr_assert_eq(json_number(r.out, "map"), 6);
    cr_assert_eq(json_number(r.out, "set_access"), 5);
    cr_assert_eq(json_number(r.out, "unmap"), 6);
    /* What was read back: both allocations, b's alias against a. */
    cr_assert_eq(json_number(r.out, "checked_allocations"), 2);
    cr_assert_eq(json_number(r.out, "checked_shares"), 1);
    cr_assert_eq(json_number(r.out, "live_regions_at_end"), 0);
    child_result_free(&r);
}

Test(trace, replay_of_the_bundled_minimal_trace_is_clean)
{
    const char *args[] = {bundled_trace("minimal.trace"), "--json", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "ops"), 12);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "checked_shares"), 1);
    cr_assert(json_true(r.out, "ledger_balanced"));
    child_result_free(&r);
}

Test(trace, malformed_line_is_named_and_nothing_runs)
{
    const char *path = tmp_path("bad.trace"), *record = tmp_path("bad-run.trace");
    write_file(path, "region a 1MiB\n"
                     "commit a 0 64KiB\n"
                     "commit a zero 64KiB\n"
                     "destroy a\n");
    const char *args[] = {path, "--json", NULL};
    child_result r = replay(record, args);
    cr_assert_eq(r.status, 2, "exit %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "line 3: offset 'zero' is not a byte count") != NULL, "stderr: %s",
              r.err);
    cr_assert(strstr(r.err, "line 1") == NULL && strstr(r.err, "line 2") == NULL &&
                  strstr(r.err, "line 4") == NULL,
              "only line 3 is bad: %s", r.err);
    cr_assert(strstr(r.err, "nothing was replayed") != NULL, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "", "no report on stdout: %s", r.out);
    /* The child recorded every library operation it made: none. */
    char *recorded = read_file(record);
    cr_assert_str_eq(recorded, "# ortmem trace v1: replay with ortmem-replay\n");
    free(recorded);
    child_result_free(&r);
}

Test(trace, bad_options_are_usage_errors)
{
    const char *path = tmp_path("ok.trace");
    write_file(path, "region a 64KiB\n");
    const char *const cases[][4] = {
        {path, "--fault", "mapp:1", NULL}, {path, "--fault", "map:0", NULL},
        {path, "--granule", "3KiB", NULL}, {path, "--fault-rate", "1.5", NULL},
        {path, "--backend", "tpu", NULL},  {tmp_path("missing.trace"), NULL, NULL, NULL},
        {path, "--budget", "0", NULL},     {path, "--budget", "lots", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        child_result r = replay(NULL, cases[i]);
        cr_assert_eq(r.status, 2, "case %zu: exit %d\n%s", i, r.status, r.err);
        cr_assert_str_eq(r.out, "", "case %zu", i);
        cr_assert(strstr(r.err, "ortmem-replay: ") == r.err, "case %zu: %s", i, r.err);
        child_result_free(&r);
    }
}

Test(trace, injected_map_failure_is_reported_and_the_ledger_balances)
{
    const char *path = tmp_path("fault.trace");
    write_file(path, "region a 256KiB\n"
                     "commit a 0 128KiB\n" /* line 2: its first map fails */
                     "region b 128KiB\n"
                     "share b 0 a 0 64KiB\n" /* needs a's granule: skipped */
                     "commit a 0 128KiB\n"   /* the retry succeeds */
                     "alloc x 1000\n"
                     "free x\n"
                     "destroy b\n"
                     "destroy a\n");
    const char *args[] = {path, "--json", "--granule", "64KiB", "--fault", "map:1", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "ops"), 9);
    cr_assert_eq(json_number(r.out, "failed_ops"), 1);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 1);
    cr_assert_eq(json_number(r.out, "teardown_failures"), 0);
    cr_assert(strstr(r.out, "\"fault\": {\"op\": \"map\", \"fail_at\": 1") != NULL, "%s", r.out);
    /* The failure names its line, status and the library's detail. */
    const char *failures = strstr(r.out, "\"failures\": [");
    cr_assert_not_null(failures);
    cr_assert_eq(json_number(failures, "line"), 2);
    cr_assert(strstr(failures, "\"status\": \"ORTMEM_E_BACKEND\"") != NULL, "%s", failures);
    cr_assert(strstr(failures, "fault injected into map") != NULL, "%s", failures);
    cr_assert_eq(json_number(r.out, "map"), 4); /* 1 failed, 2 for the retry, 1 for x */
    cr_assert_eq(json_number(strstr(r.out, "\"call_failures\""), "map"), 1);
    cr_assert(json_true(r.out, "ledger_balanced"), "%s", r.out);
    cr_assert_eq(json_number(r.out, "final_owned_bytes"), 0);
    cr_assert_eq(json_number(r.out, "final_mapped_bytes"), 0);
    cr_assert_eq(json_number(r.out, "overlaps"), 0);
    cr_assert_eq(json_number(r.out, "corruptions"), 0);
    child_result_free(&r);
}

/* Counts the operation lines (not comments) of a trace text. */
static size_t op_lines(const char *text)
{
    size_t n = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (*l != '#' && *l != '\n')
            n++;
    }
    return n;
}

Test(trace, workload_recorded_in_process_replays_without_failures)
{
    const char *path = tmp_path("workload.trace");
    ortmem_backend *b = test_backend();
    OK(ortmem_trace_start(path));
    ortmem_region *prefix = region_on(b, 8 * G, 0);
    OK(ortmem_region_commit(prefix, 0, 2 * G));
    ortmem_region *seqs[3];
    for (int i = 0; i < 3; i++) {
        seqs[i] = region_on(b, 16 * G, 0);
        OK(ortmem_region_share(seqs[i], 0, prefix, 0, 2 * G, ORTMEM_ACCESS_READ));
        for (size_t t = 0; t < (size_t)(i + 2); t++)
            OK(ortmem_region_commit(seqs[i], 2 * G + t * (G / 2), G / 2));
    }
    ortmem_arena_options opt = ORTMEM_ARENA_OPTIONS_INIT;
    opt.capacity = 64 * G;
    ortmem_arena *arena = NULL;
    OK(ortmem_arena_create(b, &opt, &arena));
    void *live[8];
    for (int i = 0; i < 8; i++)
        OK(ortmem_arena_alloc(arena, (size_t)(i + 1) * 5000, (size_t)256 << (i % 4), &live[i]));
    for (int i = 0; i < 8; i += 2)
        OK(ortmem_arena_free(arena, live[i]));
    OK(ortmem_region_decommit(seqs[1], 2 * G, 14 * G));
    OK(ortmem_region_destroy(seqs[0]));
    OK(ortmem_trace_stop());
    /* Still live when recording stopped: the replay tears these down. */
    OK(ortmem_arena_destroy(arena, 1));
    for (int i = 1; i < 3; i++)
        OK(ortmem_region_destroy(seqs[i]));
    OK(ortmem_region_destroy(prefix));
    OK(ortmem_backend_destroy(b));

    char *text = read_file(path);
    size_t ops = op_lines(text);
    cr_assert_eq(ops, 1 + 1 + 3 * 2 + (2 + 3 + 4) + 8 + 4 + 1 + 1, "%zu ops:\n%s", ops, text);
    free(text);
    const char *args[] = {path, "--json", "--granule", "64KiB", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "ops"), ops);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 0);
    cr_assert_eq(json_number(r.out, "checked_shares"), 3 * 2);
    cr_assert_eq(json_number(r.out, "live_allocations_at_end"), 4);
    cr_assert_eq(json_number(r.out, "live_regions_at_end"), 3);
    cr_assert(json_true(r.out, "ledger_balanced"));
    child_result_free(&r);
}

Test(trace, replay_recorded_through_ORTMEM_TRACE_replays_itself)
{
    /* The replay tool is itself a workload: ORTMEM_TRACE records what it
     * does to the library, teardown included, and that trace replays too. */
    const char *path = tmp_path("good.trace"), *record = tmp_path("recorded.trace");
    write_file(path, good_trace);
    const char *first_args[] = {path, "--json", "--granule", "64KiB", NULL};
    child_result first = replay(record, first_args);
    cr_assert_eq(first.status, 0, "exit %d\n%s", first.status, first.err);
    child_result_free(&first);

    char *text = read_file(record);
    cr_assert(strncmp(text, "# ortmem trace v1", 17) == 0, "%s", text);
    cr_assert(strstr(text, "\nshare r") != NULL, "%s", text);
    cr_assert(strstr(text, "\nalloc p") != NULL, "%s", text);
    size_t ops = op_lines(text);
    cr_assert_eq(ops, 12, "the 12 ops of good_trace, recorded:\n%s", text);
    free(text);
    const char *args[] = {record, "--json", "--granule", "64KiB", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "ops"), 12);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 0);
    cr_assert_eq(json_number(r.out, "overlaps"), 0);
    cr_assert_eq(json_number(r.out, "corruptions"), 0);
    cr_assert(json_true(r.out, "ledger_balanced"));
    child_result_free(&r);
}

/* ---- governance: --budget, holders, pressure ---- */

/* The text of the JSON object in json that starts at "key": {...} or at the
 * holder entry {"name": "NAME", ...}, up to its closing brace; the caller
 * frees. Objects here hold no strings with braces, so counting them works. */
static char *json_object_at(const char *at)
{
    cr_assert_not_null(at);
    const char *open = strchr(at, '{');
    cr_assert_not_null(open);
    int depth = 0;
    const char *p = open;
    for (; *p; p++) {
        depth += *p == '{';
        depth -= *p == '}';
        if (depth == 0)
            break;
    }
    cr_assert_eq(*p, '}', "unbalanced JSON at: %.200s", at);
    size_t len = (size_t)(p - open) + 1;
    char *copy = malloc(len + 1);
    cr_assert_not_null(copy);
    memcpy(copy, open, len);
    copy[len] = '\0';
    return copy;
}

/* The "ledger" object's entry for holder name (ortmem_authority_format JSON). */
static char *ledger_holder(const char *json, const char *name)
{
    const char *ledger = strstr(json, "\"ledger\": {");
    cr_assert_not_null(ledger, "no ledger object in:\n%s", json);
    const char *holders = strstr(ledger, "\"holders\": [");
    cr_assert_not_null(holders, "no holders in the ledger:\n%s", ledger);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "{\"name\": \"%s\"", name);
    const char *at = strstr(holders, pattern);
    cr_assert_not_null(at, "no holder '%s' in the ledger:\n%s", name, ledger);
    return json_object_at(at);
}

/* The replay's own "holders" entry for name (arena, pressure). */
static char *replay_holder(const char *json, const char *name)
{
    const char *holders = strstr(json, "\n  \"holders\": [");
    cr_assert_not_null(holders, "no holders array in:\n%s", json);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "{\"name\": \"%s\"", name);
    const char *at = strstr(holders, pattern);
    cr_assert_not_null(at, "no holder '%s' in:\n%s", name, holders);
    return json_object_at(at);
}

/* Granule 64 KiB, arena cache 0, budget 512 KiB = 8 granules. The comments
 * count owned granules: kv's region a, weights' and scratch's arenas. */
static const char budget_trace[] = "holder weights weights 100\n"
                                   "holder kv kv 50\n"
                                   "holder scratch workspace 80\n"
                                   "region a 512KiB kv\n"
                                   "commit a 0 128KiB           # kv 2\n"
                                   "alloc p 100KiB @weights     # weights 2: total 4\n"
                                   "commit a 128KiB 256KiB      # kv 6: total 8, the budget\n"
                                   "commit a 384KiB 64KiB       # line 8: refused\n"
                                   "alloc q 1000 @scratch       # line 9: refused\n"
                                   "free p                      # weights 0: total 6\n"
                                   "commit a 384KiB 64KiB       # kv 7: total 7\n"
                                   "alloc q2 1000 256 @scratch  # scratch 1: total 8\n"
                                   "region b 128KiB kv\n"
                                   "commit b 0 1                # line 14: refused\n";

Test(trace, budget_refuses_commits_past_it_and_the_ledger_names_each_holder)
{
    const char *path = tmp_path("budget.trace");
    write_file(path, budget_trace);
    const char *args[] = {path, "--json",   "--granule", "64KiB", "--arena-cache",
                          "0",  "--budget", "512KiB",    NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "budget_bytes"), 8 * G);
    cr_assert(json_true(r.out, "within_budget"), "%s", r.out);
    /* Refusals are counted apart from failures; nothing depended on them. */
    cr_assert_eq(json_number(r.out, "budget_refusals"), 3);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 0);
    cr_assert(strstr(r.out, "\"commit\": {\"ops\": 5, \"failed\": 0, \"refused\": 2") != NULL, "%s",
              r.out);
    cr_assert(strstr(r.out, "\"alloc\": {\"ops\": 3, \"failed\": 0, \"refused\": 1") != NULL, "%s",
              r.out);
    cr_assert_eq(json_number(r.out, "peak_owned_bytes"), 8 * G);
    cr_assert_leq(json_number(r.out, "peak_owned_bytes"), json_number(r.out, "budget_bytes"));
    cr_assert_eq(json_number(r.out, "arena_count"), 2);
    cr_assert(json_true(r.out, "ledger_balanced"), "%s", r.out);
    cr_assert(json_true(r.out, "clean"), "%s", r.out);
    /* Each refusal is listed with its line, status and the authority's detail. */
    const char *failures = strstr(r.out, "\"failures\": [");
    cr_assert_not_null(failures);
    static const uint64_t refused_lines[] = {8, 9, 14};
    const char *at = failures;
    for (size_t i = 0; i < 3; i++) {
        at = strstr(at, "{\"line\": ");
        cr_assert_not_null(at, "refusal %zu missing:\n%s", i, failures);
        cr_assert_eq(json_number(at, "line"), refused_lines[i], "%s", failures);
        cr_assert(strncmp(strstr(at, "\"status\": "), "\"status\": \"ORTMEM_E_BUDGET\"", 27) == 0,
                  "%s", at);
        at++;
    }
    cr_assert(strstr(failures, "holder 'kv' (kv) requested 65536 bytes") != NULL, "%s", failures);
    cr_assert(strstr(failures, "\"op\": \"alloc q 1000 0 @scratch\"") != NULL, "%s", failures);
    /* The ledger at trace end: exact owned bytes per holder. */
    const char *ledger = strstr(r.out, "\"ledger\": {");
    cr_assert_not_null(ledger, "%s", r.out);
    cr_assert_eq(json_number(ledger, "limit_bytes"), 8 * G);
    cr_assert_eq(json_number(ledger, "owned_bytes"), 8 * G);
    cr_assert_eq(json_number(ledger, "owned_peak_bytes"), 8 * G);
    char *kv = ledger_holder(r.out, "kv");
    cr_assert(strstr(kv, "\"role\": \"kv\", \"priority\": 50") != NULL, "%s", kv);
    cr_assert_eq(json_number(kv, "owned_bytes"), 7 * G, "%s", kv);
    cr_assert_eq(json_number(kv, "requested_bytes"), 7 * G, "%s", kv);
    char *scratch = ledger_holder(r.out, "scratch");
    cr_assert(strstr(scratch, "\"role\": \"workspace\"") != NULL, "%s", scratch);
    cr_assert_eq(json_number(scratch, "owned_bytes"), G, "%s", scratch);
    cr_assert_eq(json_number(scratch, "requested_bytes"), 1000, "%s", scratch);
    cr_assert_eq(json_number(scratch, "overhead_bytes"), G - 1000, "%s", scratch);
    char *weights = ledger_holder(r.out, "weights");
    cr_assert_eq(json_number(weights, "owned_bytes"), 0, "%s", weights);
    cr_assert_eq(json_number(weights, "owned_peak_bytes"), 2 * G, "%s", weights);
    free(kv);
    free(scratch);
    free(weights);
    /* Teardown gave everything back. */
    cr_assert_eq(json_number(r.out, "final_owned_bytes"), 0);
    child_result_free(&r);

    /* The human report prints the same ledger as the authority's table. */
    const char *text_args[] = {path, "--granule", "64KiB",  "--arena-cache",
                               "0",  "--budget",  "512KiB", NULL};
    r = replay(NULL, text_args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "  ledger by holder at trace end\n") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "  authority: limit 0.50 MiB, owned 0.50 MiB (peak 0.50)") != NULL,
              "%s", r.out);
    cr_assert(strstr(r.out, "  within budget: yes") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "\nresult: OK") != NULL, "%s", r.out);
    child_result_free(&r);
}

/* Granule 64 KiB, budget 512 KiB. The reclaimable "cache" holds 6 granules in
 * two regions; kv's commits need them back. */
static const char pressure_trace[] = "holder cache kv 1 reclaimable\n"
                                     "holder kv kv 50\n"
                                     "region c1 256KiB cache\n"
                                     "commit c1 0 256KiB          # cache 4\n"
                                     "region c2 128KiB cache\n"
                                     "commit c2 0 128KiB          # cache 6\n"
                                     "region a 512KiB kv\n"
                                     "commit a 0 128KiB           # kv 2: total 8, the budget\n"
                                     "commit a 128KiB 128KiB      # needs 2: c2 goes (newest)\n"
                                     "commit a 256KiB 192KiB      # needs 3: c1 goes\n"
                                     "commit c2 0 64KiB           # cache 1 again: total 8\n";

Test(trace, reclaimable_holder_decommits_its_regions_so_a_later_commit_fits)
{
    const char *path = tmp_path("pressure.trace");
    write_file(path, pressure_trace);
    const char *args[] = {path, "--json", "--granule", "64KiB", "--budget", "512KiB", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
    cr_assert_eq(json_number(r.out, "budget_refusals"), 0, "%s", r.out);
    cr_assert_eq(json_number(r.out, "failed_ops"), 0);
    cr_assert_eq(json_number(r.out, "skipped_ops"), 0);
    cr_assert_eq(json_number(r.out, "pressure_failures"), 0);
    cr_assert(json_true(r.out, "within_budget"), "%s", r.out);
    cr_assert_eq(json_number(r.out, "peak_owned_bytes"), 8 * G);
    /* The replay's side: two calls, c2's 2 granules and then c1's 4. */
    char *cache = replay_holder(r.out, "cache");
    cr_assert(strstr(cache, "\"reclaimable\": true") != NULL, "%s", cache);
    cr_assert_eq(json_number(cache, "pressure_calls"), 2, "%s", cache);
    cr_assert_eq(json_number(cache, "pressure_regions"), 2, "%s", cache);
    cr_assert_eq(json_number(cache, "pressure_decommitted_bytes"), 6 * G, "%s", cache);
    cr_assert_eq(json_number(cache, "pressure_reclaimed_bytes"), 6 * G, "%s", cache);
    free(cache);
    /* The authority's side: what came back, and who owns what at the end. */
    const char *ledger = strstr(r.out, "\"ledger\": {");
    cr_assert_not_null(ledger, "%s", r.out);
    cr_assert_eq(json_number(ledger, "pressure_reclaimed_bytes"), 6 * G);
    char *held = ledger_holder(r.out, "cache");
    cr_assert_eq(json_number(held, "owned_bytes"), G, "%s", held);
    cr_assert_eq(json_number(held, "owned_peak_bytes"), 6 * G, "%s", held);
    free(held);
    char *kv = ledger_holder(r.out, "kv");
    cr_assert_eq(json_number(kv, "owned_bytes"), 7 * G, "%s", kv);
    free(kv);
    /* The model followed the decommits: c2's granule was filled afresh by the
     * last commit and every granule checked out, the teardown's included. */
    cr_assert_eq(json_number(r.out, "corruptions"), 0, "%s", r.err);
    cr_assert_eq(json_number(r.out, "checked_granules"), 6 + 8, "%s", r.out);
    cr_assert(json_true(r.out, "ledger_balanced"), "%s", r.out);
    child_result_free(&r);
}

Test(trace, holder_annotations_are_checked_before_anything_runs)
{
    const char *path = tmp_path("holders.trace"), *record = tmp_path("holders-run.trace");
    write_file(path, "holder kv kv 50\n"
                     "region a 1MiB kv\n"
                     "alloc x 100 @nobody\n"
                     "commit a 0 64KiB\n");
    const char *args[] = {path, "--json", "--budget", "1MiB", NULL};
    child_result r = replay(record, args);
    cr_assert_eq(r.status, 2, "exit %d\n%s", r.status, r.err);
    cr_assert(strstr(r.err, "line 3: no holder 'nobody'") != NULL, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "line 1") == NULL && strstr(r.err, "line 2") == NULL &&
                  strstr(r.err, "line 4") == NULL,
              "only line 3 is bad: %s", r.err);
    cr_assert(strstr(r.err, "1 malformed line; nothing was replayed") != NULL, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "", "no report on stdout: %s", r.out);
    char *recorded = read_file(record);
    cr_assert_str_eq(recorded, "# ortmem trace v1: replay with ortmem-replay\n");
    free(recorded);
    child_result_free(&r);

    /* Every other way a holder annotation can be wrong, one line each. */
    write_file(path, "holder h gpu\n"                  /* 1: unknown role */
                     "holder kv kv high\n"             /* 2: not a priority */
                     "holder kv2 kv 5 reclaimable x\n" /* 3: too many fields */
                     "holder ok kv\n"
                     "holder ok other\n"       /* 5: declared twice */
                     "region a 1MiB missing\n" /* 6: unknown holder */
                     "alloc y 100 256 ok\n"    /* 7: holder without @ */
                     "region b 1MiB\n"         /* 8: the default holder "trace" */
                     "holder trace other\n");  /* 9: too late to declare it */
    r = replay(NULL, args);
    cr_assert_eq(r.status, 2, "exit %d\n%s", r.status, r.err);
    static const char *const want[] = {
        "line 1: role 'gpu' is not weights, kv, workspace or other",
        "line 2: 'high' is neither a priority",
        "line 3: holder takes 2 to 4 fields, got 5",
        "line 5: holder 'ok' is already declared (line 4)",
        "line 6: no holder 'missing'",
        "line 7: 'ok' is not a holder (write @HOLDER as the last field)",
        "line 9: holder 'trace' is the default holder, already charged by line 8",
        "7 malformed lines; nothing was replayed",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(r.err, want[i]) != NULL, "no '%s' in:\n%s", want[i], r.err);
    cr_assert_str_eq(r.out, "");
    child_result_free(&r);
}

Test(trace, without_a_budget_the_ledger_by_holder_is_still_reported)
{
    const char *args[] = {bundled_trace("minimal.trace"), "--json", NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "\"budget_bytes\": null,") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, "\"within_budget\": null,") != NULL, "%s", r.out);
    cr_assert_eq(json_number(r.out, "budget_refusals"), 0);
    /* Untagged lines charge the default holder "trace", role other. */
    const char *ledger = strstr(r.out, "\"ledger\": {");
    cr_assert_not_null(ledger, "%s", r.out);
    cr_assert_eq(json_number(ledger, "limit_bytes"), UINT64_MAX / 2);
    char *trace = ledger_holder(r.out, "trace");
    cr_assert(strstr(trace, "\"role\": \"other\"") != NULL, "%s", trace);
    /* At trace end only the arena's cache of empty granules is owned. */
    cr_assert_eq(json_number(trace, "owned_bytes"), json_number(r.out, "owned_at_trace_end_bytes"));
    cr_assert_eq(json_number(trace, "owned_peak_bytes"), json_number(r.out, "peak_owned_bytes"));
    free(trace);
    child_result_free(&r);
}

/* ---- memory over time: --timeline and --plot ---- */

static const char timeline_header[] = "op,line,kind,owned_bytes,mapped_bytes,arena_allocated_bytes,"
                                      "arena_committed_bytes,pool_bytes";

typedef struct timeline_row {
    uint64_t op, line;
    char kind[16];
    uint64_t owned, mapped, arena_allocated, arena_committed, pool;
} timeline_row;

/* Reads a timeline CSV: checks its header and parses every row (each must
 * have all eight fields); returns the rows, *count set. The caller frees. */
static timeline_row *read_timeline(const char *path, size_t *count)
{
    char *text = read_file(path);
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    cr_assert_not_null(line, "%s is empty", path);
    cr_assert_str_eq(line, timeline_header);
    size_t cap = 64, n = 0;
    timeline_row *rows = malloc(cap * sizeof *rows);
    cr_assert_not_null(rows);
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        if (n == cap) {
            cap *= 2;
            rows = realloc(rows, cap * sizeof *rows);
            cr_assert_not_null(rows);
        }
        timeline_row *r = &rows[n++];
        int end = 0;
        int fields = sscanf(line,
                            "%" SCNu64 ",%" SCNu64 ",%15[a-z],%" SCNu64 ",%" SCNu64 ",%" SCNu64
                            ",%" SCNu64 ",%" SCNu64 "%n",
                            &r->op, &r->line, r->kind, &r->owned, &r->mapped, &r->arena_allocated,
                            &r->arena_committed, &r->pool, &end);
        cr_assert(fields == 8 && line[end] == '\0', "row %zu is not 8 fields: '%s'", n, line);
    }
    free(text);
    *count = n;
    return rows;
}

Test(trace, timeline_of_the_minimal_trace_has_a_row_per_op_and_ends_at_the_report)
{
    const char *csv = tmp_path("minimal.csv");
    const char *args[] = {bundled_trace("minimal.trace"), "--json", "--timeline", csv, NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    size_t n = 0;
    timeline_row *rows = read_timeline(csv, &n);
    uint64_t ops = json_number(r.out, "ops");
    cr_assert_eq(n, ops, "%zu rows for %" PRIu64 " ops (K = 1 below 20000 ops)", n, ops);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(rows[i].op, i + 1, "row %zu names op %" PRIu64, i + 1, rows[i].op);
    /* Rows name their trace line and kind: the trace has 2 comment lines. */
    cr_assert_eq(rows[0].line, 3);
    cr_assert_str_eq(rows[0].kind, "region");
    cr_assert_eq(rows[n - 1].line, 14);
    cr_assert_str_eq(rows[n - 1].kind, "free");
    /* The arena columns: "alloc w 1MiB", then "alloc x 1000", then "free x". */
    cr_assert_str_eq(rows[5].kind, "alloc");
    cr_assert_eq(rows[5].arena_allocated, 1u << 20);
    cr_assert_eq(rows[6].arena_allocated, (1u << 20) + 1000);
    cr_assert_eq(rows[7].arena_allocated, 1u << 20);
    cr_assert_geq(rows[7].arena_committed, rows[7].arena_allocated);
    cr_assert_eq(rows[n - 1].arena_allocated, 0);
    /* The last row is the report's "at trace end"; the owned column peaks
     * at the report's peak. */
    cr_assert_eq(rows[n - 1].owned, json_number(r.out, "owned_at_trace_end_bytes"));
    cr_assert_eq(rows[n - 1].mapped, json_number(r.out, "mapped_at_trace_end_bytes"));
    cr_assert_eq(rows[n - 1].pool, json_number(r.out, "pool_at_trace_end_bytes"));
    uint64_t peak_owned = 0, peak_mapped = 0;
    for (size_t i = 0; i < n; i++) {
        peak_owned = rows[i].owned > peak_owned ? rows[i].owned : peak_owned;
        peak_mapped = rows[i].mapped > peak_mapped ? rows[i].mapped : peak_mapped;
    }
    cr_assert_eq(peak_owned, json_number(r.out, "peak_owned_bytes"));
    cr_assert_eq(peak_mapped, json_number(r.out, "peak_mapped_bytes"));
    const char *timeline = strstr(r.out, "\"timeline\": {\"path\": ");
    cr_assert_not_null(timeline, "%s", r.out);
    cr_assert_eq(json_number(timeline, "rows"), ops);
    cr_assert_eq(json_number(timeline, "every_ops"), 1);
    cr_assert(strstr(r.out, "\"plot\": null") != NULL, "%s", r.out);
    free(rows);
    child_result_free(&r);
}

Test(trace, timeline_of_a_long_trace_has_a_row_every_K_ops_and_after_the_last)
{
    /* 20001 ops: K = ceil(20001 / 20000) = 2, rows after ops 2, 4, ..., 20000
     * and after the last, 20001 (its allocation is left to teardown). */
    const char *path = tmp_path("long.trace"), *csv = tmp_path("long.csv");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 10000; i++)
        fprintf(f, "alloc a%d 4096\nfree a%d\n", i, i);
    fputs("alloc last 4096\n", f);
    cr_assert_eq(fclose(f), 0);
    const char *args[] = {path, "--granule", "64KiB", "--timeline", csv, NULL};
    child_result r = replay(NULL, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    size_t n = 0;
    timeline_row *rows = read_timeline(csv, &n);
    cr_assert_eq(n, 10001, "%zu rows", n);
    for (size_t i = 0; i + 1 < n; i++)
        cr_assert_eq(rows[i].op, 2 * (i + 1), "row %zu names op %" PRIu64, i + 1, rows[i].op);
    cr_assert_eq(rows[n - 1].op, 20001);
    cr_assert_str_eq(rows[n - 1].kind, "alloc");
    cr_assert_eq(rows[n - 1].arena_allocated, 4096);
    /* The human report names what it wrote. */
    char want[600];
    snprintf(want, sizeof want, "  timeline        %s (10001 rows, one per 2 ops)\n", csv);
    cr_assert(strstr(r.out, want) != NULL, "no '%s' in:\n%s", want, r.out);
    free(rows);
    child_result_free(&r);
}

Test(trace, plot_draws_an_svg_with_gnuplot_and_leaves_no_temporary_timeline)
{
    if (!gnuplot_installed()) {
        /* Criterion shows a skip's reason only with --verbose; stderr reaches
         * the default output and meson's test log. */
        static const char reason[] = "gnuplot is not installed (apt-get install gnuplot-nox): "
                                     "--plot is not tested";
        fprintf(stderr,
                "SKIP trace::plot_draws_an_svg_with_gnuplot_and_leaves_no_temporary_timeline: %s\n",
                reason);
        cr_skip_test("%s", reason);
    }
    /* The child's TMPDIR is a folder of its own, so what it leaves there shows. */
    const char *scratch = tmp_path("scratch");
    cr_assert_eq(mkdir(scratch, 0700), 0, "mkdir %s: %s", scratch, strerror(errno));
    char tmpdir_var[600];
    snprintf(tmpdir_var, sizeof tmpdir_var, "TMPDIR=%s", scratch);
    const char *svg = tmp_path("minimal.svg");
    const char *args[] = {bundled_trace("minimal.trace"), "--plot", svg, NULL};
    child_result r = replay_env(NULL, tmpdir_var, args);
    cr_assert_eq(r.status, 0, "exit %d\n%s\n%s", r.status, r.out, r.err);
    char *text = read_file(svg);
    cr_assert(strstr(text, "<svg") != NULL, "%s is not an SVG:\n%.400s", svg, text);
    cr_assert(strstr(text, "minimal.trace") != NULL, "the title names the trace");
    free(text);
    char want[600];
    snprintf(want, sizeof want, "  plot            %s\n", svg);
    cr_assert(strstr(r.out, want) != NULL, "no '%s' in:\n%s", want, r.out);
    cr_assert(strstr(r.out, "  timeline ") == NULL, "the temporary timeline is not reported");
    /* The temporary timeline is gone. */
    DIR *dir = opendir(scratch);
    cr_assert_not_null(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        cr_assert(strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0,
                  "left behind in TMPDIR: %s", e->d_name);
    closedir(dir);
    child_result_free(&r);
}

Test(trace, plot_without_gnuplot_names_the_package_and_replays_nothing)
{
    /* A PATH with no gnuplot on it, whether or not this machine has one. */
    const char *empty = tmp_path("empty-bin");
    cr_assert_eq(mkdir(empty, 0700), 0, "mkdir %s: %s", empty, strerror(errno));
    char path_var[600];
    snprintf(path_var, sizeof path_var, "PATH=%s", empty);
    const char *svg = tmp_path("none.svg"), *record = tmp_path("none-run.trace");
    const char *args[] = {bundled_trace("minimal.trace"), "--plot", svg, NULL};
    child_result r = replay_env(record, path_var, args);
    cr_assert_eq(r.status, 2, "exit %d\n%s\n%s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "gnuplot-nox") != NULL, "stderr: %s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert_eq(access(svg, F_OK), -1, "%s was created", svg);
    char *recorded = read_file(record);
    cr_assert_str_eq(recorded, "# ortmem trace v1: replay with ortmem-replay\n");
    free(recorded);
    child_result_free(&r);
}

/* ortmem-kvdemo, the KV paging demonstration, run as a child process on
 * small workloads (64 KiB granules). Its path comes from ORTMEM_KVDEMO, set
 * by tests/meson.build. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child.h"
#include "support.h"
#include "tmpdir.h"

static void make_tmpdir(void)
{
    tmpdir_make("ortmem-kvdemo");
}

/* Runs ortmem-kvdemo with args (NULL-terminated); env_path, when not NULL,
 * replaces the child's PATH. */
static child_result kvdemo_env(const char *const *args, const char *env_path)
{
    const char *exe = getenv("ORTMEM_KVDEMO");
    cr_assert(exe && *exe, "ORTMEM_KVDEMO is not set (tests/meson.build sets it)");
    char path_var[600];
    if (env_path)
        snprintf(path_var, sizeof path_var, "PATH=%s", env_path);
    const char *changes[] = {env_path ? path_var : NULL, NULL};
    return child_run(exe, args, changes);
}

static child_result kvdemo(const char *const *args)
{
    return kvdemo_env(args, NULL);
}

/* The number after "key": at or after from (the first occurrence). */
static double json_number_at(const char *from, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(from, pattern);
    cr_assert_not_null(at, "no \"%s\" in:\n%.2000s", key, from);
    at += strlen(pattern);
    cr_assert((*at >= '0' && *at <= '9') || *at == '-', "\"%s\" is not a number", key);
    return strtod(at, NULL);
}

static bool json_string_is(const char *from, const char *key, const char *value)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "\"%s\": \"%s\"", key, value);
    const char *at = strstr(from, pattern);
    const char *next = strstr(from + 1, "{\"layout\": ");
    return at && (!next || at < next);
}

/* The configuration objects: each starts at {"layout": and its keys come
 * before the next one's. */
static size_t configurations(const char *json, const char **starts, size_t max)
{
    size_t n = 0;
    for (const char *p = strstr(json, "{\"layout\": "); p && n < max;
         p = strstr(p + 1, "{\"layout\": "))
        starts[n++] = p;
    return n;
}

/* Small enough for a test, long enough that buckets grow and prompts share:
 * prompts beyond the system prompt 16 .. 400 tokens, generations 64 .. 300
 * (past the 256-token buckets), a 300-token system prompt. */
#define SMALL                                                                                      \
    "--granule", "64KiB", "--requests", "12", "--batch", "4", "--max-context", "2048",             \
        "--prompt-min", "16", "--prompt-max", "400", "--gen-min", "64", "--gen-max", "300"

TestSuite(kvdemo, .init = make_tmpdir, .fini = tmpdir_remove, .timeout = 120);

Test(kvdemo, every_layout_and_strategy_runs_clean_with_the_copies_each_strategy_promises)
{
    const char *args[] = {SMALL, "--system-prompt", "300", "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s\nstdout:\n%.3000s", r.status, r.err, r.out);
    cr_assert_str_empty(r.err, "stderr: %s", r.err);
    cr_assert_eq(r.out[0], '{', "not one JSON object:\n%.500s", r.out);
    const char *tail = strstr(r.out, "\n \"corruptions\": ");
    cr_assert_not_null(tail, "no top-level corruptions in:\n%.3000s", r.out);
    cr_assert_eq(json_number_at(tail, "corruptions"), 0);
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    size_t stable = 0, bucket = 0;
    for (size_t i = 0; i < n; i++) {
        double committed = json_number_at(c[i], "peak_committed_bytes");
        double live = json_number_at(c[i], "peak_live_bytes");
        double unique = json_number_at(c[i], "peak_unique_live_bytes");
        double growth = json_number_at(c[i], "growth_copied_bytes");
        cr_assert_eq(json_number_at(c[i], "corruptions"), 0, "%.300s", c[i]);
        cr_assert_eq(json_number_at(c[i], "completed"), 12, "%.300s", c[i]);
        cr_assert_gt(json_number_at(c[i], "tokens_verified"), 0, "%.300s", c[i]);
        cr_assert_gt(live, 0, "%.300s", c[i]);
        /* Sharing maps a token into several sequences (live counts it in
         * each): what memory must hold at least is the unique bytes. */
        cr_assert_geq(committed, unique, "%.300s", c[i]);
        cr_assert_geq(live, unique, "%.300s", c[i]);
        if (json_string_is(c[i], "strategy", "stable")) {
            stable++;
            cr_assert_eq(growth, 0, "a stable cache moved bytes: %.300s", c[i]);
            cr_assert_eq(json_number_at(c[i], "generations_bumped"), 0, "%.300s", c[i]);
        } else {
            cr_assert(json_string_is(c[i], "strategy", "bucket"), "%.300s", c[i]);
            bucket++;
            cr_assert_gt(growth, 0, "a bucket cache grew without copying: %.300s", c[i]);
            cr_assert_gt(json_number_at(c[i], "generations_bumped"), 0, "%.300s", c[i]);
        }
    }
    cr_assert_eq(stable, 3);
    cr_assert_eq(bucket, 3);
    /* token-major, stable: the system prompt comes through the prefix cache. */
    cr_assert(json_string_is(c[4], "layout", "token-major") &&
                  json_string_is(c[4], "strategy", "stable"),
              "%.300s", c[4]);
    cr_assert_gt(json_number_at(c[4], "prefix_hits"), 0, "%.600s", c[4]);
    cr_assert_gt(json_number_at(c[4], "prefix_bytes_saved"), 0, "%.600s", c[4]);
    cr_assert_not_null(strstr(r.out, "\"best\": \""), "no best configuration");
    cr_assert_not_null(strstr(r.out, "\"ledger\": {\"limit_bytes\": "), "no ledger");
    child_result_free(&r);
}

/* Within one configuration: the backend calls of op ("create" .. "release",
 * "all"): the warm-up and the requests after it add up to the backend's
 * total, the mean per request times those requests is what they made, and
 * no request made more than the max. Returns the op's total. */
static double check_calls(const char *config, const char *op, double after_requests)
{
    const char *calls = strstr(config, "\"backend_calls\": {");
    cr_assert_not_null(calls, "no backend_calls in:\n%.1500s", config);
    char key[64];
    snprintf(key, sizeof key, "\"%s\": {", op);
    const char *at = strstr(calls, key);
    cr_assert_not_null(at, "no %s in:\n%.1500s", key, calls);
    double total = json_number_at(at, "total");
    double warmup = json_number_at(at, "warmup");
    double after = json_number_at(at, "after_warmup");
    double mean = json_number_at(at, "per_request_mean");
    double max = json_number_at(at, "per_request_max");
    cr_assert_eq(total, warmup + after, "%s: total %.0f != warm-up %.0f + after %.0f", op, total,
                 warmup, after);
    cr_assert_leq(fabs(mean * after_requests - after), 0.01,
                  "%s: mean %.6f x %.0f requests is not the %.0f calls after the warm-up", op, mean,
                  after_requests, after);
    cr_assert_geq(max * after_requests, after, "%s: max %.0f below the mean", op, max);
    cr_assert_leq(max, after, "%s: max %.0f above what all the requests made", op, max);
    return total;
}

Test(kvdemo, backend_calls_per_request_add_up_to_the_backends_total)
{
    /* Warm ranges off: every request commits granules of its own (warm
     * ranges: warm_ranges_... below). */
    const char *args[] = {SMALL, "--system-prompt", "300", "--warmup", "5", "--warm",
                          "off", "--json",          NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "\"warmup\": 5}"), "no warmup in the workload:\n%.1500s",
                       r.out);
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    static const char *const ops[] = {"create", "map", "set_access", "unmap", "release"};
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(json_number_at(c[i], "warmup_requests"), 5, "%.300s", c[i]);
        double after_requests = json_number_at(c[i], "requests_after_warmup");
        cr_assert_eq(after_requests, 12 - 5, "%.300s", c[i]);
        double sum = 0;
        for (size_t k = 0; k < 5; k++)
            sum += check_calls(c[i], ops[k], after_requests);
        cr_assert_eq(check_calls(c[i], "all", after_requests), sum, "all is not the five summed");
        /* Without warm ranges every request commits granules of its own. */
        const char *create = strstr(strstr(c[i], "\"backend_calls\""), "\"create\": {");
        cr_assert_gt(json_number_at(create, "total"), 0, "%.300s", create);
        cr_assert_gt(json_number_at(create, "after_warmup"), 0, "%.300s", create);
    }
    child_result_free(&r);
}

/* The steady state of one configuration: create + map + unmap + release
 * after the warm-up, checked against the five operations' own counts. */
static double steady_after(const char *config, double *max)
{
    const char *calls = strstr(config, "\"backend_calls\": {");
    cr_assert_not_null(calls);
    const char *steady = strstr(calls, "\"steady_state\": {");
    cr_assert_not_null(steady, "no steady_state in:\n%.1500s", calls);
    double sum = 0;
    static const char *const handle_ops[] = {"create", "map", "unmap", "release"};
    for (size_t k = 0; k < 4; k++) {
        char key[64];
        snprintf(key, sizeof key, "\"%s\": {", handle_ops[k]);
        sum += json_number_at(strstr(calls, key), "after_warmup");
    }
    double after = json_number_at(steady, "after_warmup");
    cr_assert_eq(after, sum, "steady state %.0f is not create + map + unmap + release %.0f", after,
                 sum);
    *max = json_number_at(steady, "per_request_max");
    double none = json_number_at(steady, "requests_with_none");
    double requests = json_number_at(calls, "requests_after_warmup");
    cr_assert_leq(none, requests);
    if (after == 0)
        cr_assert_eq(none, requests, "no handle call: every request made none");
    else
        cr_assert_lt(none, requests);
    return after;
}

/* Warm ranges (on by default): a stable cache keeps finished ranges mapped
 * and the next sequence of the same kind takes one with no create, map,
 * unmap or release. Bucket caches keep none. Without sharing, head-major's
 * ranges all commit the same granules (every fragment's first two), so
 * after the warm-up no request makes a handle call at all; elsewhere a
 * request longer than any free range, or of a kind more of which are live
 * than the warm-up saw, still commits. */
Test(kvdemo, warm_ranges_cut_the_steady_state_handle_calls_and_leave_none_where_ranges_fit)
{
    for (int sharing = 0; sharing < 2; sharing++) {
        const char *prompt = sharing ? "300" : "0";
        /* Without prewarm: what finished ranges alone do. */
        const char *on_args[] = {SMALL, "--system-prompt", prompt, "--prewarm",
                                 "off", "--json",          NULL};
        const char *off_args[] = {SMALL, "--system-prompt", prompt, "--warm",
                                  "off", "--json",          NULL};
        child_result on = kvdemo(on_args), off = kvdemo(off_args);
        cr_assert_eq(on.status, 0, "exit %d, stderr:\n%s", on.status, on.err);
        cr_assert_eq(off.status, 0, "exit %d, stderr:\n%s", off.status, off.err);
        cr_assert_not_null(strstr(on.out, "\"warm\": true"));
        cr_assert_not_null(strstr(off.out, "\"warm\": false"));
        const char *c_on[8], *c_off[8];
        cr_assert_eq(configurations(on.out, c_on, 8), 6);
        cr_assert_eq(configurations(off.out, c_off, 8), 6);
        for (size_t i = 0; i < 6; i++) {
            bool stable = json_string_is(c_on[i], "strategy", "stable");
            double max_on = 0, max_off = 0;
            double steady_on = steady_after(c_on[i], &max_on);
            double steady_off = steady_after(c_off[i], &max_off);
            const char *warm = strstr(c_on[i], "\"warm\": {");
            cr_assert_not_null(warm, "%.300s", c_on[i]);
            if (!stable) {
                cr_assert_eq(json_number_at(warm, "hits"), 0, "a bucket keeps no warm range");
                cr_assert_eq(steady_on, steady_off, "bucket: warm ranges change nothing");
                continue;
            }
            cr_assert_gt(json_number_at(warm, "hits"), 0, "%.400s", c_on[i]);
            cr_assert_lt(steady_on, steady_off / 2,
                         "%.300s: %.0f handle calls with warm ranges, "
                         "%.0f without",
                         c_on[i], steady_on, steady_off);
            if (!sharing && json_string_is(c_on[i], "layout", "head-major"))
                cr_assert_eq(max_on, 0,
                             "head-major without sharing: no handle call after the "
                             "warm-up (%.0f in one request)",
                             max_on);
        }
        child_result_free(&on);
        child_result_free(&off);
    }
}

/* The default workload with --prewarm on pre-warms --batch ranges of each
 * kind for the longest request at start (counted in the warm-up): no request
 * after the warm-up makes a create, map, unmap or release in any stable
 * configuration, and every request takes a warm range. */
Test(kvdemo, prewarm_leaves_no_steady_state_handle_call_in_the_default_workload, .timeout = 600)
{
    const char *args[] = {"--json", "--prewarm", "on", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "\"prewarm\": true"));
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    size_t stable = 0;
    for (size_t i = 0; i < n; i++) {
        if (!json_string_is(c[i], "strategy", "stable"))
            continue;
        stable++;
        double max = 0;
        double after = steady_after(c[i], &max);
        cr_assert_eq(after, 0, "%.300s: %.0f handle calls after the warm-up (max %.0f)", c[i],
                     after, max);
        cr_assert_eq(max, 0);
        const char *warm = strstr(c[i], "\"warm\": {");
        cr_assert_not_null(warm, "%.300s", c[i]);
        cr_assert_eq(json_number_at(warm, "hits"), 48, "%.400s", warm);
        cr_assert_geq(json_number_at(warm, "prewarmed"), 16, "%.400s", warm);
    }
    cr_assert_eq(stable, 3);
    child_result_free(&r);
}

/* --io copy is the CUDA backend's way to the K/V bytes; on the CPU backend it
 * runs the same code: the same tokens written and read back, through copies. */
Test(kvdemo, io_copy_writes_and_reads_the_same_tokens_as_stores_and_sees_a_corruption)
{
    const char *store_args[] = {SMALL, "--system-prompt", "300", "--json", NULL};
    const char *copy_args[] = {SMALL, "--system-prompt", "300", "--io", "copy", "--json", NULL};
    child_result store = kvdemo(store_args);
    child_result copy = kvdemo(copy_args);
    cr_assert_eq(store.status, 0, "exit %d, stderr:\n%s", store.status, store.err);
    cr_assert_eq(copy.status, 0, "exit %d, stderr:\n%s", copy.status, copy.err);
    cr_assert_not_null(strstr(copy.out, "\"io\": \"copy\""), "%.500s", copy.out);
    double rows = 2 * json_number_at(copy.out, "layers") * json_number_at(copy.out, "kv_heads");
    const char *s[8], *c[8];
    cr_assert_eq(configurations(store.out, s, 8), 6);
    cr_assert_eq(configurations(copy.out, c, 8), 6);
    for (size_t i = 0; i < 6; i++) {
        cr_assert_eq(json_number_at(c[i], "corruptions"), 0, "%.600s", c[i]);
        cr_assert_eq(json_number_at(c[i], "tokens_written"), json_number_at(s[i], "tokens_written"),
                     "%.600s", c[i]);
        cr_assert_eq(json_number_at(c[i], "tokens_verified"),
                     json_number_at(s[i], "tokens_verified"), "%.600s", c[i]);
        cr_assert_eq(json_number_at(s[i], "copies"), 0, "%.600s", s[i]);
        /* Batched: a copy carries many rows (a row per binding and head of
         * every token written, besides the reads). */
        double copies = json_number_at(c[i], "copies");
        cr_assert_gt(copies, 0, "%.600s", c[i]);
        cr_assert_lt(copies * 20, json_number_at(c[i], "tokens_written") * rows, "%.600s", c[i]);
    }
    child_result_free(&store);
    child_result_free(&copy);

    const char *inject[] = {SMALL,  "--requests",          "2",      "--io",
                            "copy", "--inject-corruption", "--json", NULL};
    child_result r = kvdemo(inject);
    cr_assert_eq(r.status, 1, "exit %d, stderr:\n%s", r.status, r.err);
    const char *k[8];
    cr_assert_eq(configurations(r.out, k, 8), 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_not_null(strstr(k[i], "\"first_corruption\": \"request 0 (plain): token 0 "),
                           "%.2000s", k[i]);
    child_result_free(&r);
}

Test(kvdemo, backend_cuda_where_it_is_unavailable_is_one_line_and_exit_2)
{
    ortmem_backend *cuda = NULL;
    if (ortmem_cuda_backend_create(NULL, &cuda) == ORTMEM_OK) {
        (void)ortmem_backend_destroy(cuda);
        cr_skip_test("the CUDA backend is available here: scripts/gpu-bench.sh runs it");
    }
    const char *args[] = {SMALL, "--backend", "cuda", "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 2, "exit %d, stderr:\n%s", r.status, r.err);
    cr_assert_str_empty(r.out, "stdout: %s", r.out);
    cr_assert(strncmp(r.err, "ortmem-kvdemo: --backend cuda: ", 31) == 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, " is unavailable (ORTMEM_E_UNAVAILABLE: "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "nothing was run"), "%s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "not one line: %s", r.err);
    child_result_free(&r);
}

Test(kvdemo, without_sharing_peak_committed_covers_peak_live_everywhere)
{
    const char *args[] = {SMALL, "--system-prompt", "0", "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    for (size_t i = 0; i < n; i++) {
        double committed = json_number_at(c[i], "peak_committed_bytes");
        double live = json_number_at(c[i], "peak_live_bytes");
        cr_assert_gt(live, 0, "%.300s", c[i]);
        cr_assert_geq(committed, live, "%.300s", c[i]);
        cr_assert_eq(json_number_at(c[i], "corruptions"), 0, "%.300s", c[i]);
    }
    child_result_free(&r);
}

Test(kvdemo, a_byte_changed_behind_the_cache_is_reported_as_a_corruption)
{
    const char *args[] = {SMALL, "--requests", "2", "--inject-corruption", "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 1, "exit %d, stderr:\n%s", r.status, r.err);
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_geq(json_number_at(c[i], "corruptions"), 1, "%.300s", c[i]);
        cr_assert_not_null(strstr(c[i], "\"first_corruption\": \"request 0 (plain): token 0 "),
                           "%.2000s", c[i]);
    }
    child_result_free(&r);
}

Test(kvdemo, a_budget_shows_refusals_and_the_workload_still_finishes_intact)
{
    /* A head-major sequence commits a granule for each of its 96 fragments
     * (6 MiB), the system prompt's as well: 16 MiB hold two at a time. */
    const char *args[] = {SMALL, "--system-prompt", "300", "--budget", "16MiB", "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    const char *c[8];
    size_t n = configurations(r.out, c, 8);
    cr_assert_eq(n, 6, "%zu configurations", n);
    cr_assert(json_string_is(c[0], "layout", "head-major"), "%.300s", c[0]);
    cr_assert_gt(json_number_at(c[0], "budget_refusals"), 0, "%.600s", c[0]);
    cr_assert_gt(json_number_at(c[0], "admission_waits"), 0, "%.600s", c[0]);
    for (size_t i = 0; i < n; i++) {
        cr_assert_leq(json_number_at(c[i], "ledger_peak_owned_bytes"), 16.0 * 1048576, "%.300s",
                      c[i]);
        cr_assert_eq(json_number_at(c[i], "corruptions"), 0, "%.300s", c[i]);
        cr_assert_eq(json_number_at(c[i], "completed"), 12, "%.600s", c[i]);
    }
    child_result_free(&r);
}

Test(kvdemo, the_table_reports_progress_and_every_configuration)
{
    const char *args[] = {SMALL, NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "  step "), "no progress line:\n%.2000s", r.out);
    cr_assert_not_null(strstr(r.out, " efficiency "), "no efficiency:\n%.2000s", r.out);
    static const char *const rows[] = {"head-major stable ",  "head-major bucket ",
                                       "seq-major stable ",   "seq-major bucket ",
                                       "token-major stable ", "token-major bucket "};
    for (size_t i = 0; i < 6; i++) {
        char row[64];
        snprintf(row, sizeof row, "\n%s", rows[i]);
        cr_assert_not_null(strstr(r.out, row), "no row '%s' in:\n%s", rows[i], r.out);
    }
    cr_assert_not_null(strstr(r.out, "ledger of "), "no ledger:\n%s", r.out);
    cr_assert_not_null(strstr(r.out, " 0 corruptions"), "%s", r.out);
    child_result_free(&r);
}

Test(kvdemo, plot_draws_an_svg_with_a_line_per_configuration)
{
    if (!gnuplot_installed()) {
        static const char reason[] = "gnuplot is not installed (apt-get install gnuplot-nox): "
                                     "--plot is not tested";
        fprintf(stderr, "SKIP kvdemo::plot_draws_an_svg_with_a_line_per_configuration: %s\n",
                reason);
        cr_skip_test("%s", reason);
    }
    const char *svg = tmp_path("paging.svg");
    const char *args[] = {SMALL, "--plot", svg, "--json", NULL};
    child_result r = kvdemo(args);
    cr_assert_eq(r.status, 0, "exit %d, stderr:\n%s", r.status, r.err);
    char *text = read_file(svg);
    cr_assert_not_null(strstr(text, "<svg"), "not an SVG:\n%.300s", text);
    cr_assert_not_null(strstr(text, "</svg>"), "a cut SVG");
    /* Configurations with equal committed bytes share a line and name both. */
    static const char *const names[] = {"head-major",
                                        "seq-major",
                                        "token-major",
                                        "stable",
                                        "bucket",
                                        "live",
                                        "backend calls per request"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        cr_assert_not_null(strstr(text, names[i]), "no '%s' in the plot", names[i]);
    free(text);
    child_result_free(&r);
}

Test(kvdemo, plot_without_gnuplot_is_one_line_naming_the_package_and_runs_nothing)
{
    const char *empty = tmp_path("empty-bin");
    cr_assert_eq(mkdir(empty, 0700), 0, "mkdir %s: %s", empty, strerror(errno));
    const char *svg = tmp_path("never.svg");
    const char *args[] = {SMALL, "--plot", svg, NULL};
    child_result r = kvdemo_env(args, empty);
    cr_assert_eq(r.status, 2, "exit %d, stderr:\n%s", r.status, r.err);
    cr_assert_str_empty(r.out, "stdout: %s", r.out);
    cr_assert_not_null(strstr(r.err, "gnuplot-nox"), "stderr: %s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "not one line: %s", r.err);
    cr_assert_neq(access(svg, F_OK), 0, "the plot file was created");
    child_result_free(&r);
}

Test(kvdemo, invalid_input_is_one_line_and_exit_2)
{
    const char *const cases[][4] = {
        {"--granule", "3MiB", NULL, NULL},
        {"--model", "no-such-model", NULL, NULL},
        {"--prompt-min", "500", "--prompt-max", "100"},
        {"--batch", "0", NULL, NULL},
        {"--max-context", "100", NULL, NULL},
        {"--frobnicate", NULL, NULL, NULL},
        {"--backend", "tpu", NULL, NULL},
        {"--device", "1", NULL, NULL},
        {"--backend", "cuda", "--io", "store"},
        {"--io", "disk", NULL, NULL},
        {"--warmup", "49", NULL, NULL},
        {"--warm", "maybe", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[5] = {cases[i][0], cases[i][1], cases[i][2], cases[i][3], NULL};
        child_result r = kvdemo(args);
        cr_assert_eq(r.status, 2, "%s: exit %d, stderr:\n%s", cases[i][0], r.status, r.err);
        cr_assert_str_empty(r.out, "%s: stdout: %s", cases[i][0], r.out);
        cr_assert(strncmp(r.err, "ortmem-kvdemo: ", 15) == 0, "%s", r.err);
        cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "not one line: %s", r.err);
        child_result_free(&r);
    }
}

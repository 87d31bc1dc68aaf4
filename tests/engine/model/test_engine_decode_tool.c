/* ortmem-decode from the outside: each kind of bad input (a missing or cut
 * file, another architecture, an unknown tensor type, a prompt longer than
 * the context, a prompt that is not UTF-8) is one line on stderr and exit
 * status 2; a greedy run reports its tokens, speed and memory in JSON. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "json_scan.h"
#include "synth_gguf.h"
#include "tmpdir.h"

static const char *decode_exe(void)
{
    const char *exe = getenv("ORTMEM_DECODE");
    cr_assert_not_null(exe, "ORTMEM_DECODE is not set (meson sets it)");
    return exe;
}

static void setup(void)
{
    tmpdir_make("engine-decode");
}

static void teardown(void)
{
    tmpdir_remove();
}

TestSuite(engine_decode_tool, .init = setup, .fini = teardown, .timeout = 240);

/* Exit status 2 and exactly one line on stderr that holds want. */
static void refused(const char *const *args, const char *want)
{
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 2, "exit status %d; stderr: %s", r.status, r.err);
    size_t len = strlen(r.err);
    cr_assert(len > 0 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
              "not one line: %s", r.err);
    cr_assert(strncmp(r.err, "ortmem-decode: ", 15) == 0, "%s", r.err);
    cr_assert(strstr(r.err, want), "\"%s\" is not in: %s", want, r.err);
    cr_assert_str_eq(r.out, "");
    child_result_free(&r);
}

static const char *synth(const char *name, const synth_options *o)
{
    const char *path = tmp_path(name);
    synth_gguf_write(path, o);
    return path;
}

Test(engine_decode_tool, a_missing_model_file)
{
    const char *args[] = {"-p", "Hello", "--model", "/nonexistent/model.gguf", NULL};
    refused(args, "cannot read the model /nonexistent/model.gguf");
}

Test(engine_decode_tool, a_cut_model_file)
{
    synth_options o = {.truncate_to = 3000};
    const char *args[] = {"-p", "Hello", "--model", synth("cut.gguf", &o), NULL};
    refused(args, "cannot load the model");
}

Test(engine_decode_tool, another_architecture)
{
    synth_options o = {.arch = "gpt2"};
    const char *args[] = {"-p", "Hello", "--model", synth("gpt2.gguf", &o), NULL};
    refused(args, "\"gpt2\"");
}

Test(engine_decode_tool, an_unknown_tensor_type)
{
    synth_options o = {.retype_tensor = "blk.1.ffn_down.weight", .new_type = 99};
    const char *args[] = {"-p", "Hello", "--model", synth("type99.gguf", &o), NULL};
    refused(args, "'blk.1.ffn_down.weight': type id 99");
}

Test(engine_decode_tool, a_prompt_longer_than_the_context)
{
    const char *args[] = {"-p", "The capital of France is a city on the Seine", "--ctx", "4", NULL};
    refused(args, "the context holds 4");
}

Test(engine_decode_tool, a_prompt_that_is_not_utf8)
{
    const char *args[] = {"-p", "caf\xc3 au lait", NULL};
    refused(args, "not valid UTF-8 (byte 3)");
}

Test(engine_decode_tool, bad_options)
{
    const char *no_prompt[] = {"-n", "4", NULL};
    refused(no_prompt, "no prompt");
    const char *bad_count[] = {"-p", "Hi", "-n", "four", NULL};
    refused(bad_count, "\"four\"");
    const char *bad_threads[] = {"-p", "Hi", "--threads", "0", NULL};
    refused(bad_threads, "--threads");
    const char *bad_device[] = {"-p", "Hi", "--device", "tpu", NULL};
    refused(bad_device, "\"tpu\" is neither cpu nor cuda[:N]");
    const char *bad_ordinal[] = {"-p", "Hi", "--device", "cuda:x", NULL};
    refused(bad_ordinal, "no device number");
    const char *bad_batch[] = {"-p", "Hi", "--device", "cuda", "--batch", "33", NULL};
    refused(bad_batch, "--batch: \"33\" is not in 1..32");
    const char *batch_on_cpu[] = {"-p", "Hi", "--batch", "4", NULL};
    refused(batch_on_cpu, "--batch and --no-graphs need --device cuda");
    const char *bad_budget[] = {"-p", "Hi", "--device-budget", "lots", NULL};
    refused(bad_budget, "--device-budget: \"lots\" is not a byte count");
    const char *small_budget[] = {"-p", "Hi", "--device-budget", "8M", NULL};
    refused(small_budget, "a weights budget of 8388608 bytes is below the");
}

/* Under half the weights' bytes the matrices that do not fit stream through
 * the residency cache's ring, and the first tokens are llama.cpp's still. */
Test(engine_decode_tool, a_device_budget_streams_weights_and_keeps_the_tokens)
{
    const char *args[] = {
        "-p", "The capital of France is", "-n", "8", "--device-budget", "48M", "--json", NULL};
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 0, "exit status %d; stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "\"tokens\": [7042, 30, 198, 198, 504, 1797, 1918, 553]"), "%s", r.out);
    cr_assert_gt(json_number(r.out, "weights_streamed"), 0, "%s", r.out);
    cr_assert_gt(json_number(r.out, "weights_bytes_moved"), 0, "%s", r.out);
    cr_assert_leq(json_number(r.out, "weights_resident_bytes"), 48u << 20, "%s", r.out);
    child_result_free(&r);
}

/* Greedy, 8 tokens: llama.cpp's first 8 for this prompt (the reference
 * file's "capital" prompt), and a report whose numbers hold together. */
Test(engine_decode_tool, a_greedy_run_reports_in_json)
{
    const char *args[] = {"-p", "The capital of France is", "-n", "8", "--json", NULL};
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 0, "exit status %d; stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "\"prompt_tokens\": [504, 3575, 282, 4649, 314]"), "%s", r.out);
    cr_assert(strstr(r.out, "\"tokens\": [7042, 30, 198, 198, 504, 1797, 1918, 553]"), "%s", r.out);
    cr_assert(strstr(r.out, "\"text\": \" Paris.\\n\\nThe"), "%s", r.out);
    uint64_t committed = json_number(r.out, "kv_committed_bytes");
    uint64_t live = json_number(r.out, "kv_live_bytes");
    cr_assert_eq(live, 12 * 23040, "12 tokens of 23040 bytes (30 layers, 3 KV heads, 64, F16)");
    cr_assert_geq(committed, live);
    cr_assert_leq(json_number(r.out, "kv_overcommit_bytes"),
                  json_number(r.out, "kv_overcommit_bound_bytes"));
    uint64_t weights = json_number(r.out, "weights_resident_bytes");
    cr_assert_geq(weights, 90000000);
    /* The weights are resident once (in their slots), not also as the file's
     * pages: a second copy would put the process at twice them or more. The
     * bound leaves room for the sanitizer build's shadow memory (1.29x
     * without, 1.50x with AddressSanitizer). */
    uint64_t rss = json_number(r.out, "peak_rss_bytes");
    cr_assert_gt(rss, weights);
    cr_assert_lt(rss, weights / 5 * 9, "peak RSS %llu for %llu bytes of weights",
                 (unsigned long long)rss, (unsigned long long)weights);
    cr_assert_gt(json_number(r.out, "prefill_tok_s"), 0);
    cr_assert_gt(json_number(r.out, "decode_tok_s"), 0);
    child_result_free(&r);
}

/* The text streams to stdout as it is produced; --stats adds the report on
 * stderr. */
Test(engine_decode_tool, streaming_text_and_stats)
{
    const char *args[] = {"-p", "The capital of France is", "-n", "4", "--stats", NULL};
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 0, "exit status %d; stderr: %s", r.status, r.err);
    cr_assert_str_eq(r.out, " Paris.\n\n\n");
    cr_assert(strstr(r.err, "decode: 3 tokens"), "%s", r.err);
    cr_assert(strstr(r.err, "kv: "), "%s", r.err);
    cr_assert(strstr(r.err, "weights resident: "), "%s", r.err);
    cr_assert(strstr(r.err, "holder"), "the ledger table: %s", r.err);
    child_result_free(&r);
}

/* --chat renders the prompt with the model's template (its default system
 * message first) and parses the special tokens: llama.cpp's ids for the
 * reference file's "chat" prompt, then its first greedy tokens. */
Test(engine_decode_tool, a_chat_prompt_goes_through_the_template)
{
    const char *args[] = {
        "-p", "What is the tallest mountain in the world?", "--chat", "-n", "4", "--json", NULL};
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 0, "exit status %d; stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "\"prompt_tokens\": [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, "
                            "3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, "
                            "4093, 198, 1780, 314, 260, 31469, 6740, 281, 260, 905, 47, 2, 198, 1, "
                            "520, 9531, 198]"),
              "%s", r.out);
    cr_assert(strstr(r.out, "\"tokens\": [504, 31469, 6740, 281]"), "%s", r.out);
    child_result_free(&r);
}

/* A full context ends generation, however many tokens -n asks for: 12
 * tokens hold the 5 of the prompt and 7 decoded ones, and the 8th comes
 * from the last logits. */
Test(engine_decode_tool, a_full_context_ends_generation)
{
    const char *args[] = {
        "-p", "The capital of France is", "-n", "100000000000", "--ctx", "12", "--json", NULL};
    child_result r = child_run(decode_exe(), args, NULL);
    cr_assert_eq(r.status, 0, "exit status %d; stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "\"tokens\": [7042, 30, 198, 198, 504, 1797, 1918, 553]"), "%s", r.out);
    cr_assert(strstr(r.out, "\"stop\": \"a full context\""), "%s", r.out);
    cr_assert_eq(json_number(r.out, "kv_live_bytes"), 12 * 23040);
    child_result_free(&r);
}

/* Sampling options reach the sampler: the same seed gives the same tokens. */
Test(engine_decode_tool, a_seeded_sample_repeats)
{
    const char *args[] = {"-p",
                          "Once upon a time",
                          "-n",
                          "12",
                          "--temp",
                          "0.9",
                          "--top-k",
                          "40",
                          "--top-p",
                          "0.95",
                          "--min-p",
                          "0.05",
                          "--repeat-penalty",
                          "1.1",
                          "--seed",
                          "7",
                          "--json",
                          NULL};
    child_result a = child_run(decode_exe(), args, NULL);
    child_result b = child_run(decode_exe(), args, NULL);
    cr_assert_eq(a.status, 0, "exit status %d; stderr: %s", a.status, a.err);
    cr_assert_eq(b.status, 0, "exit status %d; stderr: %s", b.status, b.err);
    const char *ta = strstr(a.out, "\"tokens\": ["), *tb = strstr(b.out, "\"tokens\": [");
    cr_assert(ta && tb);
    size_t la = strcspn(ta, "]"), lb = strcspn(tb, "]");
    cr_assert(la == lb && !strncmp(ta, tb, la), "%s\n%s", a.out, b.out);
    child_result_free(&a);
    child_result_free(&b);
}

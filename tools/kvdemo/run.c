/* One configuration: the workload on a fresh backend, its own authority and
 * a KV cache of one layout and strategy. Every appended token's K and V are
 * written through the binding descriptors (one byte per head row, a
 * function of the token, its position, the binding and the head) and a
 * sample of them is read back before a sequence goes, so a paging bug shows
 * as a corruption. With --io copy (device memory) the bytes go through the
 * backend's copies and a host staging buffer instead of stores: decode
 * tokens are written in batches (a sequence's pending tokens before its
 * bucket grows, before it is read back, and every KD_FLUSH_TOKENS), each
 * batch as few copies as the layout's rows allow, then one event. Every
 * backend call is charged to the request whose library call made it. */
#include "kvdemo.h"

#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (1024.0 * 1024.0)
#define KD_NOBODY SIZE_MAX                  /* calls outside any request's */
#define KD_FLUSH_TOKENS 64                  /* --io copy: decode tokens pending at most */
#define KD_STAGING_BYTES ((size_t)16 << 20) /* --io copy: a batch's tokens, about */

const ortmem_backend_op kd_call_ops[KD_CALL_OPS] = {
    ORTMEM_OP_CREATE, ORTMEM_OP_MAP, ORTMEM_OP_SET_ACCESS, ORTMEM_OP_UNMAP, ORTMEM_OP_RELEASE};

bool kd_call_is_handle(size_t op)
{
    return op < KD_CALL_OPS && kd_call_ops[op] != ORTMEM_OP_SET_ACCESS;
}

const char *kd_call_name(size_t op)
{
    static const char *const names[KD_CALL_OPS] = {"create", "map", "set_access", "unmap",
                                                   "release"};
    return op < KD_CALL_OPS ? names[op] : "?";
}

typedef struct kd_live {
    size_t request;
    ortmem_kv_seq *seq;
    uint64_t length;  /* tokens live, all written (--io copy: up to written) */
    uint64_t target;  /* prompt + gen */
    uint64_t shared;  /* tokens that came with the sequence (fork or prefix cache) */
    uint64_t written; /* --io copy: tokens [written, length) are not written yet */
    ortmem_kv_binding *bind;
    bool bound, finished;
} kd_live;

/* --io copy: one (binding, head)'s row starts of a batch of tokens, and
 * where they are in the staging buffer. */
typedef struct kd_span {
    uintptr_t start, end;
    uint32_t binding, head;
    size_t offset;
} kd_span;

/* A copy: overlapping or touching spans merged (rows of the batch only). */
typedef struct kd_run_span {
    uintptr_t start, end;
    size_t offset;
} kd_run_span;

typedef struct kd_state {
    const kd_options *o;
    const kd_workload *w;
    kd_result *r;
    ortmem_kv_geometry geo;
    uint32_t bindings; /* 2L: (layer, K|V) */
    ortmem_backend *backend;
    ortmem_authority *authority;
    ortmem_kv_cache *cache;
    kd_live holder; /* the system prompt's sequence; seq NULL when there is none */
    kd_live *live;
    size_t live_count;
    size_t *queue; /* request indices waiting, a ring */
    size_t queue_head, queue_len;
    uint64_t *generated;    /* per request, before a preemption */
    bool publish_dead;      /* publishing cannot work on this cache */
    bool published;         /* the system prompt has a prefix entry (at start) */
    bool admission_blocked; /* refused: wait until a request finishes */
    uint64_t rng;
    bool failed;
    /* the per-request accounting */
    uint64_t (*charged)[KD_CALL_OPS]; /* per request */
    uint64_t other[KD_CALL_OPS];      /* outside any request's library calls */
    uint64_t seen[KD_CALL_OPS];       /* the backend's calls[] at the last settle */
    size_t owner;                     /* KD_NOBODY or a request */
    /* --io copy */
    uint64_t chunk_tokens; /* tokens per batch */
    kd_span *spans;        /* bindings x heads */
    kd_run_span *runs;
    size_t run_count;
    uint8_t *staging, *mirror; /* mirror: a sequence's row bytes, [token][binding][head] */
    size_t staging_size, mirror_size;
} kd_state;

/* ---- failures ---- */

static void kd_fail(kd_state *s, ortmem_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kd_fail(kd_state *s, ortmem_status st, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = true;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(s->r->error, sizeof s->r->error, "%s: %s: %s", what, ortmem_status_str(st),
             ortmem_last_error());
}

static void kd_corrupt(kd_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void kd_corrupt(kd_state *s, const char *fmt, ...)
{
    if (s->r->corruptions++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->r->first_corruption, sizeof s->r->first_corruption, fmt, ap);
        va_end(ap);
    }
}

/* ---- the K/V pattern ---- */

static uint8_t kd_pattern(int32_t token, uint64_t position, uint32_t binding, uint32_t head)
{
    uint64_t x = (uint64_t)(uint32_t)token * 0x9E3779B97F4A7C15ULL;
    x ^= (position + 1) * 0xC2B2AE3D27D4EB4FULL;
    x ^= (((uint64_t)binding << 32) | head) * 0x165667B19E3779F9ULL;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 32;
    uint8_t v = (uint8_t)x;
    return v ? v : 0x5a; /* never 0: a granule that lost its bytes reads 0 */
}

static const int32_t *kd_tokens(const kd_state *s, const kd_live *lv)
{
    return lv == &s->holder ? s->w->system : s->w->requests[lv->request].tokens;
}

static const char *kd_who(const kd_state *s, const kd_live *lv, char *buf, size_t size)
{
    if (lv == &s->holder)
        snprintf(buf, size, "the system prompt's sequence");
    else
        snprintf(buf, size, "request %zu (%s)", lv->request,
                 kd_kind_name(s->w->requests[lv->request].kind));
    return buf;
}

/* Reads the binding descriptors again and checks their contract: a base or
 * stride that changed must come with a new generation (and never in a
 * stable cache), the capacity must hold the live tokens. */
static bool kd_bind(kd_state *s, kd_live *lv)
{
    char who[96];
    for (uint32_t b = 0; b < s->bindings; b++) {
        ortmem_kv_binding nb = {.struct_size = sizeof nb};
        ortmem_status st = ortmem_kv_seq_binding(lv->seq, b / 2, (int)(b % 2), &nb);
        if (st != ORTMEM_OK) {
            kd_fail(s, st, "binding %u of %s", b, kd_who(s, lv, who, sizeof who));
            return false;
        }
        if (!nb.base || nb.capacity < lv->length) {
            kd_corrupt(s,
                       "%s: binding %u has base %p and capacity %" PRIu64 " for %" PRIu64
                       " live tokens",
                       kd_who(s, lv, who, sizeof who), b, nb.base, nb.capacity, lv->length);
            return false;
        }
        if (lv->bound) {
            const ortmem_kv_binding *old = &lv->bind[b];
            bool moved = nb.base != old->base || nb.token_stride != old->token_stride ||
                         nb.head_stride != old->head_stride;
            if (moved != (nb.generation != old->generation))
                kd_corrupt(s, "%s: binding %u %s but its generation went %" PRIu64 " -> %" PRIu64,
                           kd_who(s, lv, who, sizeof who), b, moved ? "moved" : "did not move",
                           old->generation, nb.generation);
            else if (moved && s->r->strategy == ORTMEM_KV_STABLE)
                kd_corrupt(s, "%s: binding %u moved in a stable cache",
                           kd_who(s, lv, who, sizeof who), b);
            if (b == 0 && nb.generation != old->generation)
                s->r->generation_changes++;
        }
        lv->bind[b] = nb;
    }
    lv->bound = true;
    return true;
}

/* ---- the accounting ---- */

/* Charges the backend calls made since the last settle to the current owner,
 * then makes owner the current one. */
static void kd_charge(kd_state *s, size_t owner)
{
    if (!s->backend || !s->charged)
        return;
    ortmem_vmm_stats vs = {.struct_size = sizeof vs};
    ortmem_status st = ortmem_backend_stats(s->backend, &vs);
    if (st != ORTMEM_OK) {
        kd_fail(s, st, "backend stats");
        return;
    }
    uint64_t *to = s->owner == KD_NOBODY ? s->other : s->charged[s->owner];
    for (size_t k = 0; k < KD_CALL_OPS; k++) {
        uint64_t now = vs.calls[kd_call_ops[k]];
        to[k] += now - s->seen[k];
        s->seen[k] = now;
    }
    s->owner = owner;
}

/* After the last request: the warm-up (the first o->warmup requests and
 * what no request made) against the requests after it. total is the
 * backend's own count; the charges add up to it. */
static void kd_calls_finish(kd_state *s)
{
    kd_charge(s, KD_NOBODY);
    kd_calls *c = &s->r->calls;
    size_t n = s->w->count;
    size_t warm = s->o->warmup < n ? (size_t)s->o->warmup : n;
    c->warmup_requests = warm;
    c->after_requests = n - warm;
    for (size_t k = 0; k < KD_CALL_OPS; k++) {
        c->total[k] = s->seen[k];
        c->warmup[k] = s->other[k];
    }
    for (size_t i = 0; s->charged && i < n; i++) {
        uint64_t all = 0, handle = 0;
        for (size_t k = 0; k < KD_CALL_OPS; k++) {
            uint64_t v = s->charged[i][k];
            all += v;
            handle += kd_call_is_handle(k) ? v : 0;
            if (i < warm) {
                c->warmup[k] += v;
            } else {
                c->after[k] += v;
                if (v > c->max[k])
                    c->max[k] = v;
            }
        }
        if (i >= warm && all > c->max_all)
            c->max_all = all;
        if (i >= warm && handle > c->steady_max)
            c->steady_max = handle;
        if (i >= warm)
            c->steady_after += handle;
        if (i >= warm && handle == 0)
            c->steady_none++;
    }
    for (size_t k = 0; k < KD_CALL_OPS; k++) {
        c->total_all += c->total[k];
        c->warmup_all += c->warmup[k];
        c->after_all += c->after[k];
    }
}

/* ---- --io copy: K/V bytes through the backend's copies ---- */

static int kd_span_order(const void *a, const void *b)
{
    uintptr_t x = ((const kd_span *)a)->start, y = ((const kd_span *)b)->start;
    return x < y ? -1 : x > y;
}

/* Lays out tokens [c0, c1) of lv: a span per (binding, head), merged into
 * runs where they overlap or touch (one layout's rows interleave, another's
 * bindings share a token row: a run holds rows of these tokens only, so
 * writing it whole, zeros between the row starts, touches no other token).
 * Returns the staging bytes the runs need. */
static size_t kd_lay_out(kd_state *s, const kd_live *lv, uint64_t c0, uint64_t c1)
{
    size_t n = 0;
    for (uint32_t b = 0; b < s->bindings; b++) {
        const ortmem_kv_binding *k = &lv->bind[b];
        for (uint32_t h = 0; h < s->geo.kv_heads; h++) {
            uintptr_t a = (uintptr_t)k->base + h * k->head_stride + c0 * k->token_stride;
            s->spans[n++] = (kd_span){a, a + (c1 - 1 - c0) * k->token_stride + 1, b, h, 0};
        }
    }
    qsort(s->spans, n, sizeof *s->spans, kd_span_order);
    size_t runs = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        kd_span *sp = &s->spans[i];
        if (runs && sp->start <= s->runs[runs - 1].end) {
            kd_run_span *run = &s->runs[runs - 1];
            if (sp->end > run->end) {
                total += sp->end - run->end;
                run->end = sp->end;
            }
        } else {
            s->runs[runs++] = (kd_run_span){sp->start, sp->end, total};
            total += sp->end - sp->start;
        }
        const kd_run_span *run = &s->runs[runs - 1];
        sp->offset = run->offset + (sp->start - run->start);
    }
    s->run_count = runs;
    return total;
}

static bool kd_buffer(kd_state *s, uint8_t **buf, size_t *size, size_t need)
{
    if (need <= *size)
        return true;
    uint8_t *grown = realloc(*buf, need);
    if (!grown) {
        kd_fail(s, ORTMEM_E_NOMEM, "a host buffer of %zu bytes", need);
        return false;
    }
    *buf = grown;
    *size = need;
    return true;
}

/* Copies every run between the device and the staging buffer, then waits
 * for one event. */
static bool kd_copy_runs(kd_state *s, bool to_device)
{
    ortmem_status st = ORTMEM_OK;
    for (size_t i = 0; i < s->run_count && st == ORTMEM_OK; i++) {
        const kd_run_span *run = &s->runs[i];
        void *device = (void *)run->start;
        uint8_t *host = s->staging + run->offset;
        size_t len = (size_t)(run->end - run->start);
        st = to_device ? ortmem_backend_copy_async(s->backend, device, host, len, 0)
                       : ortmem_backend_copy_async(s->backend, host, device, len, 0);
    }
    s->r->copies += s->run_count;
    uint64_t event = 0;
    if (st == ORTMEM_OK)
        st = ortmem_backend_event_record(s->backend, 0, &event);
    if (st == ORTMEM_OK) {
        while ((st = ortmem_backend_event_query(s->backend, event)) == ORTMEM_E_BUSY)
            sched_yield();
        ortmem_status destroyed = ortmem_backend_event_destroy(s->backend, event);
        if (st == ORTMEM_OK)
            st = destroyed;
    }
    if (st != ORTMEM_OK)
        kd_fail(s, st, "%zu copies %s the device", s->run_count, to_device ? "to" : "from");
    return st == ORTMEM_OK;
}

/* Writes lv's pending tokens [written, length) through the staging buffer. */
static bool kd_flush(kd_state *s, kd_live *lv)
{
    if (!s->o->copy_io || lv->written >= lv->length || s->failed)
        return !s->failed;
    const int32_t *tokens = kd_tokens(s, lv);
    for (uint64_t c0 = lv->written, c1; c0 < lv->length; c0 = c1) {
        c1 = c0 + s->chunk_tokens < lv->length ? c0 + s->chunk_tokens : lv->length;
        size_t total = kd_lay_out(s, lv, c0, c1);
        if (!kd_buffer(s, &s->staging, &s->staging_size, total))
            return false;
        memset(s->staging, 0, total);
        for (size_t i = 0; i < s->bindings * (size_t)s->geo.kv_heads; i++) {
            const kd_span *sp = &s->spans[i];
            uint64_t stride = lv->bind[sp->binding].token_stride;
            for (uint64_t t = c0; t < c1; t++)
                s->staging[sp->offset + (t - c0) * stride] =
                    kd_pattern(tokens[t], t, sp->binding, sp->head);
        }
        if (!kd_copy_runs(s, true))
            return false;
    }
    s->r->tokens_written += lv->length - lv->written;
    lv->written = lv->length;
    return true;
}

/* Reads every row start of lv's live tokens into the mirror. */
static bool kd_fetch(kd_state *s, kd_live *lv)
{
    uint32_t heads = s->geo.kv_heads;
    if (!kd_buffer(s, &s->mirror, &s->mirror_size, lv->length * s->bindings * heads))
        return false;
    for (uint64_t c0 = 0, c1; c0 < lv->length; c0 = c1) {
        c1 = c0 + s->chunk_tokens < lv->length ? c0 + s->chunk_tokens : lv->length;
        size_t total = kd_lay_out(s, lv, c0, c1);
        if (!kd_buffer(s, &s->staging, &s->staging_size, total) || !kd_copy_runs(s, false))
            return false;
        for (size_t i = 0; i < s->bindings * (size_t)heads; i++) {
            const kd_span *sp = &s->spans[i];
            uint64_t stride = lv->bind[sp->binding].token_stride;
            for (uint64_t t = c0; t < c1; t++)
                s->mirror[(t * s->bindings + sp->binding) * heads + sp->head] =
                    s->staging[sp->offset + (t - c0) * stride];
        }
    }
    return true;
}

/* The byte at the start of token t's row of head h in binding b. */
static uint8_t kd_byte(const kd_state *s, const kd_live *lv, uint64_t t, uint32_t b, uint32_t h)
{
    if (s->o->copy_io)
        return s->mirror[(t * s->bindings + b) * s->geo.kv_heads + h];
    const ortmem_kv_binding *k = &lv->bind[b];
    return ((const uint8_t *)k->base)[t * k->token_stride + h * k->head_stride];
}

/* Writes tokens [from, to) of lv: one byte at the start of every head row.
 * --io copy: a prefill and the system prompt's sequence (forks share it) at
 * once, decode tokens in batches. */
static void kd_write(kd_state *s, kd_live *lv, uint64_t from, uint64_t to)
{
    if (s->o->copy_io) {
        if (lv == &s->holder || to - from > 1 || lv->length - lv->written >= KD_FLUSH_TOKENS)
            (void)kd_flush(s, lv);
        return;
    }
    const int32_t *tokens = kd_tokens(s, lv);
    uint32_t heads = s->geo.kv_heads;
    for (uint32_t b = 0; b < s->bindings; b++) {
        const ortmem_kv_binding *k = &lv->bind[b];
        for (uint64_t t = from; t < to; t++) {
            uint8_t *row = (uint8_t *)k->base + t * k->token_stride;
            for (uint32_t h = 0; h < heads; h++)
                row[h * k->head_stride] = kd_pattern(tokens[t], t, b, h);
        }
    }
    s->r->tokens_written += to - from;
}

static bool kd_check_token(kd_state *s, kd_live *lv, uint64_t t)
{
    const int32_t *tokens = kd_tokens(s, lv);
    for (uint32_t b = 0; b < s->bindings; b++) {
        for (uint32_t h = 0; h < s->geo.kv_heads; h++) {
            uint8_t want = kd_pattern(tokens[t], t, b, h);
            uint8_t got = kd_byte(s, lv, t, b, h);
            if (got != want) {
                char who[96];
                kd_corrupt(s,
                           "%s: token %" PRIu64 " of %" PRIu64 ", layer %u %s head %u reads "
                           "0x%02x, 0x%02x was written",
                           kd_who(s, lv, who, sizeof who), t, lv->length, b / 2, b % 2 ? "V" : "K",
                           h, got, want);
                return false;
            }
        }
    }
    return true;
}

/* Before a sequence goes: its first and last tokens, both sides of what it
 * shares, and a random sample of the rest. */
static void kd_verify(kd_state *s, kd_live *lv)
{
    if (!lv->length || !kd_bind(s, lv))
        return;
    if (s->o->copy_io && (!kd_flush(s, lv) || !kd_fetch(s, lv)))
        return;
    uint64_t fixed[4] = {0, lv->length - 1, lv->shared ? lv->shared - 1 : 0, lv->shared};
    uint64_t n = 0;
    for (size_t i = 0; i < 4; i++) {
        if (fixed[i] < lv->length) {
            n++;
            if (!kd_check_token(s, lv, fixed[i]))
                return;
        }
    }
    for (uint64_t i = 0; i < s->o->verify_samples; i++) {
        s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
        n++;
        if (!kd_check_token(s, lv, (s->rng >> 17) % lv->length))
            return;
    }
    s->r->tokens_verified += n;
}

/* ---- sequences ---- */

static bool kd_live_init(kd_state *s, kd_live *lv)
{
    memset(lv, 0, sizeof *lv);
    lv->bind = calloc(s->bindings, sizeof *lv->bind);
    return lv->bind != NULL;
}

static void kd_retire(kd_state *s, kd_live *lv)
{
    kd_verify(s, lv);
    ortmem_status st = ortmem_kv_seq_destroy(lv->seq);
    if (st != ORTMEM_OK)
        kd_fail(s, st, "destroying a sequence of %" PRIu64 " tokens", lv->length);
    lv->seq = NULL;
    lv->bound = false;
}

/* Appends n tokens to lv and writes them; ORTMEM_E_BUDGET is returned, any
 * other failure ends the run. */
static ortmem_status kd_grow(kd_state *s, kd_live *lv, uint64_t n)
{
    /* A bucket that grows copies what was written: write the pending first. */
    if (s->o->copy_io && lv->bound && lv->length + n > lv->bind[0].capacity && !kd_flush(s, lv))
        return ORTMEM_E_STATE;
    ortmem_status st = ortmem_kv_seq_append(lv->seq, n);
    if (st == ORTMEM_E_BUDGET)
        return st;
    if (st != ORTMEM_OK) {
        char who[96];
        kd_fail(s, st, "append of %" PRIu64 " tokens to %s at %" PRIu64, n,
                kd_who(s, lv, who, sizeof who), lv->length);
        return st;
    }
    uint64_t from = lv->length;
    lv->length += n;
    if (kd_bind(s, lv))
        kd_write(s, lv, from, lv->length);
    return ORTMEM_OK;
}

/* The system prompt's sequence; published to the prefix cache when there is
 * one. A refusal leaves the workload without it (forks prefill instead). */
static void kd_make_holder(kd_state *s)
{
    kd_result *r = s->r;
    kd_charge(s, KD_NOBODY);
    if (!s->w->system_tokens)
        return;
    ortmem_status st = ortmem_kv_seq_create(s->cache, &s->holder.seq);
    if (st == ORTMEM_OK) {
        st = kd_grow(s, &s->holder, s->w->system_tokens);
        if (st != ORTMEM_OK) {
            (void)ortmem_kv_seq_destroy(s->holder.seq);
            s->holder.seq = NULL;
            s->holder.length = 0;
        }
    }
    if (st == ORTMEM_E_BUDGET) {
        snprintf(r->prefix_note, sizeof r->prefix_note,
                 "the system prompt's sequence was refused (%s): forks prefill instead",
                 ortmem_last_error());
        return;
    }
    if (st != ORTMEM_OK) {
        kd_fail(s, st, "the system prompt's sequence");
        return;
    }
    if (!r->prefix_cache)
        return;
    st = ortmem_kv_seq_publish(s->holder.seq, s->w->system, s->w->system_tokens);
    if (st == ORTMEM_OK) {
        s->published = true;
        snprintf(r->prefix_note, sizeof r->prefix_note,
                 "the system prompt (%" PRIu64 " tokens) is published", s->w->system_tokens);
    } else {
        snprintf(r->prefix_note, sizeof r->prefix_note, "publishing the system prompt: %s",
                 ortmem_last_error());
        s->publish_dead = st != ORTMEM_E_BUDGET;
    }
}

/* What an engine does at start-up with warm ranges: a range per request of
 * the batch of each kind it serves (plain; forks of the system prompt's
 * sequence; the published system prompt), each committed for the longest
 * request, so that no request after it makes a create, map, unmap or
 * release: neither a cold start (a new peak of a kind's concurrency) nor
 * growth past a range's committed granules. Charged to the warm-up. A
 * refusal (the budget) is noted and the run goes on without. */
static void kd_prewarm(kd_state *s)
{
    kd_result *r = s->r;
    const kd_options *o = s->o;
    if (!o->warm || !o->prewarm || r->strategy != ORTMEM_KV_STABLE || s->failed)
        return;
    uint64_t longest = o->prompt_max > o->system_tokens + o->prompt_min
                           ? o->prompt_max
                           : o->system_tokens + o->prompt_min;
    longest += o->gen_max;
    if (longest > o->max_context)
        longest = o->max_context;
    uint32_t count = (uint32_t)o->batch;
    const char *kinds[3] = {"plain", "fork", "prefix"};
    ortmem_status st[3] = {ORTMEM_OK, ORTMEM_OK, ORTMEM_OK};
    bool tried[3] = {true, s->holder.seq != NULL, s->published};
    char why[3][300] = {"", "", ""};
    st[0] = ortmem_kv_cache_prewarm(s->cache, count, longest);
    if (st[0] != ORTMEM_OK)
        snprintf(why[0], sizeof why[0], "%s", ortmem_last_error());
    if (tried[1] &&
        (st[1] = ortmem_kv_seq_prewarm_forks(s->holder.seq, count, longest)) != ORTMEM_OK)
        snprintf(why[1], sizeof why[1], "%s", ortmem_last_error());
    if (tried[2] && (st[2] = ortmem_kv_cache_prewarm_prompt(
                         s->cache, s->w->system, s->w->system_tokens, count, longest)) != ORTMEM_OK)
        snprintf(why[2], sizeof why[2], "%s", ortmem_last_error());
    ortmem_kv_stats ks = {.struct_size = sizeof ks};
    if (ortmem_kv_cache_stats(s->cache, &ks) == ORTMEM_OK)
        r->prewarmed = ks.warm_prewarmed;
    size_t used = (size_t)snprintf(
        r->prewarm_note, sizeof r->prewarm_note,
        "pre-warmed %" PRIu64 " ranges of %" PRIu64 " tokens:", r->prewarmed, longest);
    for (int k = 0; k < 3 && used < sizeof r->prewarm_note; k++) {
        if (!tried[k])
            continue;
        used += (size_t)snprintf(r->prewarm_note + used, sizeof r->prewarm_note - used, " %s %s%s",
                                 kinds[k], st[k] == ORTMEM_OK ? "yes" : "refused: ", why[k]);
    }
    for (int k = 0; k < 3; k++) {
        /* The budget, the list's bounds, or a prefix entry that pressure
         * evicted meanwhile: the run goes on without those ranges. */
        if (st[k] != ORTMEM_OK && st[k] != ORTMEM_E_BUDGET && st[k] != ORTMEM_E_RANGE &&
            st[k] != ORTMEM_E_NOT_FOUND) {
            kd_fail(s, st[k], "prewarm of %s ranges (%s)", kinds[k], why[k]);
            return;
        }
    }
}

typedef enum kd_outcome { KD_ADMITTED, KD_WAIT, KD_FAILED } kd_outcome;

/* --inject-corruption: what a paging bug would do to the first byte. */
static void kd_inject(kd_state *s, kd_live *lv)
{
    uint8_t *first = lv->bind[0].base;
    if (!s->o->copy_io) {
        *first = (uint8_t)(*first ^ 0xff);
        return;
    }
    uint8_t byte = 0;
    if (!kd_flush(s, lv))
        return;
    ortmem_status st = ortmem_backend_copy(s->backend, &byte, first, 1);
    byte ^= 0xff;
    if (st == ORTMEM_OK)
        st = ortmem_backend_copy(s->backend, first, &byte, 1);
    s->r->copies += 2;
    if (st != ORTMEM_OK)
        kd_fail(s, st, "injecting a corruption");
}

/* Starts request i (again, after a preemption: its prompt then includes what
 * it had generated). */
static kd_outcome kd_admit_one(kd_state *s, size_t i)
{
    const kd_request *q = &s->w->requests[i];
    kd_live *lv = &s->live[s->live_count];
    kd_charge(s, i);
    lv->request = i;
    lv->length = lv->shared = lv->written = 0;
    lv->bound = false;
    lv->target = q->prompt + q->gen;
    uint64_t start = q->prompt + s->generated[i];
    ortmem_status st;
    const char *how = "create";
    if (q->kind == KD_FORK && s->holder.seq) {
        how = "fork";
        st = ortmem_kv_seq_fork(s->holder.seq, &lv->seq);
        if (st == ORTMEM_OK)
            lv->shared = s->holder.length;
    } else if (q->kind == KD_PREFIX) {
        uint64_t reused = 0;
        how = "create with prompt";
        st = ortmem_kv_seq_create_with_prompt(s->cache, q->tokens, start, &lv->seq, &reused);
        if (st == ORTMEM_OK)
            lv->shared = reused;
    } else {
        st = ortmem_kv_seq_create(s->cache, &lv->seq);
    }
    if (st == ORTMEM_E_BUDGET)
        return KD_WAIT;
    if (st != ORTMEM_OK) {
        kd_fail(s, st, "%s for request %zu", how, i);
        return KD_FAILED;
    }
    lv->length = lv->written = lv->shared; /* the shared tokens were written */
    if (lv->shared && !kd_bind(s, lv)) {
        (void)ortmem_kv_seq_destroy(lv->seq);
        lv->seq = NULL;
        return KD_FAILED;
    }
    st = start > lv->length ? kd_grow(s, lv, start - lv->length) : ORTMEM_OK;
    if (st != ORTMEM_OK) {
        (void)ortmem_kv_seq_destroy(lv->seq);
        lv->seq = NULL;
        return st == ORTMEM_E_BUDGET ? KD_WAIT : KD_FAILED;
    }
    if (s->o->inject_corruption && i == 0 && s->generated[i] == 0 && lv->length)
        kd_inject(s, lv);
    if (q->kind == KD_PREFIX && lv->shared == 0) {
        s->r->prefix_misses++;
        /* The entry went under pressure (or was refused): offer it again. */
        if (s->r->prefix_cache && !s->publish_dead && s->holder.seq) {
            st = ortmem_kv_seq_publish(s->holder.seq, s->w->system, s->w->system_tokens);
            if (st != ORTMEM_OK && st != ORTMEM_E_BUDGET) {
                snprintf(s->r->prefix_note, sizeof s->r->prefix_note,
                         "publishing the system prompt again: %s", ortmem_last_error());
                s->publish_dead = true;
            }
        }
    }
    s->live_count++;
    return KD_ADMITTED;
}

static void kd_queue_push_front(kd_state *s, size_t i)
{
    s->queue_head = (s->queue_head + s->w->count - 1) % s->w->count;
    s->queue[s->queue_head] = i;
    s->queue_len++;
}

static size_t kd_queue_pop(kd_state *s)
{
    size_t i = s->queue[s->queue_head];
    s->queue_head = (s->queue_head + 1) % s->w->count;
    s->queue_len--;
    return i;
}

/* Admits waiting requests while fewer than batch are live. A request the
 * budget refuses waits until another finishes; with none live it can never
 * fit and is dropped. */
static void kd_admit(kd_state *s)
{
    if (s->live_count == 0)
        s->admission_blocked = false;
    while (!s->failed && !s->admission_blocked && s->queue_len && s->live_count < s->o->batch) {
        size_t i = kd_queue_pop(s);
        kd_outcome one = kd_admit_one(s, i);
        if (one == KD_ADMITTED)
            continue;
        if (one == KD_FAILED)
            return;
        if (s->live_count == 0) {
            s->r->dropped++;
            continue;
        }
        s->r->admission_waits++;
        s->admission_blocked = true;
        kd_queue_push_front(s, i);
    }
}

/* One decode step: a token for every live sequence. A sequence the budget
 * refuses a token is preempted at once, so the others may grow (its request
 * waits to be prefilled again), unless it is the only one: then it can never
 * finish and is dropped. The finished ones stay until the step is sampled. */
static void kd_decode(kd_state *s)
{
    size_t kept = 0;
    for (size_t k = 0; k < s->live_count; k++) {
        kd_live *lv = &s->live[k];
        kd_charge(s, lv->request);
        ortmem_status st = s->failed ? ORTMEM_OK : kd_grow(s, lv, 1);
        bool gone = s->failed;
        if (st == ORTMEM_E_BUDGET) {
            const kd_request *q = &s->w->requests[lv->request];
            s->generated[lv->request] = lv->length - q->prompt;
            if (s->live_count == 1) {
                s->r->dropped++;
                s->admission_blocked = false;
            } else {
                s->r->preemptions++;
                s->admission_blocked = true; /* memory is short: admit after a finish */
                kd_queue_push_front(s, lv->request);
            }
            gone = true;
        }
        lv->finished = !gone && lv->length == lv->target;
        if (gone) {
            kd_retire(s, lv);
        } else if (kept != k) {
            kd_live tmp = s->live[kept];
            s->live[kept] = *lv;
            *lv = tmp;
        }
        kept += !gone;
    }
    s->live_count = kept;
}

/* After the step's sample: the finished sequences go, and their memory may
 * admit a waiting request. */
static void kd_finish(kd_state *s)
{
    size_t kept = 0;
    for (size_t k = 0; k < s->live_count; k++) {
        kd_live *lv = &s->live[k];
        if (lv->finished) {
            kd_charge(s, lv->request);
            s->r->completed++;
            s->admission_blocked = false;
            lv->finished = false;
            kd_retire(s, lv);
        } else {
            if (kept != k) {
                kd_live tmp = s->live[kept];
                s->live[kept] = *lv;
                *lv = tmp;
            }
            kept++;
        }
    }
    s->live_count = kept;
}

/* ---- the timeline ---- */

static void kd_sample_now(kd_state *s, uint64_t step)
{
    kd_result *r = s->r;
    ortmem_kv_stats st = {.struct_size = sizeof st};
    ortmem_status rc = ortmem_kv_cache_stats(s->cache, &st);
    if (rc != ORTMEM_OK) {
        kd_fail(s, rc, "cache stats at step %" PRIu64, step);
        return;
    }
    if (r->sample_count == r->sample_capacity) {
        size_t cap = r->sample_capacity ? r->sample_capacity * 2 : 1024;
        kd_sample *grown = realloc(r->samples, cap * sizeof *grown);
        if (!grown) {
            kd_fail(s, ORTMEM_E_NOMEM, "timeline of %zu rows", cap);
            return;
        }
        r->samples = grown;
        r->sample_capacity = cap;
    }
    /* The system prompt in forks and prefix requests is the holder's. */
    uint64_t repeated = 0;
    for (size_t k = 0; s->holder.seq && k < s->live_count; k++) {
        const kd_live *lv = &s->live[k];
        if (s->w->requests[lv->request].kind != KD_PLAIN)
            repeated += lv->length < s->w->system_tokens ? lv->length : s->w->system_tokens;
    }
    uint64_t bpt = st.live_tokens ? st.live_bytes / st.live_tokens : 0;
    uint64_t unique = st.live_bytes > repeated * bpt ? st.live_bytes - repeated * bpt : 0;
    r->samples[r->sample_count++] =
        (kd_sample){step, st.sequences, st.live_tokens, st.live_bytes, unique, st.committed_bytes};
    if (unique > r->peak_unique)
        r->peak_unique = unique;
    if (st.committed_bytes > r->peak_committed) {
        r->peak_committed = st.committed_bytes;
        r->shared_granules_at_peak = st.shared_granules;
        r->peak_step = step;
    }
    if (st.live_bytes > r->peak_live)
        r->peak_live = st.live_bytes;
}

static void kd_progress(kd_state *s, FILE *out, uint64_t step)
{
    const kd_sample *x = &s->r->samples[s->r->sample_count - 1];
    fprintf(out,
            "  step %5" PRIu64 "  live %2" PRIu64 " seqs %6" PRIu64
            " tokens  committed %8.1f MiB  live %7.1f MiB  efficiency %5.1f%%\n",
            step, x->sequences, x->live_tokens, x->committed_bytes / MiB, x->live_bytes / MiB,
            x->committed_bytes ? 100.0 * (double)x->live_bytes / (double)x->committed_bytes : 0.0);
}

/* ---- one configuration ---- */

static double kd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What an auto cache would choose on this layout for this workload. */
static void kd_explain_auto(kd_state *s, const ortmem_kv_cache_options *base)
{
    ortmem_kv_cache_options ao = *base;
    ao.strategy = ORTMEM_KV_AUTO;
    ao.prefix_cache = 0;
    ao.expected_tokens = s->w->expected_tokens;
    ortmem_kv_cache *auto_cache = NULL;
    ortmem_status st = ortmem_kv_cache_create(s->authority, &ao, &auto_cache);
    if (st == ORTMEM_OK)
        st = ortmem_kv_cache_explain(auto_cache, &s->r->auto_strategy, s->r->explain,
                                     sizeof s->r->explain);
    if (st != ORTMEM_OK)
        snprintf(s->r->explain, sizeof s->r->explain, "(no auto cache: %s)", ortmem_last_error());
    if (auto_cache)
        (void)ortmem_kv_cache_destroy(auto_cache);
}

static char *kd_ledger(ortmem_authority *a, ortmem_report_format format)
{
    size_t needed = 0;
    char probe[1];
    ortmem_status st = ortmem_authority_format(a, format, probe, sizeof probe, &needed);
    if (st != ORTMEM_OK && st != ORTMEM_E_RANGE)
        return NULL;
    char *text = malloc(needed + 1);
    if (text && ortmem_authority_format(a, format, text, needed + 1, &needed) != ORTMEM_OK) {
        free(text);
        text = NULL;
    }
    return text;
}

ortmem_status kd_backend_create(const kd_options *o, ortmem_backend **out)
{
    if (o->backend == KD_BACKEND_CUDA) {
        ortmem_cuda_options co = ORTMEM_CUDA_OPTIONS_INIT;
        co.ordinal = (int)o->device;
        co.granule = (size_t)o->granule;
        return ortmem_cuda_backend_create(&co, out);
    }
    ortmem_cpu_options co = ORTMEM_CPU_OPTIONS_INIT;
    co.granule = (size_t)o->granule;
    return ortmem_cpu_backend_create(&co, out);
}

const char *kd_backend_label(const kd_options *o, char *buf, size_t size)
{
    if (o->backend == KD_BACKEND_CUDA)
        snprintf(buf, size, "the CUDA backend (device %" PRIu64 ")", o->device);
    else
        snprintf(buf, size, "the CPU backend");
    return buf;
}

static bool kd_setup(kd_state *s, const ortmem_kv_geometry *geometry, ortmem_kv_layout layout)
{
    kd_result *r = s->r;
    s->owner = KD_NOBODY;
    ortmem_status st = kd_backend_create(s->o, &s->backend);
    if (st == ORTMEM_OK) {
        ortmem_authority_options ao = ORTMEM_AUTHORITY_OPTIONS_INIT;
        ao.limit_bytes = s->o->budget;
        st = ortmem_authority_create(s->backend, &ao, &s->authority);
    }
    if (st != ORTMEM_OK) {
        kd_fail(s, st, "backend and authority");
        return false;
    }
    s->geo = *geometry;
    s->geo.layout = layout;
    s->geo.granule = 0; /* the backend's */
    ortmem_kv_cache_options opt = ORTMEM_KV_CACHE_OPTIONS_INIT;
    opt.geometry = s->geo;
    opt.strategy = r->strategy;
    opt.max_context = s->o->max_context;
    opt.max_sequences = (uint32_t)(s->o->batch + 1); /* and the system prompt's */
    /* Warm ranges: a range per live request of each kind (plain, fork,
     * prefix) can wait on the list; the budget bounds them through
     * pressure. --warm off: every finished range is decommitted. */
    opt.warm_max_bytes = s->o->warm ? ORTMEM_KV_WARM_UNLIMITED : 0;
    opt.warm_max_ranges = (uint32_t)(3 * s->o->batch);
    kd_explain_auto(s, &opt);
    /* The prefix cache where the library takes one; where it does not, its
     * reason is the note. */
    opt.prefix_cache = 1;
    st = ortmem_kv_cache_create(s->authority, &opt, &s->cache);
    if (st == ORTMEM_E_UNSUPPORTED) {
        snprintf(r->prefix_note, sizeof r->prefix_note, "no prefix cache: %s", ortmem_last_error());
        opt.prefix_cache = 0;
        st = ortmem_kv_cache_create(s->authority, &opt, &s->cache);
    } else {
        r->prefix_cache = st == ORTMEM_OK;
    }
    if (st != ORTMEM_OK) {
        kd_fail(s, st, "kv cache (%s, %s)", ortmem_kv_layout_name(layout),
                ortmem_kv_strategy_name(r->strategy));
        return false;
    }
    s->geo.granule = s->o->granule;
    s->bindings = 2 * s->geo.layers;
    s->live = calloc(s->o->batch, sizeof *s->live);
    s->queue = calloc(s->w->count, sizeof *s->queue);
    s->generated = calloc(s->w->count, sizeof *s->generated);
    s->charged = calloc(s->w->count, sizeof *s->charged);
    size_t rows = (size_t)s->bindings * s->geo.kv_heads;
    s->spans = calloc(rows, sizeof *s->spans);
    s->runs = calloc(rows, sizeof *s->runs);
    ortmem_kv_eval e = {.struct_size = sizeof e};
    (void)ortmem_kv_evaluate(&s->geo, 1, s->o->max_context, 1, 0, 0, &e);
    s->chunk_tokens = e.bytes_per_token && KD_STAGING_BYTES / e.bytes_per_token > 1
                          ? KD_STAGING_BYTES / e.bytes_per_token
                          : 1;
    bool ok = s->live && s->queue && s->generated && s->charged && s->spans && s->runs &&
              kd_live_init(s, &s->holder);
    for (uint64_t k = 0; ok && k < s->o->batch; k++)
        ok = kd_live_init(s, &s->live[k]);
    if (!ok) {
        kd_fail(s, ORTMEM_E_NOMEM, "bookkeeping for %" PRIu64 " sequences", s->o->batch);
        return false;
    }
    for (size_t i = 0; i < s->w->count; i++)
        s->queue[i] = i;
    s->queue_len = s->w->count;
    return true;
}

static void kd_teardown(kd_state *s)
{
    kd_result *r = s->r;
    for (size_t k = 0; k < s->live_count; k++)
        kd_retire(s, &s->live[k]);
    s->live_count = 0;
    if (s->holder.seq)
        kd_retire(s, &s->holder);
    if (s->cache) {
        ortmem_kv_stats st = {.struct_size = sizeof st};
        if (ortmem_kv_cache_stats(s->cache, &st) == ORTMEM_OK)
            r->stats = st;
    }
    if (s->authority) {
        ortmem_authority_report ar = {.struct_size = sizeof ar};
        if (ortmem_authority_report_get(s->authority, &ar, NULL, 0) == ORTMEM_OK) {
            r->budget_refusals = ar.refusals;
            r->ledger_peak_owned = ar.owned_peak_bytes;
        }
        /* After the workload, with the prefix cache still holding its
         * entries: each holder's peak is in the table. */
        r->ledger_table = kd_ledger(s->authority, ORTMEM_REPORT_TABLE);
        r->ledger_json = kd_ledger(s->authority, ORTMEM_REPORT_JSON);
    }
    ortmem_status st;
    if (s->cache && (st = ortmem_kv_cache_destroy(s->cache)) != ORTMEM_OK)
        kd_fail(s, st, "kv cache destroy");
    if (s->authority && (st = ortmem_authority_destroy(s->authority)) != ORTMEM_OK)
        kd_fail(s, st, "authority destroy");
    if (s->backend && (st = ortmem_backend_destroy(s->backend)) != ORTMEM_OK)
        kd_fail(s, st, "backend destroy");
    for (uint64_t k = 0; s->live && k < s->o->batch; k++)
        free(s->live[k].bind);
    free(s->live);
    free(s->holder.bind);
    free(s->queue);
    free(s->generated);
    free(s->charged);
    free(s->spans);
    free(s->runs);
    free(s->staging);
    free(s->mirror);
}

bool kd_run(const kd_options *o, const ortmem_kv_geometry *geometry, const kd_workload *w,
            ortmem_kv_layout layout, ortmem_kv_strategy strategy, FILE *progress, kd_result *r)
{
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->strategy = strategy;
    kd_state s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.w = w;
    s.r = r;
    s.rng = o->seed ^ 0x5851F42D4C957F2DULL;
    double t0 = kd_now();
    if (progress) {
        ortmem_kv_geometry g = *geometry;
        g.layout = layout;
        g.granule = o->granule;
        ortmem_kv_eval e = {.struct_size = sizeof e};
        (void)ortmem_kv_evaluate(&g, 1, o->max_context, 1, 0, 0, &e);
        fprintf(progress,
                "\n%s, %s: %" PRIu64 " fragment%s of %" PRIu64
                " bytes per token, crossover %" PRIu64
                " tokens;\n  a sequence commits at least %.0f MiB (%s)\n",
                ortmem_kv_layout_name(layout), ortmem_kv_strategy_name(strategy), e.fragments,
                e.fragments == 1 ? "" : "s", e.contiguous_bytes_per_token, e.crossover_tokens,
                (strategy == ORTMEM_KV_STABLE ? e.committed_bytes : e.bucket_committed_bytes) / MiB,
                strategy == ORTMEM_KV_STABLE ? "the granules the fragments start in, at any context"
                                             : "its smallest bucket, 256 tokens");
    }
    bool started = kd_setup(&s, geometry, layout);
    if (started) {
        if (progress && r->prefix_note[0] == '\0' && !r->prefix_cache)
            fprintf(progress, "  (no prefix cache)\n");
        kd_make_holder(&s);
        if (progress && r->prefix_note[0])
            kd_put_wrapped(progress, r->prefix_note, 2, 98);
        kd_prewarm(&s);
        if (progress && r->prewarm_note[0])
            kd_put_wrapped(progress, r->prewarm_note, 2, 98);
        if (!s.failed)
            kd_sample_now(&s, 0);
        uint64_t every = w->steps >= 10 ? w->steps / 10 : 1;
        uint64_t limit = 100 * w->steps + 1000; /* preemptions cost steps; a loop does not end */
        uint64_t step = 0;
        while (!s.failed && (s.queue_len || s.live_count)) {
            if (++step > limit) {
                kd_fail(&s, ORTMEM_E_STATE, "no end after %" PRIu64 " steps", limit);
                break;
            }
            kd_admit(&s);
            kd_decode(&s);
            kd_charge(&s, KD_NOBODY);
            kd_sample_now(&s, step);
            kd_finish(&s);
            kd_charge(&s, KD_NOBODY);
            if (progress && !s.failed && (step % every == 0 || !(s.queue_len || s.live_count)))
                kd_progress(&s, progress, step);
        }
        r->steps = step;
        double sum = 0;
        size_t n = 0;
        for (size_t i = 1; i < r->sample_count; i++) {
            if (r->samples[i].committed_bytes) {
                sum += (double)r->samples[i].live_bytes / (double)r->samples[i].committed_bytes;
                n++;
            }
        }
        r->mean_efficiency = n ? sum / (double)n : 0.0;
        kd_calls_finish(&s);
    }
    kd_teardown(&s);
    r->seconds = kd_now() - t0;
    if (progress) {
        if (r->error[0])
            fprintf(progress, "  FAILED: %s\n", r->error);
        if (r->corruptions)
            fprintf(progress, "  CORRUPTION (%" PRIu64 "): %s\n", r->corruptions,
                    r->first_corruption);
        fprintf(progress,
                "  %" PRIu64 " requests done in %" PRIu64 " steps, %.2f s; peak committed %.1f "
                "MiB at step %" PRIu64 "\n",
                r->completed, r->steps, r->seconds, r->peak_committed / MiB, r->peak_step);
        const kd_calls *c = &r->calls;
        if (started)
            fprintf(progress,
                    "  backend calls (create, map, set-access, unmap, release): %" PRIu64
                    ", %" PRIu64 " in the warm-up (%" PRIu64 " requests), then %.1f per "
                    "request (max %" PRIu64 ")\n"
                    "  steady state: %.1f calls per request (create, map, unmap, release; max "
                    "%" PRIu64 "; %" PRIu64 " of %" PRIu64 " requests made none); warm ranges: "
                    "%" PRIu64 " hits, %" PRIu64 " misses\n",
                    c->total_all, c->warmup_all, c->warmup_requests,
                    c->after_requests ? (double)c->after_all / (double)c->after_requests : 0.0,
                    c->max_all,
                    c->after_requests ? (double)c->steady_after / (double)c->after_requests : 0.0,
                    c->steady_max, c->steady_none, c->after_requests, r->stats.warm_hits,
                    r->stats.warm_misses);
        if (r->admission_waits || r->preemptions || r->dropped)
            fprintf(progress,
                    "  budget: %" PRIu64 " admissions waited, %" PRIu64 " preemptions, %" PRIu64
                    " requests dropped (they cannot fit alone)\n",
                    r->admission_waits, r->preemptions, r->dropped);
    }
    return started;
}

void kd_result_free(kd_result *r)
{
    free(r->samples);
    free(r->ledger_table);
    free(r->ledger_json);
    r->samples = NULL;
    r->ledger_table = r->ledger_json = NULL;
}

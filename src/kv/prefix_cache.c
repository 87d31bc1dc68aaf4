/* The prefix cache: published prefixes keep their whole granules mapped in a
 * region of their own, charged to the reclaimable "kv-prefix" holder. A new
 * sequence whose prompt starts with one maps those granules instead of
 * recomputing them. Under pressure, unreferenced prefixes go first, least
 * recently used first. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kv/kv.h"

static uint64_t om_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

uint64_t om_prefix_block_tokens(const ortmem_kv_cache *c)
{
    return c->geometry.granule / om_gcd(c->geometry.granule, c->contig);
}

/* ---- sharing over extents ---- */

/* Shares src's granules [first, first + count) into dst read-only. */
static ortmem_status om_share_run(ortmem_kv_cache *c, ortmem_region *dst, ortmem_region *src,
                                  size_t first, size_t count, uint64_t *whole)
{
    if (!count)
        return ORTMEM_OK;
    uint64_t g = c->geometry.granule;
    ortmem_status st = ortmem_region_share(dst, (size_t)(first * g), src, (size_t)(first * g),
                                           (size_t)(count * g), ORTMEM_ACCESS_READ);
    *whole += st == ORTMEM_OK ? count : 0;
    return st;
}

/* Commits the marked granules of dst in exact extents (runs cut in pieces of
 * at most the policy's cap) and copies their live bytes from src on the
 * cache's stream; *copied gets the bytes. */
static ortmem_status om_copy_private(ortmem_kv_cache *c, ortmem_region *dst, ortmem_region *src,
                                     uint64_t cap, uint64_t tokens, const bool *copy,
                                     size_t granules, uint64_t *copied)
{
    uint64_t g = c->geometry.granule;
    ortmem_range *runs = om_calloc(granules ? granules : 1, sizeof *runs);
    if (!runs)
        return OM_ERR(ORTMEM_E_NOMEM, "kv share: bookkeeping for %zu granules", granules);
    size_t n = 0;
    for (size_t k = 0; k < granules; k++) {
        if (!copy[k])
            continue;
        if (n && runs[n - 1].offset + runs[n - 1].length == k * g)
            runs[n - 1].length += (size_t)g;
        else
            runs[n++] = (ortmem_range){(size_t)(k * g), (size_t)g};
    }
    ortmem_status st = om_kv_commit_exact(dst, runs, n, om_kv_extent_cap_bytes(c));
    om_free(runs);
    /* Only the live bytes: a whole-granule copy would read (and fault in)
     * pages nobody wrote. */
    uint8_t *to = ortmem_region_base(dst), *from = ortmem_region_base(src);
    *copied = 0;
    for (uint64_t f = 0; st == ORTMEM_OK && n && f < c->fragments; f++) {
        uint64_t off, len;
        st = om_kv_fragment(c, cap, f, &off, &len);
        uint64_t end = off + tokens * c->contig;
        for (uint64_t k = off / g; st == ORTMEM_OK && k < granules && k * g < end; k++) {
            if (!copy[k])
                continue;
            uint64_t lo = k * g > off ? k * g : off;
            uint64_t hi = (k + 1) * g < end ? (k + 1) * g : end;
            st = ortmem_backend_copy_async(c->backend, to + lo, from + lo, (size_t)(hi - lo),
                                           c->stream);
            *copied += st == ORTMEM_OK ? hi - lo : 0;
        }
    }
    if (*copied) {
        ortmem_status wait = om_kv_stream_wait(c->backend, c->stream);
        st = st == ORTMEM_OK ? wait : st;
    }
    return st;
}

ortmem_status om_kv_share_prefix(ortmem_kv_cache *c, ortmem_region *dst, ortmem_region *src,
                                 uint64_t cap, uint64_t tokens, bool copy_partial, uint64_t *shared)
{
    uint64_t g = c->geometry.granule;
    size_t granules = ortmem_region_size(src) / g;
    uint64_t *live = om_calloc(granules ? granules : 1, sizeof *live);
    bool *copy = om_calloc(granules ? granules : 1, sizeof *copy);
    if (!live || !copy) {
        om_free(live);
        om_free(copy);
        return OM_ERR(ORTMEM_E_NOMEM, "kv share: bookkeeping for %zu granules", granules);
    }
    ortmem_status st = om_kv_live_bytes_per_granule(c, cap, tokens, live, granules);
    /* Maximal runs of whole source extents whose every granule is wholly
     * live are mapped (read-only, owned once); the live granules of an
     * extent the live end cuts are committed here and copied. */
    uint64_t whole = 0;
    size_t run_first = 0, run_count = 0, to_copy = 0;
    for (size_t k = 0; st == ORTMEM_OK && k < granules;) {
        if (!live[k]) {
            k++;
            continue;
        }
        ortmem_granule_info info = {.struct_size = sizeof info};
        st = ortmem_region_granule_info(src, k * g, &info);
        if (st != ORTMEM_OK)
            break;
        size_t first = k, count = 1; /* an unmapped granule: share refuses it, naming it */
        if (info.state == ORTMEM_GRANULE_MAPPED && info.extent_granules) {
            first = info.extent_offset / g;
            count = info.extent_granules;
        }
        bool wholly_live = first == k && first + count <= granules;
        for (size_t j = first; wholly_live && j < first + count; j++)
            wholly_live = live[j] == g;
        if (wholly_live && run_first + run_count == first) {
            run_count += count;
        } else {
            st = om_share_run(c, dst, src, run_first, run_count, &whole);
            run_first = first;
            run_count = wholly_live ? count : 0;
        }
        for (size_t j = k; !wholly_live && j < first + count && j < granules; j++) {
            copy[j] = live[j] != 0;
            to_copy += copy[j];
        }
        k = first + count > k ? first + count : k + 1;
    }
    if (st == ORTMEM_OK)
        st = om_share_run(c, dst, src, run_first, run_count, &whole);
    if (st == ORTMEM_OK && copy_partial && to_copy) {
        uint64_t copied = 0;
        st = om_copy_private(c, dst, src, cap, tokens, copy, granules, &copied);
        if (st == ORTMEM_OK) {
            pthread_mutex_lock(&c->lock);
            c->cow_copied += copied;
            pthread_mutex_unlock(&c->lock);
        }
    }
    om_free(live);
    om_free(copy);
    if (shared)
        *shared = whole;
    return st;
}

static uint64_t om_hash(const int32_t *tokens, uint64_t count)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the token bytes */
    const unsigned char *p = (const unsigned char *)tokens;
    for (uint64_t i = 0; i < count * sizeof *tokens; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Caller holds the cache lock. */
static void om_lru_unlink(ortmem_kv_cache *c, om_prefix *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        c->lru_head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        c->lru_tail = p->prev;
    p->prev = p->next = NULL;
}

static void om_lru_append(ortmem_kv_cache *c, om_prefix *p)
{
    p->prev = c->lru_tail;
    p->next = NULL;
    if (c->lru_tail)
        c->lru_tail->next = p;
    else
        c->lru_head = p;
    c->lru_tail = p;
}

static ortmem_status om_prefix_free(om_prefix *p)
{
    ortmem_status st = p->region ? ortmem_region_destroy(p->region) : ORTMEM_OK;
    om_free(p->tokens);
    om_free(p);
    return st;
}

om_prefix *om_prefix_find(ortmem_kv_cache *c, const int32_t *tokens, size_t count)
{
    pthread_mutex_lock(&c->lock);
    om_prefix *best = NULL;
    for (om_prefix *p = c->lru_head; p; p = p->next) {
        if (p->count <= count && (!best || p->count > best->count) &&
            om_hash(tokens, p->count) == p->hash &&
            memcmp(tokens, p->tokens, p->count * sizeof *tokens) == 0)
            best = p;
    }
    if (best) {
        best->refs++;
        om_lru_unlink(c, best);
        om_lru_append(c, best); /* most recently used */
    }
    pthread_mutex_unlock(&c->lock);
    return best;
}

void om_prefix_unref(ortmem_kv_cache *c, om_prefix *p)
{
    pthread_mutex_lock(&c->lock);
    p->refs--;
    pthread_mutex_unlock(&c->lock);
}

ortmem_status ortmem_kv_seq_publish(ortmem_kv_seq *s, const int32_t *tokens, size_t count)
{
    om_error_clear();
    if (!tokens || !count)
        return OM_ERR(ORTMEM_E_INVALID, "kv publish: no tokens");
    ortmem_status st = om_seq_pin(s, "kv publish");
    if (st != ORTMEM_OK)
        return st;
    ortmem_kv_cache *c = s->cache;
    uint64_t block = om_prefix_block_tokens(c);
    uint64_t usable = count < s->length ? count : s->length;
    uint64_t covered = usable / block * block;
    if (!c->prefix_cache)
        st = OM_ERR(ORTMEM_E_STATE, "kv publish: the cache was created without a prefix cache");
    else if (s->host)
        st = OM_ERR(ORTMEM_E_STATE, "kv publish: the sequence is swapped out");
    else if (covered == 0)
        st = OM_ERR(ORTMEM_E_RANGE,
                    "kv publish: %llu tokens are shorter than one granule block of %llu tokens "
                    "(%llu contiguous bytes per token per fragment, granule %llu)",
                    (unsigned long long)usable, (unsigned long long)block,
                    (unsigned long long)c->contig, (unsigned long long)c->geometry.granule);
    if (st != ORTMEM_OK) {
        om_seq_unpin(s);
        return st;
    }
    uint64_t hash = om_hash(tokens, covered);
    pthread_mutex_lock(&c->lock);
    for (om_prefix *p = c->lru_head; p; p = p->next) {
        if (p->count == covered && p->hash == hash &&
            memcmp(p->tokens, tokens, covered * sizeof *tokens) == 0) {
            om_lru_unlink(c, p);
            om_lru_append(c, p); /* published again: fresh */
            pthread_mutex_unlock(&c->lock);
            om_seq_unpin(s);
            return ORTMEM_OK;
        }
    }
    pthread_mutex_unlock(&c->lock);
    om_prefix *p = om_calloc(1, sizeof *p);
    int32_t *copy = p ? om_malloc(covered * sizeof *copy) : NULL;
    if (!copy) {
        om_free(p);
        om_seq_unpin(s);
        return OM_ERR(ORTMEM_E_NOMEM, "kv publish: %llu tokens", (unsigned long long)covered);
    }
    memcpy(copy, tokens, covered * sizeof *copy);
    p->tokens = copy;
    p->count = covered;
    p->hash = hash;
    st = om_kv_region_create(c, c->max_context, &c->prefix_account, &p->region);
    if (st == ORTMEM_OK)
        st = om_kv_share_prefix(c, p->region, s->region, s->capacity, covered, true, &p->granules);
    if (st != ORTMEM_OK) {
        om_error_saved failure;
        om_error_save(&failure);
        (void)om_prefix_free(p);
        om_seq_unpin(s);
        return ortmem_error_set(st, "kv publish: %s", failure.detail);
    }
    if (covered > s->shared_upto)
        s->shared_upto = covered; /* its granules are mapped by the entry now */
    pthread_mutex_lock(&c->lock);
    om_lru_append(c, p);
    c->prefix_count++;
    pthread_mutex_unlock(&c->lock);
    om_seq_unpin(s);
    return ORTMEM_OK;
}

static uint64_t om_owned(ortmem_backend *b)
{
    ortmem_vmm_stats v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    (void)ortmem_backend_stats(b, &v);
    return v.owned_bytes;
}

uint64_t om_prefix_pressure(void *user, uint64_t want_bytes)
{
    ortmem_kv_cache *c = user;
    uint64_t reclaimed = 0;
    while (reclaimed < want_bytes) {
        pthread_mutex_lock(&c->lock);
        om_prefix *victim = c->lru_head;
        while (victim && victim->refs)
            victim = victim->next;
        if (victim) {
            om_lru_unlink(c, victim);
            c->prefix_count--;
            c->prefix_evicted++;
        }
        pthread_mutex_unlock(&c->lock);
        if (!victim)
            break;
        /* What comes back: granules no live sequence maps any more. */
        uint64_t before = om_owned(c->backend);
        (void)om_prefix_free(victim); /* a quarantine shows in the ledger */
        uint64_t after = om_owned(c->backend);
        reclaimed += before > after ? before - after : 0;
    }
    return reclaimed;
}

ortmem_status om_prefix_free_all(ortmem_kv_cache *c)
{
    ortmem_status st = ORTMEM_OK;
    pthread_mutex_lock(&c->lock);
    om_prefix *p = c->lru_head;
    c->lru_head = c->lru_tail = NULL;
    c->prefix_count = 0;
    pthread_mutex_unlock(&c->lock);
    while (p) {
        om_prefix *next = p->next;
        ortmem_status pst = om_prefix_free(p);
        st = st == ORTMEM_OK ? pst : st;
        p = next;
    }
    return st;
}

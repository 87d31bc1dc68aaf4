/* Byte-level BPE. Every string that can take part in a merge (each token's
 * text and each merge's two sides) gets a string id; a token's string id is
 * its token id (the last token of that text, as llama.cpp's text-to-token
 * map keeps it). A merge is then a pair of string ids with a rank, and its
 * result the string id of the joined text (-1 when that text takes part in
 * nothing). A word starts as one symbol per byte; the adjacent pair of lowest
 * rank (leftmost on ties) merges until none has a rank, through a binary heap
 * whose stale entries are skipped when popped. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct str_entry {
    uint64_t hash;
    int32_t sid; /* -1: empty slot */
} str_entry;

typedef struct pair_entry {
    int32_t left, right; /* left -1: empty slot */
    int32_t rank;
} pair_entry;

struct eng_bpe {
    size_t n_tokens;
    size_t n_strings;
    eng_bytes *strings; /* by string id; texts in pool */
    char *pool;
    str_entry *str_slots;
    size_t str_mask;
    pair_entry *pair_slots;
    size_t pair_mask;
    size_t n_merges;
    int32_t *merge_result; /* by rank */
    int32_t byte_sid[256]; /* the string id of each byte's character, or -1 */
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_pair(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static size_t table_size(size_t n)
{
    size_t size = 16;
    while (size < n * 2)
        size *= 2;
    return size;
}

static int32_t str_find(const eng_bpe *bpe, const char *s, size_t len, uint64_t h, size_t *slot)
{
    size_t i = (size_t)h & bpe->str_mask;
    for (;; i = (i + 1) & bpe->str_mask) {
        const str_entry *e = &bpe->str_slots[i];
        if (e->sid < 0) {
            *slot = i;
            return -1;
        }
        const eng_bytes *t = &bpe->strings[e->sid];
        if (e->hash == h && t->len == len && memcmp(t->ptr, s, len) == 0) {
            *slot = i;
            return e->sid;
        }
    }
}

int32_t eng_bpe_lookup(const eng_bpe *bpe, const char *s, size_t len)
{
    size_t slot;
    return str_find(bpe, s, len, hash_bytes(s, len), &slot);
}

/* Gives s (already in the pool) the string id sid, or, when the text is
 * already known, keeps the known id unless replace. Returns the id s has. */
static int32_t str_add(eng_bpe *bpe, const char *s, size_t len, int32_t sid, bool replace)
{
    size_t slot;
    uint64_t h = hash_bytes(s, len);
    int32_t found = str_find(bpe, s, len, h, &slot);
    if (found >= 0 && !replace)
        return found;
    bpe->str_slots[slot] = (str_entry){h, sid};
    return sid;
}

static int32_t pair_rank(const eng_bpe *bpe, int32_t left, int32_t right)
{
    size_t i = (size_t)hash_pair(left, right) & bpe->pair_mask;
    for (;; i = (i + 1) & bpe->pair_mask) {
        const pair_entry *e = &bpe->pair_slots[i];
        if (e->left < 0)
            return -1;
        if (e->left == left && e->right == right)
            return e->rank;
    }
}

void eng_bpe_destroy(eng_bpe *bpe)
{
    if (!bpe)
        return;
    free(bpe->strings);
    free(bpe->pool);
    free(bpe->str_slots);
    free(bpe->pair_slots);
    free(bpe->merge_result);
    free(bpe);
}

/* Where a merge's text splits: its first space past the first byte. */
static size_t merge_split(eng_bytes m)
{
    for (size_t i = 1; i < m.len; i++)
        if (m.ptr[i] == ' ')
            return i;
    return 0;
}

ortmem_status eng_bpe_create(size_t n_tokens, const eng_bytes *tokens, size_t n_merges,
                             const eng_bytes *merges, eng_bpe **out, eng_error *err)
{
    if (n_tokens == 0 || n_tokens > INT32_MAX / 4 || n_merges > INT32_MAX / 4)
        return eng_fail(err, ORTMEM_E_INVALID, "BPE: %zu tokens and %zu merges", n_tokens,
                        n_merges);
    size_t pool_bytes = 0;
    for (size_t i = 0; i < n_tokens; i++)
        pool_bytes += tokens[i].len;
    for (size_t r = 0; r < n_merges; r++) {
        if (merge_split(merges[r]) == 0)
            return eng_fail(err, ORTMEM_E_INVALID, "BPE: merge %zu (%zu bytes) has no space", r,
                            merges[r].len);
        pool_bytes += merges[r].len;
    }
    size_t max_strings = n_tokens + 2 * n_merges;
    eng_bpe *bpe = calloc(1, sizeof *bpe);
    if (!bpe)
        return eng_fail(err, ORTMEM_E_NOMEM, "BPE: %zu bytes", sizeof *bpe);
    bpe->n_tokens = n_tokens;
    bpe->n_merges = n_merges;
    size_t str_size = table_size(max_strings), pair_size = table_size(n_merges);
    bpe->strings = malloc(max_strings * sizeof *bpe->strings);
    bpe->pool = malloc(pool_bytes ? pool_bytes : 1);
    bpe->str_slots = malloc(str_size * sizeof *bpe->str_slots);
    bpe->pair_slots = malloc(pair_size * sizeof *bpe->pair_slots);
    bpe->merge_result = malloc((n_merges ? n_merges : 1) * sizeof *bpe->merge_result);
    if (!bpe->strings || !bpe->pool || !bpe->str_slots || !bpe->pair_slots || !bpe->merge_result) {
        eng_bpe_destroy(bpe);
        return eng_fail(err, ORTMEM_E_NOMEM, "BPE tables for %zu tokens and %zu merges", n_tokens,
                        n_merges);
    }
    bpe->str_mask = str_size - 1;
    bpe->pair_mask = pair_size - 1;
    for (size_t i = 0; i < str_size; i++)
        bpe->str_slots[i].sid = -1;
    for (size_t i = 0; i < pair_size; i++)
        bpe->pair_slots[i].left = -1;

    char *at = bpe->pool;
    for (size_t i = 0; i < n_tokens; i++) {
        memcpy(at, tokens[i].ptr, tokens[i].len);
        bpe->strings[i] = (eng_bytes){at, tokens[i].len};
        at += tokens[i].len;
        str_add(bpe, bpe->strings[i].ptr, tokens[i].len, (int32_t)i, true);
    }
    bpe->n_strings = n_tokens;
    for (size_t r = 0; r < n_merges; r++) {
        size_t cut = merge_split(merges[r]);
        memcpy(at, merges[r].ptr, merges[r].len);
        const char *left = at, *right = at + cut + 1;
        size_t left_len = cut, right_len = merges[r].len - cut - 1;
        at += merges[r].len;
        int32_t sids[2];
        for (int side = 0; side < 2; side++) {
            const char *s = side ? right : left;
            size_t len = side ? right_len : left_len;
            int32_t next = (int32_t)bpe->n_strings;
            bpe->strings[next] = (eng_bytes){s, len};
            sids[side] = str_add(bpe, s, len, next, false);
            if (sids[side] == next)
                bpe->n_strings++;
        }
        /* The first rank of a pair wins, as llama.cpp keeps it. */
        size_t i = (size_t)hash_pair(sids[0], sids[1]) & bpe->pair_mask;
        while (bpe->pair_slots[i].left >= 0 &&
               !(bpe->pair_slots[i].left == sids[0] && bpe->pair_slots[i].right == sids[1]))
            i = (i + 1) & bpe->pair_mask;
        if (bpe->pair_slots[i].left < 0)
            bpe->pair_slots[i] = (pair_entry){sids[0], sids[1], (int32_t)r};
    }
    /* Each merge's joined text, looked up once all strings are known. */
    char *joined = NULL;
    size_t joined_cap = 0;
    for (size_t r = 0; r < n_merges; r++) {
        size_t cut = merge_split(merges[r]);
        size_t len = merges[r].len - 1;
        if (len > joined_cap) {
            char *grown = realloc(joined, len);
            if (!grown) {
                free(joined);
                eng_bpe_destroy(bpe);
                return eng_fail(err, ORTMEM_E_NOMEM, "BPE: %zu bytes for merge %zu", len, r);
            }
            joined = grown;
            joined_cap = len;
        }
        memcpy(joined, merges[r].ptr, cut);
        memcpy(joined + cut, merges[r].ptr + cut + 1, len - cut);
        bpe->merge_result[r] = eng_bpe_lookup(bpe, joined, len);
    }
    free(joined);
    for (int b = 0; b < 256; b++) {
        char ch[4];
        size_t n = eng_utf8_encode(eng_byte_to_cp((uint8_t)b), ch);
        bpe->byte_sid[b] = eng_bpe_lookup(bpe, ch, n);
    }
    *out = bpe;
    return ORTMEM_OK;
}

/* ---- encoding one word ---- */

typedef struct symbol {
    uint32_t start, len; /* raw bytes of the word; len 0: merged away */
    int32_t sid;
    int32_t prev, next;
} symbol;

typedef struct candidate {
    int32_t rank;
    int32_t left, right;
    int32_t left_sid, right_sid;
} candidate;

void eng_bpe_work_free(eng_bpe_work *work)
{
    free(work->symbols);
    free(work->heap);
    free(work->text);
    memset(work, 0, sizeof *work);
}

static bool reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *grown = realloc(*p, n * elem);
    if (!grown)
        return false;
    *p = grown;
    *cap = n;
    return true;
}

static bool before(const candidate *a, const candidate *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(candidate *heap, size_t *n, candidate c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&c, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = c;
}

static candidate heap_pop(candidate *heap, size_t *n)
{
    candidate top = heap[0];
    candidate last = heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && before(&heap[child + 1], &heap[child]))
            child++;
        if (!before(&heap[child], &last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0)
        heap[i] = last;
    return top;
}

static void consider(const eng_bpe *bpe, const symbol *syms, int32_t left, int32_t right,
                     candidate *heap, size_t *n)
{
    if (left < 0 || right < 0 || syms[left].sid < 0 || syms[right].sid < 0)
        return;
    int32_t rank = pair_rank(bpe, syms[left].sid, syms[right].sid);
    if (rank >= 0)
        heap_push(heap, n, (candidate){rank, left, right, syms[left].sid, syms[right].sid});
}

/* Byte-maps raw[0..len) into work->text; returns its length, or SIZE_MAX
 * when out of memory. */
static size_t map_bytes(eng_bpe_work *work, const char *raw, size_t len)
{
    if (!reserve((void **)&work->text, &work->text_cap, 2 * len + 1, 1))
        return SIZE_MAX;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += eng_utf8_encode(eng_byte_to_cp((uint8_t)raw[i]), work->text + n);
    return n;
}

/* A symbol that is no token goes out byte by byte, as one-byte texts of its
 * mapped form that are tokens (llama.cpp's fallback). */
static ortmem_status emit_fallback(const eng_bpe *bpe, eng_bpe_work *work, const char *raw,
                                   size_t len, eng_ids *out, eng_error *err)
{
    size_t n = map_bytes(work, raw, len);
    if (n == SIZE_MAX)
        return eng_fail(err, ORTMEM_E_NOMEM, "BPE: %zu bytes of mapped text", 2 * len);
    for (size_t i = 0; i < n; i++) {
        int32_t id = eng_bpe_lookup(bpe, work->text + i, 1);
        if (id >= 0 && (size_t)id < bpe->n_tokens) {
            ortmem_status st = eng_ids_push(out, id, err);
            if (st != ORTMEM_OK)
                return st;
        }
    }
    return ORTMEM_OK;
}

ortmem_status eng_bpe_encode_word(const eng_bpe *bpe, eng_bpe_work *work, const char *word,
                                  size_t len, bool ignore_merges, eng_ids *out, eng_error *err)
{
    if (len == 0)
        return ORTMEM_OK;
    if (len > UINT32_MAX / 2)
        return eng_fail(err, ORTMEM_E_RANGE, "BPE: a word of %zu bytes", len);
    if (ignore_merges) {
        size_t n = map_bytes(work, word, len);
        if (n == SIZE_MAX)
            return eng_fail(err, ORTMEM_E_NOMEM, "BPE: %zu bytes of mapped text", 2 * len);
        int32_t id = eng_bpe_lookup(bpe, work->text, n);
        if (id >= 0 && (size_t)id < bpe->n_tokens)
            return eng_ids_push(out, id, err);
    }
    if (!reserve(&work->symbols, &work->symbols_cap, len, sizeof(symbol)) ||
        !reserve(&work->heap, &work->heap_cap, 3 * len, sizeof(candidate)))
        return eng_fail(err, ORTMEM_E_NOMEM, "BPE: work space for a word of %zu bytes", len);
    symbol *syms = work->symbols;
    candidate *heap = work->heap;
    size_t heap_n = 0;
    for (size_t i = 0; i < len; i++)
        syms[i] = (symbol){(uint32_t)i, 1, bpe->byte_sid[(uint8_t)word[i]], (int32_t)i - 1,
                           i + 1 < len ? (int32_t)i + 1 : -1};
    for (size_t i = 1; i < len; i++)
        consider(bpe, syms, (int32_t)i - 1, (int32_t)i, heap, &heap_n);
    /* Each merge removes a symbol and pushes at most two candidates: the heap
     * never holds more than len - 1 + 2 * (len - 1) entries. */
    while (heap_n > 0) {
        candidate c = heap_pop(heap, &heap_n);
        symbol *l = &syms[c.left], *r = &syms[c.right];
        if (l->len == 0 || r->len == 0 || l->next != c.right || l->sid != c.left_sid ||
            r->sid != c.right_sid)
            continue; /* stale */
        l->len += r->len;
        l->sid = bpe->merge_result[c.rank];
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            syms[r->next].prev = c.left;
        consider(bpe, syms, l->prev, c.left, heap, &heap_n);
        consider(bpe, syms, c.left, l->next, heap, &heap_n);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        ortmem_status st;
        if (syms[i].sid >= 0 && (size_t)syms[i].sid < bpe->n_tokens)
            st = eng_ids_push(out, syms[i].sid, err);
        else
            st = emit_fallback(bpe, work, word + syms[i].start, syms[i].len, out, err);
        if (st != ORTMEM_OK)
            return st;
    }
    return ORTMEM_OK;
}

ortmem_status eng_ids_push(eng_ids *ids, int32_t id, eng_error *err)
{
    if (!reserve((void **)&ids->ids, &ids->cap, ids->count + 1, sizeof *ids->ids))
        return eng_fail(err, ORTMEM_E_NOMEM, "%zu token ids", ids->count + 1);
    ids->ids[ids->count++] = id;
    return ORTMEM_OK;
}

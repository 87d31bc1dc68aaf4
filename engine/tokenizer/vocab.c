/* The tokenizer object: the vocabulary with its types, special tokens and
 * end-of-generation set, encoding (special tokens first, then the
 * pre-tokenizer and BPE on the text between them) and decoding. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

struct eng_tokenizer {
    size_t n_tokens;
    char *text_pool;  /* each token's text as the vocabulary spells it */
    size_t *text_off; /* n_tokens + 1 */
    char *piece_pool; /* each token's bytes (eng_token_bytes) */
    size_t *piece_off;
    int32_t *types;
    uint8_t *eog;     /* by id */
    int32_t *special; /* ids matched in text, longest text first */
    size_t n_special;
    eng_bpe *bpe;
    eng_pretokenizer *pre;
    bool ignore_merges;
    int32_t bos, eos, unk, pad;
    bool add_bos;
    char *chat_template;
    size_t chat_template_len;
};

static eng_bytes token_text(const eng_tokenizer *tok, size_t id)
{
    return (eng_bytes){tok->text_pool + tok->text_off[id],
                       tok->text_off[id + 1] - tok->text_off[id]};
}

static bool text_is(const eng_tokenizer *tok, size_t id, const char *s)
{
    eng_bytes t = token_text(tok, id);
    return t.len == strlen(s) && memcmp(t.ptr, s, t.len) == 0;
}

void eng_tokenizer_destroy(eng_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->text_pool);
    free(tok->text_off);
    free(tok->piece_pool);
    free(tok->piece_off);
    free(tok->types);
    free(tok->eog);
    free(tok->special);
    eng_bpe_destroy(tok->bpe);
    eng_pretokenizer_destroy(tok->pre);
    free(tok->chat_template);
    free(tok);
}

/* A normal token's bytes: each character of its text back to the byte it
 * stands for (a character outside the byte alphabet is kept as it is). */
static size_t decode_piece(eng_bytes text, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < text.len;) {
        size_t k;
        uint32_t cp = eng_utf8_decode(text.ptr + i, &k);
        int b = eng_cp_to_byte(cp);
        if (b >= 0) {
            out[n++] = (char)b;
        } else {
            memcpy(out + n, text.ptr + i, k);
            n += k;
        }
        i += k;
    }
    return n;
}

typedef struct sized_id {
    size_t len;
    int32_t id;
} sized_id;

static int by_length_desc(const void *a, const void *b)
{
    const sized_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* End of generation, as llama.cpp decides it from token texts. */
static const char *const EOG_TEXTS[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "[e~[",
                                        NULL};
/* Fill-in-the-middle pad, repository and file separator tokens end
 * generation too (the first of each kind found, when the file names none). */
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                            "<PAD>",       "[PAD]",     NULL};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>", NULL};

static int32_t find_any(const eng_tokenizer *tok, const char *const *texts)
{
    for (size_t id = 0; id < tok->n_tokens; id++)
        for (size_t k = 0; texts[k]; k++)
            if (text_is(tok, id, texts[k]))
                return (int32_t)id;
    return -1;
}

static void mark_eog(eng_tokenizer *tok, const eng_tokenizer_spec *spec, const int32_t fim[3])
{
    for (int k = 0; k < 3; k++)
        if (fim[k] >= 0)
            tok->eog[fim[k]] = 1;
    for (size_t id = 0; id < tok->n_tokens; id++) {
        for (size_t k = 0; EOG_TEXTS[k]; k++) {
            if (text_is(tok, id, EOG_TEXTS[k])) {
                tok->eog[id] = 1;
                if (tok->types[id] != ENG_TOKEN_CONTROL)
                    tok->types[id] = ENG_TOKEN_CONTROL; /* as llama.cpp overrides it */
                break;
            }
        }
    }
    const int32_t named[3] = {spec->eos, spec->eot, spec->eom};
    for (int k = 0; k < 3; k++)
        if (named[k] >= 0)
            tok->eog[named[k]] = 1;
    /* Where <|return|> and <|call|> (or <|calls|> and <|flush|>) exist,
     * <|end|> only ends a message, not generation. */
    int32_t end = -1;
    bool ret = false, call = false, flush = false;
    for (size_t id = 0; id < tok->n_tokens; id++) {
        if (!tok->eog[id])
            continue;
        ret |= text_is(tok, id, "<|return|>");
        call |= text_is(tok, id, "<|call|>") || text_is(tok, id, "<|calls|>");
        flush |= text_is(tok, id, "<|flush|>");
        if (text_is(tok, id, "<|end|>"))
            end = (int32_t)id;
    }
    if (end >= 0 && ((ret && call) || (call && flush))) {
        tok->eog[end] = 0;
        tok->types[end] = ENG_TOKEN_USER_DEFINED;
    }
}

static bool id_ok(const eng_tokenizer_spec *spec, int32_t id)
{
    return id >= -1 && (id < 0 || (size_t)id < spec->n_tokens);
}

ortmem_status eng_tokenizer_create_from_spec(const eng_tokenizer_spec *spec, eng_tokenizer **out,
                                             eng_error *err)
{
    if (!spec || !out || spec->n_tokens == 0 || !spec->tokens)
        return eng_fail(err, ORTMEM_E_INVALID, "tokenizer: no vocabulary");
    if (!spec->model || strcmp(spec->model, "gpt2") != 0)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "tokenizer model \"%s\" is not supported (only \"gpt2\", byte-level BPE)",
                        spec->model ? spec->model : "(none)");
    const int32_t ids[6] = {spec->bos, spec->eos, spec->unk, spec->pad, spec->eot, spec->eom};
    for (int k = 0; k < 6; k++)
        if (!id_ok(spec, ids[k]))
            return eng_fail(err, ORTMEM_E_RANGE, "tokenizer: special id %d outside %zu tokens",
                            ids[k], spec->n_tokens);
    size_t text_bytes = 0;
    for (size_t i = 0; i < spec->n_tokens; i++) {
        size_t bad = eng_utf8_invalid_offset(spec->tokens[i].ptr, spec->tokens[i].len);
        if (bad != spec->tokens[i].len)
            return eng_fail(err, ORTMEM_E_INVALID, "tokenizer: token %zu is not UTF-8 at byte %zu",
                            i, bad);
        text_bytes += spec->tokens[i].len;
    }

    eng_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return eng_fail(err, ORTMEM_E_NOMEM, "tokenizer: %zu bytes", sizeof *tok);
    size_t n = spec->n_tokens;
    tok->n_tokens = n;
    tok->text_pool = malloc(text_bytes + 1);
    tok->text_off = malloc((n + 1) * sizeof *tok->text_off);
    tok->piece_pool = malloc(text_bytes + 1);
    tok->piece_off = malloc((n + 1) * sizeof *tok->piece_off);
    tok->types = malloc(n * sizeof *tok->types);
    tok->eog = calloc(n, 1);
    tok->special = malloc(n * sizeof *tok->special);
    if (!tok->text_pool || !tok->text_off || !tok->piece_pool || !tok->piece_off || !tok->types ||
        !tok->eog || !tok->special) {
        eng_tokenizer_destroy(tok);
        return eng_fail(err, ORTMEM_E_NOMEM, "tokenizer: tables for %zu tokens (%zu bytes)", n,
                        text_bytes);
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        tok->text_off[i] = at;
        memcpy(tok->text_pool + at, spec->tokens[i].ptr, spec->tokens[i].len);
        at += spec->tokens[i].len;
        tok->types[i] = spec->types ? spec->types[i] : ENG_TOKEN_NORMAL;
    }
    tok->text_off[n] = at;
    tok->bos = spec->bos;
    tok->eos = spec->eos;
    tok->unk = spec->unk;
    tok->pad = spec->pad;
    tok->add_bos = spec->add_bos > 0;

    ortmem_status st = eng_pretokenizer_create(spec->pre, &tok->pre, &tok->ignore_merges, err);
    if (st == ORTMEM_OK)
        st = eng_bpe_create(n, spec->tokens, spec->n_merges, spec->merges, &tok->bpe, err);
    if (st != ORTMEM_OK) {
        eng_tokenizer_destroy(tok);
        return st;
    }
    if (spec->add_bos < 0 && spec->pre &&
        (strcmp(spec->pre, "llama3") == 0 || strcmp(spec->pre, "llama-v3") == 0 ||
         strcmp(spec->pre, "llama-bpe") == 0))
        tok->add_bos = true; /* llama.cpp's default for these when the file does not say */

    const int32_t fim[3] = {find_any(tok, FIM_PAD_TEXTS), find_any(tok, FIM_REP_TEXTS),
                            find_any(tok, FIM_SEP_TEXTS)};
    mark_eog(tok, spec, fim);

    /* Bytes of each token, once the types are final. */
    at = 0;
    for (size_t i = 0; i < n; i++) {
        tok->piece_off[i] = at;
        eng_bytes t = token_text(tok, i);
        switch (tok->types[i]) {
        case ENG_TOKEN_NORMAL:
        case ENG_TOKEN_BYTE: at += decode_piece(t, tok->piece_pool + at); break;
        case ENG_TOKEN_CONTROL:
        case ENG_TOKEN_USER_DEFINED:
        case ENG_TOKEN_UNKNOWN:
            memcpy(tok->piece_pool + at, t.ptr, t.len);
            at += t.len;
            break;
        default: /* unused and undefined tokens stand for nothing */ break;
        }
    }
    tok->piece_off[n] = at;

    sized_id *order = malloc(n * sizeof *order);
    if (!order) {
        eng_tokenizer_destroy(tok);
        return eng_fail(err, ORTMEM_E_NOMEM, "tokenizer: order of %zu tokens", n);
    }
    for (size_t i = 0; i < n; i++)
        if (tok->types[i] == ENG_TOKEN_CONTROL || tok->types[i] == ENG_TOKEN_USER_DEFINED ||
            tok->types[i] == ENG_TOKEN_UNKNOWN)
            if (tok->text_off[i + 1] > tok->text_off[i])
                order[tok->n_special++] =
                    (sized_id){tok->text_off[i + 1] - tok->text_off[i], (int32_t)i};
    qsort(order, tok->n_special, sizeof *order, by_length_desc);
    for (size_t k = 0; k < tok->n_special; k++)
        tok->special[k] = order[k].id;
    free(order);

    if (spec->chat_template) {
        tok->chat_template = malloc(spec->chat_template_len + 1);
        if (!tok->chat_template) {
            eng_tokenizer_destroy(tok);
            return eng_fail(err, ORTMEM_E_NOMEM, "tokenizer: chat template of %zu bytes",
                            spec->chat_template_len);
        }
        memcpy(tok->chat_template, spec->chat_template, spec->chat_template_len);
        tok->chat_template[spec->chat_template_len] = '\0';
        tok->chat_template_len = spec->chat_template_len;
    }
    *out = tok;
    return ORTMEM_OK;
}

size_t eng_tokenizer_vocab_size(const eng_tokenizer *tok)
{
    return tok->n_tokens;
}

int32_t eng_tokenizer_bos(const eng_tokenizer *tok)
{
    return tok->bos;
}

int32_t eng_tokenizer_eos(const eng_tokenizer *tok)
{
    return tok->eos;
}

bool eng_tokenizer_add_bos(const eng_tokenizer *tok)
{
    return tok->add_bos;
}

bool eng_tokenizer_is_eog(const eng_tokenizer *tok, int32_t id)
{
    return id >= 0 && (size_t)id < tok->n_tokens && tok->eog[id];
}

ortmem_status eng_token_bytes(const eng_tokenizer *tok, int32_t id, char *buf, size_t cap,
                              size_t *len, eng_error *err)
{
    if (id < 0 || (size_t)id >= tok->n_tokens)
        return eng_fail(err, ORTMEM_E_RANGE, "token id %d outside the vocabulary of %zu", id,
                        tok->n_tokens);
    size_t n = tok->piece_off[id + 1] - tok->piece_off[id];
    *len = n;
    if (n > cap)
        return eng_fail(err, ORTMEM_E_RANGE, "token %d is %zu bytes, the buffer %zu", id, n, cap);
    memcpy(buf, tok->piece_pool + tok->piece_off[id], n);
    return ORTMEM_OK;
}

/* ---- encoding ---- */

/* A stretch of the input: text still to encode (id -1) or a special token. */
typedef struct fragment {
    size_t start, len;
    int32_t id;
} fragment;

typedef struct fragment_list {
    fragment *items;
    size_t count, cap;
} fragment_list;

static bool fragment_push(fragment_list *l, size_t start, size_t len, int32_t id)
{
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        fragment *grown = realloc(l->items, cap * sizeof *grown);
        if (!grown)
            return false;
        l->items = grown;
        l->cap = cap;
    }
    l->items[l->count++] = (fragment){start, len, id};
    return true;
}

static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t len)
{
    if (len == 0 || hay_len < len)
        return NULL;
    const char *end = hay + hay_len - len;
    for (const char *p = hay; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p)
            return NULL;
        if (memcmp(p, needle, len) == 0)
            return p;
    }
    return NULL;
}

/* Special tokens cut the text one token at a time, longest first, each
 * taking every occurrence left of the text still unclaimed (llama.cpp's
 * order). Without parse_special only user-defined ones are matched. */
static ortmem_status split_special(const eng_tokenizer *tok, const char *text, size_t len,
                                   bool parse_special, fragment_list *out, eng_error *err)
{
    fragment_list cur = {0}, next = {0};
    if (len > 0 && !fragment_push(&cur, 0, len, -1))
        return eng_fail(err, ORTMEM_E_NOMEM, "tokenize: fragments");
    for (size_t s = 0; s < tok->n_special; s++) {
        int32_t id = tok->special[s];
        if (!parse_special && tok->types[id] != ENG_TOKEN_USER_DEFINED)
            continue;
        eng_bytes t = token_text(tok, (size_t)id);
        next.count = 0;
        bool found_any = false;
        for (size_t f = 0; f < cur.count; f++) {
            fragment fr = cur.items[f];
            bool ok = true;
            if (fr.id >= 0) {
                ok = fragment_push(&next, fr.start, fr.len, fr.id);
            } else {
                size_t pos = fr.start, end = fr.start + fr.len;
                const char *hit;
                while (ok && (hit = find_bytes(text + pos, end - pos, t.ptr, t.len)) != NULL) {
                    size_t h = (size_t)(hit - text);
                    found_any = true;
                    if (h > pos)
                        ok = fragment_push(&next, pos, h - pos, -1);
                    ok = ok && fragment_push(&next, h, t.len, id);
                    pos = h + t.len;
                }
                if (ok && pos < end)
                    ok = fragment_push(&next, pos, end - pos, -1);
            }
            if (!ok) {
                free(cur.items);
                free(next.items);
                return eng_fail(err, ORTMEM_E_NOMEM, "tokenize: %zu fragments", next.count);
            }
        }
        if (found_any) {
            fragment_list swap = cur;
            cur = next;
            next = swap;
        }
    }
    free(next.items);
    *out = cur;
    return ORTMEM_OK;
}

static ortmem_status encode_text(const eng_tokenizer *tok, const char *text, size_t len,
                                 eng_bpe_work *work, eng_ids *ids, eng_error *err)
{
    eng_span *words = NULL;
    size_t n_words = 0;
    ortmem_status st = eng_pretokenize(tok->pre, text, len, &words, &n_words, err);
    for (size_t w = 0; w < n_words && st == ORTMEM_OK; w++)
        st = eng_bpe_encode_word(tok->bpe, work, text + words[w].start, words[w].len,
                                 tok->ignore_merges, ids, err);
    free(words);
    return st;
}

ortmem_status eng_tokenize(const eng_tokenizer *tok, const char *text, size_t len,
                           bool parse_special, int32_t *ids, size_t cap, size_t *n, eng_error *err)
{
    if (!tok || (!text && len > 0) || !n || (!ids && cap > 0))
        return eng_fail(err, ORTMEM_E_INVALID, "tokenize: NULL argument");
    size_t bad = eng_utf8_invalid_offset(text, len);
    if (bad != len)
        return eng_fail(err, ORTMEM_E_INVALID,
                        "tokenize: invalid UTF-8 at byte %zu of %zu (byte 0x%02x)", bad, len,
                        (unsigned)(unsigned char)text[bad]);
    fragment_list frags = {0};
    ortmem_status st = split_special(tok, text, len, parse_special, &frags, err);
    if (st != ORTMEM_OK)
        return st;
    eng_ids out = {0};
    eng_bpe_work work = {0};
    for (size_t f = 0; f < frags.count && st == ORTMEM_OK; f++) {
        const fragment *fr = &frags.items[f];
        if (fr->id >= 0)
            st = eng_ids_push(&out, fr->id, err);
        else
            st = encode_text(tok, text + fr->start, fr->len, &work, &out, err);
    }
    free(frags.items);
    eng_bpe_work_free(&work);
    if (st == ORTMEM_OK) {
        if (out.count > cap) {
            st = eng_fail(err, ORTMEM_E_RANGE, "tokenize: %zu ids do not fit %zu", out.count, cap);
        } else if (out.count > 0) {
            memcpy(ids, out.ids, out.count * sizeof *ids);
        }
        *n = out.count;
    }
    free(out.ids);
    return st;
}

ortmem_status eng_chat_render(const eng_tokenizer *tok, const eng_chat_message *messages,
                              size_t count, bool add_assistant, char **out, eng_error *err)
{
    if (!tok || !out)
        return eng_fail(err, ORTMEM_E_INVALID, "chat: NULL argument");
    if (!tok->chat_template)
        return eng_fail(err, ORTMEM_E_UNSUPPORTED, "chat: the model has no chat template");
    char *bos = NULL;
    if (tok->bos >= 0) {
        eng_bytes t = token_text(tok, (size_t)tok->bos);
        bos = malloc(t.len + 1);
        if (!bos)
            return eng_fail(err, ORTMEM_E_NOMEM, "chat: %zu bytes", t.len + 1);
        memcpy(bos, t.ptr, t.len);
        bos[t.len] = '\0';
    }
    ortmem_status st = eng_chat_render_template(tok->chat_template, tok->chat_template_len, bos,
                                                messages, count, add_assistant, out, err);
    free(bos);
    return st;
}

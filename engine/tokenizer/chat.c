/* Chat rendering for the template families the engine knows, recognised by
 * their markers in tokenizer.chat_template rather than by running Jinja:
 *   ChatML  "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, and the
 *           template's own default system message (the literal text it
 *           writes between "<|im_start|>system\n" and "<|im_end|>") when the
 *           first message is not a system one;
 *   Llama 3 BOS text, then "<|start_header_id|>ROLE<|end_header_id|>\n\n"
 *           + trimmed CONTENT + "<|eot_id|>" per message. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct text_buf {
    char *ptr;
    size_t len, cap;
    bool failed;
} text_buf;

static void put(text_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *grown = realloc(b->ptr, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->ptr = grown;
        b->cap = cap;
    }
    memcpy(b->ptr + b->len, s, n);
    b->len += n;
    b->ptr[b->len] = '\0';
}

static void puts_(text_buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static const char *find_in(const char *hay, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return hay + i;
    return NULL;
}

/* The template's default system message: inside a quoted literal, the text
 * after "<|im_start|>system" and a newline (written as one or as \n) up to
 * "<|im_end|>", when that comes before the literal's closing quote (a
 * literal that closes first is the branch that writes the caller's own
 * system message). Jinja's escapes are undone into out. */
static bool default_system(const char *tmpl, size_t len, text_buf *out)
{
    static const char marker[] = "<|im_start|>system";
    const char *at = tmpl, *end = tmpl + len;
    while ((at = find_in(at, (size_t)(end - at), marker)) != NULL) {
        const char *marker_at = at;
        const char *start = at + strlen(marker);
        at = start;
        char quote = 0; /* the literal's quote: the nearest one before the marker */
        for (const char *q = marker_at; q > tmpl; q--) {
            if (q[-1] == '\'' || q[-1] == '"') {
                quote = q[-1];
                break;
            }
        }
        if (!quote)
            continue;
        const char *p = start;
        if (p < end && *p == '\n')
            p++;
        else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
            p += 2;
        else
            continue;
        text_buf text = {0};
        bool found = false;
        while (p < end) {
            if ((size_t)(end - p) >= 10 && memcmp(p, "<|im_end|>", 10) == 0) {
                found = true;
                break;
            }
            if (*p == quote)
                break;
            if (*p == '\\' && p + 1 < end) {
                char c = p[1];
                char lit = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
                put(&text, &lit, 1);
                p += 2;
                continue;
            }
            put(&text, p, 1);
            p++;
        }
        if (found && !text.failed && text.len > 0) {
            put(out, text.ptr, text.len);
            free(text.ptr);
            return true;
        }
        free(text.ptr);
    }
    return false;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

ortmem_status eng_chat_render_template(const char *tmpl, size_t len, const char *bos_text,
                                       const eng_chat_message *messages, size_t count,
                                       bool add_assistant, char **out, eng_error *err)
{
    if (!tmpl || !out || (count > 0 && !messages))
        return eng_fail(err, ORTMEM_E_INVALID, "chat: NULL argument");
    for (size_t i = 0; i < count; i++)
        if (!messages[i].role || !messages[i].content)
            return eng_fail(err, ORTMEM_E_INVALID, "chat: message %zu has no %s", i,
                            messages[i].role ? "content" : "role");
    text_buf b = {0};
    puts_(&b, ""); /* an empty conversation still renders as "" */
    if (find_in(tmpl, len, "<|im_start|>")) {
        text_buf sys = {0};
        if ((count == 0 || strcmp(messages[0].role, "system") != 0) &&
            (find_in(tmpl, len, "!= 'system'") || find_in(tmpl, len, "!= \"system\"") ||
             find_in(tmpl, len, "== 'system'") || find_in(tmpl, len, "== \"system\"")) &&
            default_system(tmpl, len, &sys) && count > 0) {
            puts_(&b, "<|im_start|>system\n");
            put(&b, sys.ptr, sys.len);
            puts_(&b, "<|im_end|>\n");
        }
        free(sys.ptr);
        for (size_t i = 0; i < count; i++) {
            puts_(&b, "<|im_start|>");
            puts_(&b, messages[i].role);
            puts_(&b, "\n");
            puts_(&b, messages[i].content);
            puts_(&b, "<|im_end|>\n");
        }
        if (add_assistant)
            puts_(&b, "<|im_start|>assistant\n");
    } else if (find_in(tmpl, len, "<|start_header_id|>")) {
        if (bos_text && find_in(tmpl, len, "bos_token"))
            puts_(&b, bos_text);
        for (size_t i = 0; i < count; i++) {
            const char *c = messages[i].content;
            size_t n = strlen(c);
            while (n > 0 && is_space(*c)) {
                c++;
                n--;
            }
            while (n > 0 && is_space(c[n - 1]))
                n--;
            puts_(&b, "<|start_header_id|>");
            puts_(&b, messages[i].role);
            puts_(&b, "<|end_header_id|>\n\n");
            put(&b, c, n);
            puts_(&b, "<|eot_id|>");
        }
        if (add_assistant)
            puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        free(b.ptr);
        return eng_fail(err, ORTMEM_E_UNSUPPORTED,
                        "chat template not recognised (neither ChatML nor Llama 3): \"%.*s\"",
                        (int)(len < 40 ? len : 40), tmpl);
    }
    if (b.failed) {
        free(b.ptr);
        return eng_fail(err, ORTMEM_E_NOMEM, "chat: %zu bytes", b.len);
    }
    *out = b.ptr;
    return ORTMEM_OK;
}

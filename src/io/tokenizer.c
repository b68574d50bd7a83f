// tokenizer.c — GPT-2 byte-level BPE and the `ted tokenize` command.
//
// Loading. encoder.json maps token strings to ids. GPT-2 writes every byte as one printable
// character (bytes 33..126, 161..172 and 174..255 stand for themselves, the other 68 bytes for
// U+0100 onwards), so each key is turned back into the raw bytes it stands for; the tokenizer
// then works on raw bytes only. vocab.bpe lists the merges "A B", best first; a merge is kept
// as (id A, id B) -> (rank, id of AB).
//
// Encoding. PCRE2 splits the text with GPT-2's pattern into pre-tokens ("words"). A word starts
// as one id per byte; the adjacent pair of lowest rank is merged, every occurrence of it from
// left to right, until no pair has a rank — exactly GPT-2's loop, done with a heap so that long
// words cost O(n log n). The ids of each word are cached, so a book is mostly hash look-ups.
//
// `ted tokenize` encodes a text file (after one <|endoftext|>, as llm.c's shards start) and
// writes llm.c shards: 256 int32 of header (magic, version, token count), then uint16 tokens.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"
#include "core/alloc.h"
#include "io/progress.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TOKEN_BYTES 256          // tok_decode promises at most this many bytes per token
#define MAX_VOCAB (1 << 24)
#define CACHE_WORD_MAX 128           // longer words are encoded every time
#define CACHE_BYTES_MAX (64u << 20)  // the word cache starts afresh past this size

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct { uint64_t key; int32_t rank, merged; } Merge;        // rank < 0: empty slot
typedef struct { uint32_t woff, wlen, ioff, nids; } CacheEntry;     // wlen 0: empty slot
typedef struct { int32_t rank, pos, a, b, merged; } Pair;            // a candidate merge
typedef struct { int *v; size_t n, cap; } IntVec;

struct Tokenizer {
    int vocab_size;                 // largest id + 1
    char *tok_bytes;                // the raw bytes of every token, back to back
    uint32_t *tok_off;              // [vocab_size]
    uint16_t *tok_len;              // [vocab_size]; 0: no token has this id
    int32_t *vocab_slots;           // hash of raw bytes -> id; -1 empty
    size_t vocab_mask;
    int byte_id[256];               // the token of each single byte
    int cp_byte[512];               // GPT-2's alphabet: code point -> byte, or -1

    Merge *merges;                  // hash of (a, b)
    size_t merge_mask;

    pcre2_general_context *gctx;    // routes PCRE2's allocations through ted_alloc
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;

    CacheEntry *cache;              // word bytes -> ids
    size_t cache_mask, cache_count;
    char *cwords; size_t cwords_len, cwords_cap;
    int *cids; size_t cids_len, cids_cap;

    int *sym, *next, *prev;         // BPE scratch: a linked list of symbols
    Pair *heap, *pending;
    size_t scratch_cap;
};

// ---------------------------------------------------------------- small helpers

static uint64_t hash_bytes(const void *p, size_t n) {        // FNV-1a
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {                        // splitmix64's finaliser
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static void vec_push(IntVec *v, int x) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->v = ted_realloc(v->v, v->cap * sizeof(int), MEM_TEMP);
    }
    v->v[v->n++] = x;
}

// Grows *buf (elem bytes each) so that it holds at least need elements.
static void *grow(void *buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return buf;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    *cap = c;
    return ted_realloc(buf, c * elem, MEM_TEMP);
}

// read_file for regular files only (a directory would look endless); NULL after an error line.
static char *read_regular(const char *path, size_t *len) {
    struct stat st;
    char *text = NULL;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) errno = EISDIR;
    else text = read_file(path, len);
    if (!text) ted_error("%s: %s", path, errno == EISDIR ? "not a regular file" : strerror(errno));
    return text;
}

// GPT-2's byte <-> unicode table: cp_byte[code point] = byte, or -1.
static void byte_alphabet(int cp_byte[512]) {
    for (int i = 0; i < 512; i++) cp_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        cp_byte[printable ? b : 256 + n++] = b;
    }
}

// Turns a token written in GPT-2's alphabet (UTF-8) into its raw bytes. Returns the byte count,
// or -1 when the string holds a character outside the alphabet or is longer than max.
static int alphabet_to_bytes(const int cp_byte[512], const char *s, unsigned char *out, int max) {
    const unsigned char *u = (const unsigned char *)s;
    int n = 0;
    while (*u) {
        int cp;
        if (u[0] < 0x80) cp = *u++;
        else if ((u[0] & 0xE0) == 0xC0 && (u[1] & 0xC0) == 0x80) {
            cp = ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
            u += 2;
        } else return -1;               // every character of the alphabet is below U+0800
        if (cp >= 512 || cp_byte[cp] < 0 || n >= max) return -1;
        out[n++] = (unsigned char)cp_byte[cp];
    }
    return n;
}

// ---------------------------------------------------------------- vocabulary and merges

static int vocab_find(const Tokenizer *t, const void *bytes, size_t n) {
    for (size_t i = hash_bytes(bytes, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        int id = t->vocab_slots[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && memcmp(t->tok_bytes + t->tok_off[id], bytes, n) == 0) return id;
    }
}

static const Merge *merge_find(const Tokenizer *t, int a, int b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const Merge *m = &t->merges[i];
        if (m->rank < 0 || m->key == key) return m->rank < 0 ? NULL : m;
    }
}

// A later duplicate of a merge replaces the earlier one (as GPT-2's dict(zip(...)) does).
static void merge_put(Tokenizer *t, int a, int b, int rank, int merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = hash_u64(key) & t->merge_mask;
    while (t->merges[i].rank >= 0 && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
    t->merges[i] = (Merge){key, rank, merged};
}

// Checks one encoder.json entry; returns its id or -1 after an error line.
static int entry_id(const char *path, const cJSON *e) {
    if (!cJSON_IsNumber(e)) {
        ted_error("%s: the value of \"%s\" is not a number", path, e->string);
        return -1;
    }
    double v = e->valuedouble;
    if (!(v >= 0 && v < MAX_VOCAB) || v != (double)(int)v) {
        ted_error("%s: token \"%s\" has id %g, not an integer in [0, %d)", path, e->string, v,
                  MAX_VOCAB);
        return -1;
    }
    return (int)v;
}

// Fills the id -> bytes arrays and the bytes -> id hash from the parsed JSON object.
static int vocab_build(Tokenizer *t, const char *path, const cJSON *root) {
    int n = cJSON_GetArraySize(root), max_id = -1;
    size_t total = 0;                 // the UTF-8 keys are at least as long as their bytes
    for (const cJSON *e = root->child; e; e = e->next) {
        int id = entry_id(path, e);
        if (id < 0) return -1;
        if (id > max_id) max_id = id;
        total += strlen(e->string);
    }
    t->vocab_size = max_id + 1;
    t->tok_off = ted_alloc((size_t)t->vocab_size * sizeof(uint32_t), MEM_TEMP);
    t->tok_len = ted_alloc((size_t)t->vocab_size * sizeof(uint16_t), MEM_TEMP);
    t->tok_bytes = ted_alloc(total + 1, MEM_TEMP);
    t->vocab_mask = pow2_at_least(2 * (size_t)n) - 1;
    t->vocab_slots = ted_alloc((t->vocab_mask + 1) * sizeof(int32_t), MEM_TEMP);
    memset(t->vocab_slots, 0xff, (t->vocab_mask + 1) * sizeof(int32_t));
    uint32_t used = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        int id = entry_id(path, e);
        unsigned char *dst = (unsigned char *)t->tok_bytes + used;
        int len = alphabet_to_bytes(t->cp_byte, e->string, dst, MAX_TOKEN_BYTES);
        if (len <= 0) {
            ted_error("%s: token \"%s\" is empty, too long or not in GPT-2's byte alphabet",
                      path, e->string);
            return -1;
        }
        if (t->tok_len[id] || vocab_find(t, dst, (size_t)len) >= 0) {
            ted_error("%s: token \"%s\" or its id %d appears twice", path, e->string, id);
            return -1;
        }
        t->tok_off[id] = used;
        t->tok_len[id] = (uint16_t)len;
        used += (uint32_t)len;
        size_t i = hash_bytes(dst, (size_t)len) & t->vocab_mask;
        while (t->vocab_slots[i] >= 0) i = (i + 1) & t->vocab_mask;
        t->vocab_slots[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = vocab_find(t, &c, 1)) < 0) {
            ted_error("%s: no token for byte %d (not a GPT-2 byte-level vocabulary)", path, b);
            return -1;
        }
    }
    return 0;
}

static int load_encoder(Tokenizer *t, const char *path) {
    size_t len;
    char *text = read_regular(path, &len);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    int rc = -1;
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        ted_error("%s: not valid JSON (near byte %zu of %zu)", path, at, len);
    } else if (!cJSON_IsObject(root) || !root->child) {
        ted_error("%s: expected a JSON object mapping tokens to ids", path);
    } else {
        rc = vocab_build(t, path, root);
    }
    cJSON_Delete(root);
    ted_free(text);
    return rc;
}

// Parses "A B" (one merge line, NUL-terminated) into ids; -1 after an error line.
static int merge_line(Tokenizer *t, const char *path, int lineno, char *line, int ids[3]) {
    char *save = NULL, *a = strtok_r(line, " \t", &save), *b = strtok_r(NULL, " \t", &save);
    if (!a || !b || strtok_r(NULL, " \t", &save)) {
        ted_error("%s:%d: expected two tokens separated by a space", path, lineno);
        return -1;
    }
    unsigned char buf[2 * MAX_TOKEN_BYTES];
    int na = alphabet_to_bytes(t->cp_byte, a, buf, MAX_TOKEN_BYTES);
    int nb = na < 0 ? -1 : alphabet_to_bytes(t->cp_byte, b, buf + na, MAX_TOKEN_BYTES);
    ids[0] = na > 0 ? vocab_find(t, buf, (size_t)na) : -1;
    ids[1] = nb > 0 ? vocab_find(t, buf + na, (size_t)nb) : -1;
    ids[2] = ids[0] >= 0 && ids[1] >= 0 ? vocab_find(t, buf, (size_t)(na + nb)) : -1;
    if (ids[2] < 0) {
        ted_error("%s:%d: merge \"%s %s\" uses or makes a token not in encoder.json", path,
                  lineno, a, b);
        return -1;
    }
    return 0;
}

static int load_merges(Tokenizer *t, const char *path) {
    size_t len;
    char *text = read_regular(path, &len);
    if (!text) return -1;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    t->merge_mask = pow2_at_least(2 * lines) - 1;
    t->merges = ted_alloc((t->merge_mask + 1) * sizeof(Merge), MEM_TEMP);
    for (size_t i = 0; i <= t->merge_mask; i++) t->merges[i].rank = -1;
    int rank = 0, lineno = 0, rc = 0;
    for (char *line = text, *next; line < text + len && rc == 0; line = next) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        next = nl ? nl + 1 : text + len;
        if (nl) *nl = 0;                          // read_file put a NUL after the last line
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r') line[--n] = 0;
        lineno++;
        if ((lineno == 1 && line[0] == '#') || n == 0) continue;    // "#version: 0.2"
        if (!nl) {      // GPT-2's reader drops a last line without a newline: a cut file
            ted_error("%s:%d: the file ends inside a line (truncated?)", path, lineno);
            rc = -1;
            break;
        }
        int ids[3];
        rc = merge_line(t, path, lineno, line, ids);
        if (rc == 0) merge_put(t, ids[0], ids[1], rank++, ids[2]);
    }
    if (rc == 0 && rank == 0) {
        ted_error("%s: no merges", path);
        rc = -1;
    }
    ted_free(text);
    return rc;
}

// ---------------------------------------------------------------- the pre-tokenizer

static void *pcre_alloc(PCRE2_SIZE n, void *data) { return ted_alloc(n, MEM_TEMP); }
static void pcre_free(void *p, void *data) { ted_free(p); }

static int compile_pattern(Tokenizer *t) {
    t->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *cctx = pcre2_compile_context_create(t->gctx);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP;
#ifdef PCRE2_MATCH_INVALID_UTF
    opts |= PCRE2_MATCH_INVALID_UTF;  // invalid UTF-8 never matches instead of failing
#endif
    int err;
    PCRE2_SIZE erroff;
    t->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED, opts, &err, &erroff,
                          cctx);
    pcre2_compile_context_free(cctx);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        ted_error("tokenizer: PCRE2 cannot compile GPT-2's pattern: %s", (char *)msg);
        return -1;
    }
    if (pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0) {   // without JIT it is just slower
        t->mctx = pcre2_match_context_create(t->gctx);
        t->jit_stack = pcre2_jit_stack_create(32 * 1024, 16 << 20, t->gctx);
        if (t->mctx && t->jit_stack) pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    }
    t->md = pcre2_match_data_create_from_pattern(t->re, t->gctx);
    return 0;
}

// The next pre-token at or after *pos: sets [*start, *end). Bytes PCRE2 skipped (invalid
// UTF-8 only) become a word of their own, so every byte of the text is encoded.
static int next_word(Tokenizer *t, const char *text, size_t len, size_t pos, size_t *start,
                     size_t *end) {
    int rc = pcre2_match(t->re, (PCRE2_SPTR)text, len, pos, 0, t->md, t->mctx);
    size_t s = len, e = len;
    if (rc >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        s = ov[0];
        e = ov[1] > ov[0] ? ov[1] : ov[0] + 1;   // the pattern never matches empty; be safe
    } else if (rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        ted_error("tokenizer: PCRE2 failed at byte %zu: %s", pos, (char *)msg);
        return -1;
    }
    if (s > pos) e = s, s = pos;                  // the skipped bytes first
    *start = s;
    *end = e;
    return 0;
}

// ---------------------------------------------------------------- byte-pair merging

static int pair_less(const Pair *x, const Pair *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(Pair *h, size_t *n, Pair p) {
    size_t i = (*n)++;
    while (i > 0 && pair_less(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
}

static Pair heap_pop(Pair *h, size_t *n) {
    Pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_less(&h[c + 1], &h[c])) c++;
        if (!pair_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

// Records the pair starting at symbol pos if it has a merge.
static void add_pair(const Tokenizer *t, Pair *list, size_t *n, int pos, int heap) {
    int a = t->sym[pos], b = t->sym[t->next[pos]];
    const Merge *m = merge_find(t, a, b);
    if (!m) return;
    Pair p = {m->rank, pos, a, b, m->merged};
    if (heap) heap_push(list, n, p);
    else list[(*n)++] = p;
}

static void ensure_scratch(Tokenizer *t, size_t n) {
    if (n <= t->scratch_cap) return;
    size_t c = pow2_at_least(n);
    ted_free(t->sym); ted_free(t->next); ted_free(t->prev);
    ted_free(t->heap); ted_free(t->pending);
    t->sym = ted_alloc(c * sizeof(int), MEM_TEMP);
    t->next = ted_alloc(c * sizeof(int), MEM_TEMP);
    t->prev = ted_alloc(c * sizeof(int), MEM_TEMP);
    t->heap = ted_alloc(3 * c * sizeof(Pair), MEM_TEMP);      // n - 1 + 2 per merge
    t->pending = ted_alloc(2 * c * sizeof(Pair), MEM_TEMP);
    t->scratch_cap = c;
}

// Merges one round: every occurrence of the lowest-ranked pair, left to right. Pairs the
// merges create wait in `pending` until the round is over, as in GPT-2's loop.
static void merge_round(Tokenizer *t, size_t *hn) {
    int *sym = t->sym, *nx = t->next, *pv = t->prev;
    int32_t rank = t->heap[0].rank;
    size_t pn = 0;
    while (*hn && t->heap[0].rank == rank) {
        Pair p = heap_pop(t->heap, hn);
        int q = nx[p.pos];
        if (sym[p.pos] != p.a || q < 0 || sym[q] != p.b) continue;   // out of date
        sym[p.pos] = p.merged;
        sym[q] = -1;
        nx[p.pos] = nx[q];
        if (nx[q] >= 0) pv[nx[q]] = p.pos;
        if (pv[p.pos] >= 0) add_pair(t, t->pending, &pn, pv[p.pos], 0);
        if (nx[p.pos] >= 0) add_pair(t, t->pending, &pn, p.pos, 0);
    }
    for (size_t i = 0; i < pn; i++) heap_push(t->heap, hn, t->pending[i]);
}

// BPE of one word of n bytes; appends its ids to out.
static void bpe_word(Tokenizer *t, const unsigned char *w, size_t n, IntVec *out) {
    ensure_scratch(t, n);
    for (size_t i = 0; i < n; i++) {
        t->sym[i] = t->byte_id[w[i]];
        t->next[i] = i + 1 < n ? (int)i + 1 : -1;
        t->prev[i] = (int)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) add_pair(t, t->heap, &hn, (int)i, 1);
    while (hn) merge_round(t, &hn);
    for (int p = 0; p >= 0; p = t->next[p]) vec_push(out, t->sym[p]);  // symbol 0 stays first
}

// ---------------------------------------------------------------- the word cache

static void cache_reset(Tokenizer *t, size_t slots) {
    ted_free(t->cache);
    t->cache = ted_alloc(slots * sizeof(CacheEntry), MEM_TEMP);
    t->cache_mask = slots - 1;
    t->cache_count = t->cwords_len = t->cids_len = 0;
}

static CacheEntry *cache_slot(Tokenizer *t, const char *w, size_t n) {
    for (size_t i = hash_bytes(w, n) & t->cache_mask;; i = (i + 1) & t->cache_mask) {
        CacheEntry *e = &t->cache[i];
        if (e->wlen == 0 || (e->wlen == n && memcmp(t->cwords + e->woff, w, n) == 0)) return e;
    }
}

static void cache_grow(Tokenizer *t) {
    CacheEntry *old = t->cache;
    size_t old_slots = t->cache_mask + 1;
    t->cache = ted_alloc(2 * old_slots * sizeof(CacheEntry), MEM_TEMP);
    t->cache_mask = 2 * old_slots - 1;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].wlen) *cache_slot(t, t->cwords + old[i].woff, old[i].wlen) = old[i];
    ted_free(old);
}

static void cache_add(Tokenizer *t, const char *w, size_t n, const int *ids, size_t nids) {
    if (t->cwords_len + n + (t->cids_len + nids) * sizeof(int) > CACHE_BYTES_MAX)
        cache_reset(t, t->cache_mask + 1);
    if (2 * (t->cache_count + 1) > t->cache_mask + 1) cache_grow(t);
    t->cwords = grow(t->cwords, &t->cwords_cap, t->cwords_len + n, 1);
    t->cids = grow(t->cids, &t->cids_cap, t->cids_len + nids, sizeof(int));
    CacheEntry *e = cache_slot(t, w, n);
    *e = (CacheEntry){(uint32_t)t->cwords_len, (uint32_t)n, (uint32_t)t->cids_len,
                      (uint32_t)nids};
    memcpy(t->cwords + t->cwords_len, w, n);
    memcpy(t->cids + t->cids_len, ids, nids * sizeof(int));
    t->cwords_len += n;
    t->cids_len += nids;
    t->cache_count++;
}

static void encode_word(Tokenizer *t, const char *w, size_t n, IntVec *out) {
    if (n > CACHE_WORD_MAX) {
        bpe_word(t, (const unsigned char *)w, n, out);
        return;
    }
    CacheEntry *e = cache_slot(t, w, n);
    if (e->wlen) {
        for (uint32_t i = 0; i < e->nids; i++) vec_push(out, t->cids[e->ioff + i]);
        return;
    }
    size_t first = out->n;
    bpe_word(t, (const unsigned char *)w, n, out);
    cache_add(t, w, n, out->v + first, out->n - first);
}

// ---------------------------------------------------------------- the API

Tokenizer *tok_load(const char *dir) {
    char enc[4096], bpe[4096];
    if (!dir || snprintf(enc, sizeof enc, "%s/encoder.json", dir) >= (int)sizeof enc ||
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir) >= (int)sizeof bpe) {
        ted_error("tokenizer: no usable encoder directory given");
        return NULL;
    }
    Tokenizer *t = ted_alloc(sizeof *t, MEM_TEMP);
    byte_alphabet(t->cp_byte);
    if (load_encoder(t, enc) != 0 || load_merges(t, bpe) != 0 || compile_pattern(t) != 0) {
        tok_free(t);
        return NULL;
    }
    cache_reset(t, 1 << 12);
    return t;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    pcre2_code_free(t->re);
    pcre2_general_context_free(t->gctx);
    void *bufs[] = {t->tok_bytes, t->tok_off, t->tok_len, t->vocab_slots, t->merges, t->cache,
                    t->cwords, t->cids, t->sym, t->next, t->prev, t->heap, t->pending};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ted_free(bufs[i]);
    ted_free(t);
}

// Not thread-safe: the word cache and the scratch buffers belong to the Tokenizer.
// *ids is allocated with ted_alloc; free it with ted_free.
long tok_encode(Tokenizer *t, const char *text, size_t len, int **ids) {
    IntVec out = {0};
    out.cap = len / 3 + 16;
    out.v = ted_alloc(out.cap * sizeof(int), MEM_TEMP);
    for (size_t pos = 0; pos < len;) {
        size_t s, e;
        if (next_word(t, text, len, pos, &s, &e) != 0) {
            ted_free(out.v);
            *ids = NULL;
            return -1;
        }
        encode_word(t, text + s, e - s, &out);
        pos = e;
    }
    *ids = out.v;
    return (long)out.n;
}

int tok_decode(const Tokenizer *t, int id, char *out) {
    if (id < 0 || id >= t->vocab_size || t->tok_len[id] == 0) return 0;
    memcpy(out, t->tok_bytes + t->tok_off[id], t->tok_len[id]);
    return t->tok_len[id];
}

int tok_vocab_size(const Tokenizer *t) { return t->vocab_size; }

// ---------------------------------------------------------------- `ted tokenize`

enum { TOK_MAX_INPUTS = 4096 };
typedef struct {
    const char *encoder, *output;
    const char *inputs[TOK_MAX_INPUTS];
    int ninputs;
    double val_frac;
    long shard_tokens;
} TokArgs;

static void tok_usage(FILE *f) {
    fprintf(f,
        "usage: ted tokenize --input FILE [FILE ...] --output PREFIX [options]\n"
        "Encodes documents with GPT-2's BPE into llm.c token shards PREFIX_train_000000.bin, ...\n"
        "and PREFIX_val_000000.bin. Each text file is one document; a *.jsonl file holds one document\n"
        "per line, the \"text\" string of a JSON object. Every document is preceded by <|endoftext|>.\n"
        "Progress goes to stderr.\n"
        "  --encoder DIR       directory with encoder.json and vocab.bpe (default data/gpt2)\n"
        "  --input FILE...     the files to encode, in order (required; may be repeated)\n"
        "  --output PREFIX     where the shards go (required)\n"
        "  --val-frac F        the last fraction F of the tokens is the validation split (0.1)\n"
        "  --shard-tokens N    tokens per shard at most (100000000)\n"
        "  --help              this text\n");
}

// Parses the flags; 0 ok, 1 --help given, 2 bad usage (one line printed).
static int tok_parse(int argc, char **argv, TokArgs *a) {
    memset(a, 0, sizeof *a);
    a->encoder = "data/gpt2";
    a->val_frac = 0.1;
    a->shard_tokens = 100000000;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(f, "--encoder") && strcmp(f, "--input") && strcmp(f, "--output") &&
            strcmp(f, "--val-frac") && strcmp(f, "--shard-tokens")) {
            ted_error("tokenize: unknown option '%s' (see ted tokenize --help)", f);
            return 2;
        }
        if (!v) {
            ted_error("tokenize: option %s needs a value", f);
            return 2;
        }
        i++;
        errno = 0;
        if (!strcmp(f, "--encoder")) a->encoder = v;
        else if (!strcmp(f, "--input")) {   // one or more files, up to the next option
            for (i--; i + 1 < argc && strncmp(argv[i + 1], "--", 2); i++) {
                if (a->ninputs == TOK_MAX_INPUTS) { ted_error("tokenize: more than %d inputs", TOK_MAX_INPUTS); return 2; }
                a->inputs[a->ninputs++] = argv[i + 1];
            }
        }
        else if (!strcmp(f, "--output")) a->output = v;
        else if (!strcmp(f, "--val-frac")) {
            a->val_frac = strtod(v, &end);
            if (errno || end == v || *end || !(a->val_frac >= 0 && a->val_frac < 1)) {
                ted_error("tokenize: --val-frac %s: expected a number in [0, 1)", v);
                return 2;
            }
        } else {
            a->shard_tokens = strtol(v, &end, 10);
            if (errno || end == v || *end || a->shard_tokens < 1 || a->shard_tokens > INT32_MAX) {
                ted_error("tokenize: --shard-tokens %s: expected an integer in [1, 2^31)", v);
                return 2;
            }
        }
    }
    if (!a->ninputs || !a->output) {
        ted_error("tokenize: %s is required (see ted tokenize --help)",
                  a->ninputs ? "--output PREFIX" : "--input FILE");
        return 2;
    }
    return 0;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

// Writes one shard through name.tmp and a rename. 0 ok; -1 after an error line.
static int write_shard(const char *name, const int *tok, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ted_error("%s: %s", tmp, strerror(errno));
        return -1;
    }
    unsigned char header[256 * 4] = {0}, buf[1 << 16];
    put_le32(header, 20240520);
    put_le32(header + 4, 1);
    put_le32(header + 8, (uint32_t)n);
    int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    for (size_t i = 0; i < n && ok;) {
        size_t k = 0;
        for (; i < n && k < sizeof buf; i++, k += 2) {
            buf[k] = (unsigned char)(tok[i] & 0xff);
            buf[k + 1] = (unsigned char)(tok[i] >> 8);
        }
        ok = fwrite(buf, 1, k, f) == k;
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, name) != 0) {
        ted_error("%s: cannot write: %s", ok ? name : tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int shard_name(char *out, size_t size, const char *prefix, const char *split, int k) {
    if (snprintf(out, size, "%s_%s_%06d.bin", prefix, split, k) < (int)size) return 0;
    ted_error("tokenize: --output %s: name too long", prefix);
    return -1;
}

// Removes the shards prefix_split_K.bin, K+1, ... that an earlier, longer run left behind,
// so that they are not read as part of this corpus.
static void remove_stale(const char *prefix, const char *split, int k) {
    char name[4096];
    for (; shard_name(name, sizeof name, prefix, split, k) == 0; k++)
        if (unlink(name) != 0) break;
}

// Writes tokens in shards of at most per tokens (at least one shard, even if empty).
// Returns the number of shards, or -1.
static int write_split(const char *prefix, const char *split, const int *tok, size_t n,
                       size_t per) {
    char name[4096];
    int k = 0;
    for (size_t at = 0; at < n || k == 0; at += per, k++) {
        size_t m = n - at < per ? n - at : per;
        if (shard_name(name, sizeof name, prefix, split, k) || write_shard(name, tok + at, m))
            return -1;
    }
    remove_stale(prefix, split, k);
    return k;
}

// A growing array of token ids.
typedef struct { int *id; size_t n, cap; } Ids;

static void ids_push(Ids *x, const int *id, size_t n) {
    if (x->n + n > x->cap) {
        size_t cap = x->cap ? x->cap : 1 << 16;
        while (cap < x->n + n) cap *= 2;
        int *g = ted_alloc(cap * sizeof(int), MEM_TEMP);
        if (x->n) memcpy(g, x->id, x->n * sizeof(int));
        ted_free(x->id);
        x->id = g;
        x->cap = cap;
    }
    memcpy(x->id + x->n, id, n * sizeof(int));
    x->n += n;
}

// One document: <|endoftext|> then its tokens. 0 or -1 after an error line.
static int encode_doc(Tokenizer *t, int eot, const char *text, size_t len, Ids *out) {
    int *body = NULL;
    long n = tok_encode(t, text, len, &body);
    if (n < 0) { ted_free(body); return -1; }
    ids_push(out, &eot, 1);
    if (n) ids_push(out, body, (size_t)n);
    ted_free(body);
    return 0;
}

// The documents of a JSONL file: each line a JSON object with a "text" string (blank lines
// skipped). 0 or -1 after one line naming the file and line.
static int encode_jsonl(Tokenizer *t, int eot, const char *path, char *text, size_t len, Ids *out, long *docs) {
    long line = 0;
    for (char *p = text, *end = text + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        *nl = 0;
        line++;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q) {
            cJSON *o = cJSON_Parse(p);
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "text");
            int bad = !cJSON_IsString(x) || encode_doc(t, eot, x->valuestring, strlen(x->valuestring), out);
            if (bad && !cJSON_IsString(x)) ted_error("%s:%ld: expected a JSON object with a \"text\" string", path, line);
            cJSON_Delete(o);
            if (bad) return -1;
            (*docs)++;
        }
        p = nl + 1;
    }
    return 0;
}

static int ends_with_jsonl(const char *path) {
    size_t n = strlen(path);
    return n >= 6 && !strcmp(path + n - 6, ".jsonl");
}

// Encodes every input, each document after an <|endoftext|>; -1 after an error line.
static long encode_inputs(Tokenizer *t, const TokArgs *a, int **ids, size_t *bytes, long *docs) {
    int eot = vocab_find(t, "<|endoftext|>", 13);
    if (eot < 0) { ted_error("tokenize: the vocabulary has no <|endoftext|> token"); return -1; }
    double total = 0;
    for (int i = 0; i < a->ninputs; i++) {
        struct stat st;
        if (!stat(a->inputs[i], &st)) total += (double)st.st_size;
    }
    Ticker tk;
    ticker_start(&tk, "tokenize", "bytes", total, stderr);
    Ids out = {0};
    *bytes = 0;
    *docs = 0;
    for (int i = 0; i < a->ninputs; i++) {
        size_t len;
        char *text = read_regular(a->inputs[i], &len);
        if (!text) { ted_free(out.id); return -1; }
        int rc = ends_with_jsonl(a->inputs[i]) ? encode_jsonl(t, eot, a->inputs[i], text, len, &out, docs)
                                               : encode_doc(t, eot, text, len, &out);
        if (!ends_with_jsonl(a->inputs[i])) (*docs)++;
        ted_free(text);
        if (rc) { ted_free(out.id); return -1; }
        *bytes += len;
        ticker_update(&tk, (double)*bytes);
    }
    *ids = out.id;
    return (long)out.n;
}

// The input is a readable file and the output's directory is writable; 0, or -1 after an
// error line.
static int check_paths(const TokArgs *a) {
    struct stat st;
    for (int i = 0; i < a->ninputs; i++) {
        if (stat(a->inputs[i], &st) != 0 || access(a->inputs[i], R_OK) != 0) {
            ted_error("%s: %s", a->inputs[i], strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            ted_error("%s: not a regular file", a->inputs[i]);
            return -1;
        }
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", a->output);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (access(dir, W_OK) != 0) {
        ted_error("--output %s: directory %s: %s", a->output, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int tok_main(int argc, char **argv) {
    TokArgs a;
    int rc = tok_parse(argc, argv, &a);
    if (rc == 1) {
        tok_usage(stdout);
        return 0;
    }
    if (rc) return rc;
    if (check_paths(&a) != 0) return 2;            // before the slower vocabulary load
    double t0 = now_ms();
    Tokenizer *t = tok_load(a.encoder);
    if (!t) return 2;
    if (tok_vocab_size(t) > 65536) {
        ted_error("%s: %d tokens do not fit llm.c's uint16 shards", a.encoder, tok_vocab_size(t));
        tok_free(t);
        return 2;
    }
    int *ids = NULL;
    size_t bytes = 0;
    long docs = 0;
    long n = encode_inputs(t, &a, &ids, &bytes, &docs);
    tok_free(t);
    if (n < 0) return 2;
    size_t n_train = (size_t)((1.0 - a.val_frac) * (double)n), n_val = (size_t)n - n_train;
    int k_train = write_split(a.output, "train", ids, n_train, (size_t)a.shard_tokens);
    int k_val = 0;
    if (k_train >= 0 && a.val_frac > 0)
        k_val = write_split(a.output, "val", ids + n_train, n_val, (size_t)a.shard_tokens);
    else if (k_train >= 0)
        remove_stale(a.output, "val", 0);
    ted_free(ids);
    if (k_train < 0 || k_val < 0) return 1;
    char what[600];
    if (a.ninputs == 1) snprintf(what, sizeof what, "%s", a.inputs[0]);
    else snprintf(what, sizeof what, "%d files", a.ninputs);
    printf("tokenize: %s: %zu bytes, %ld document%s -> %ld tokens (%zu train in %d shard%s, %zu val) in %.0f ms,"
           " written to %s_{train,val}_*.bin\n", what, bytes, docs, docs == 1 ? "" : "s", n, n_train, k_train,
           k_train == 1 ? "" : "s", n_val, now_ms() - t0, a.output);
    return 0;
}

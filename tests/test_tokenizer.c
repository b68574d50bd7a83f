// test_tokenizer.c — GPT-2 BPE against ids from the independent JS encoder (the npm package
// gpt-3-encoder, data/gpt2/Encoder.js, run under node), decoding round trips, the whole of
// Moby-Dick against a checksum of the JS ids, and the error paths (missing or malformed files
// give NULL and one error line, never a crash, and free what they allocated).
// Runs from the source root: the BPE files are data/gpt2/encoder.json and data/gpt2/vocab.bpe.
#include "core/alloc.h"
#include "io/tokenizer.h"
#include "core/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"


typedef struct { const char *text; int n; int ids[32]; } Case;

// Expected ids printed by `node -e 'require("./data/gpt2/Encoder.js").encode(text)'`.
static const Case CASES[] = {
    {"Hello world", 2, {15496, 995}},
    {"Hello, world!", 4, {15496, 11, 995, 0}},
    {" the", 1, {262}},
    {"I'm here, don't panic. We'll see; they're and you've, he'd, it's", 23,
     {40, 1101, 994, 11, 836, 470, 13619, 13, 775, 1183, 766, 26, 484, 821, 290, 345, 1053, 11,
      339, 1549, 11, 340, 338}},
    {"In 1851, 3.14159 and 1000000 whales.", 13,
     {818, 1248, 4349, 11, 513, 13, 1415, 19707, 290, 1802, 2388, 24635, 13}},
    {"a  b   c\n\n\nd \n\t e  ", 15,
     {64, 220, 275, 220, 220, 269, 628, 198, 67, 220, 198, 197, 304, 220, 220}},
    {"na\xc3\xafve caf\xc3\xa9", 3, {2616, 38776, 40304}},                      // naïve café
    {"Call me Ishmael\xe2\x80\x94some years ago", 9,                               // em dash
     {14134, 502, 1148, 21720, 417, 960, 11246, 812, 2084}},
    {"emoji \xf0\x9f\x98\x80 and \xf0\x9f\x8e\x89!", 9,                           // 😀 🎉
     {368, 31370, 30325, 222, 290, 12520, 236, 231, 0}},
    {"\xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", 10,          // 中文 日本語
     {40792, 23877, 229, 10545, 245, 98, 17312, 105, 45739, 252}},
    {"<|endoftext|>", 7, {27, 91, 437, 1659, 5239, 91, 29}},   // plain text, not the special id
    {"", 0, {0}},
};

// Decodes ids and compares with the text they came from.
static int round_trips(const Tokenizer *t, const int *ids, long n, const char *text, size_t len) {
    char *out = ted_alloc((size_t)n * 256 + 1, MEM_TEMP);
    size_t at = 0;
    for (long i = 0; i < n; i++) at += (size_t)tok_decode(t, ids[i], out + at);
    int ok = at == len && memcmp(out, text, len) == 0;
    ted_free(out);
    return ok;
}

static void test_cases(Tokenizer *t) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const Case *k = &CASES[c];
        for (int pass = 0; pass < 2; pass++) {          // the second pass reads the cache
            int *ids = NULL;
            long n = tok_encode(t, k->text, strlen(k->text), &ids);
            int same = n == k->n;
            for (long i = 0; same && i < n; i++) same = ids[i] == k->ids[i];
            EXPECT(same, "encode(\"%s\") pass %d: got %ld ids (first %d), want %d (first %d)",
                   k->text, pass, n, n > 0 ? ids[0] : -1, k->n, k->ids[0]);
            EXPECT(n >= 0 && round_trips(t, ids, n, k->text, strlen(k->text)),
                   "decode(encode(\"%s\")) differs", k->text);
            ted_free(ids);
        }
    }
}

static void test_vocab(Tokenizer *t) {
    char buf[257];
    EXPECT(tok_vocab_size(t) == 50257, "vocab size %d, want 50257", tok_vocab_size(t));
    int n = tok_decode(t, 50256, buf);
    EXPECT(n == 13 && memcmp(buf, "<|endoftext|>", 13) == 0, "decode(50256) is not <|endoftext|>");
    n = tok_decode(t, 262, buf);
    EXPECT(n == 4 && memcmp(buf, " the", 4) == 0, "decode(262) is not \" the\"");
    EXPECT(tok_decode(t, -1, buf) == 0 && tok_decode(t, 50257, buf) == 0,
           "unknown ids should decode to nothing");
}

// Bytes that are not UTF-8 (and NULs) are still encoded byte by byte and decode back.
static void test_arbitrary_bytes(Tokenizer *t) {
    char bytes[4096];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof bytes; i++) {
        x = x * 1103515245u + 12345u;
        bytes[i] = (char)(x >> 16);
    }
    int *ids = NULL;
    long n = tok_encode(t, bytes, sizeof bytes, &ids);
    EXPECT(n > 0 && round_trips(t, ids, n, bytes, sizeof bytes),
           "random bytes do not round-trip (%ld ids)", n);
    ted_free(ids);
}

// The whole book: count and checksum of the ids the JS encoder gives, and the time it takes.
static void test_moby_dick(Tokenizer *t) {
    size_t len;
    char *text = read_file("data/moby-dick.txt", &len);
    if (!text) {
        printf("skip: data/moby-dick.txt is missing (bash scripts/setup.sh fetches it)\n");
        return;
    }
    double t0 = now_ms();
    int *ids = NULL;
    long n = tok_encode(t, text, len, &ids);
    double ms = now_ms() - t0;
    uint64_t h = 1469598103934665603ull, sum = 0;
    for (long i = 0; i < n; i++) h = h * 1099511628211ull + (uint64_t)ids[i], sum += (uint64_t)ids[i];
    printf("moby-dick.txt: %zu bytes -> %ld tokens in %.0f ms\n", len, n, ms);
    EXPECT(n == 317756 && sum == 1388278114ull && h == 0xa15b264bddfe6b23ull,
           "moby-dick.txt: %ld ids (sum %llu, hash %llx) differ from the JS encoder's 317756", n,
           (unsigned long long)sum, (unsigned long long)h);
    EXPECT(round_trips(t, ids, n, text, len), "moby-dick.txt does not round-trip");
    EXPECT(ms < 10000, "encoding moby-dick.txt took %.0f ms", ms);
    ted_free(ids);
    ted_free(text);
}

// ---------------------------------------------------------------- error paths

static char dir[64];

static void put(const char *name, const char *data, size_t len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        printf("FAIL: cannot write %s\n", path);
        exit(1);
    }
}

// Writes the given encoder.json and vocab.bpe and checks that loading fails cleanly.
static void expect_load_fails(const char *what, const char *enc, size_t enc_len, const char *bpe,
                              size_t bpe_len) {
    put("encoder.json", enc, enc_len);
    put("vocab.bpe", bpe, bpe_len);
    size_t before = mem_stats()->current[MEM_TEMP];
    printf("expect one error line (%s):\n", what);
    fflush(stdout);
    Tokenizer *t = tok_load(dir);
    EXPECT(t == NULL, "%s: tok_load should fail", what);
    tok_free(t);
    EXPECT(mem_stats()->current[MEM_TEMP] == before, "%s: tok_load leaked %zu bytes", what,
           mem_stats()->current[MEM_TEMP] - before);
}

static void test_errors(void) {
    printf("expect one error line (missing directory):\n");
    fflush(stdout);
    EXPECT(tok_load("/nonexistent/gpt2") == NULL, "a missing directory should give NULL");

    size_t enc_len, bpe_len;
    char *enc = read_file("data/gpt2/encoder.json", &enc_len);
    char *bpe = read_file("data/gpt2/vocab.bpe", &bpe_len);
    if (!enc || !bpe) {
        printf("FAIL: data/gpt2 is missing (bash scripts/setup.sh fetches it)\n");
        exit(1);
    }
    strcpy(dir, "/tmp/ted_tok_XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL: mkdtemp\n"); exit(1); }

    expect_load_fails("truncated encoder.json", enc, enc_len / 2, bpe, bpe_len);
    expect_load_fails("empty encoder.json", "", 0, bpe, bpe_len);
    const char *arr = "[1, 2, 3]", *str = "{\"a\": \"zero\"}", *neg = "{\"a\": -1}";
    expect_load_fails("encoder.json not an object", arr, strlen(arr), bpe, bpe_len);
    expect_load_fails("encoder.json id not a number", str, strlen(str), bpe, bpe_len);
    expect_load_fails("encoder.json negative id", neg, strlen(neg), bpe, bpe_len);
    const char *bytes = "{\"a\": 0}";   // valid, but most bytes have no token
    expect_load_fails("encoder.json without the byte tokens", bytes, strlen(bytes), bpe, bpe_len);
    expect_load_fails("vocab.bpe cut inside a line", enc, enc_len, bpe, 38);
    expect_load_fails("vocab.bpe cut inside a character", enc, enc_len, bpe, 41);
    expect_load_fails("vocab.bpe cut at the half", enc, enc_len, bpe, bpe_len / 2);
    const char *unknown = "#version: 0.2\n\xc4\xa0 t\nzzzqqq xyzzy\n";
    expect_load_fails("vocab.bpe with unknown tokens", enc, enc_len, unknown, strlen(unknown));
    const char *three = "#version: 0.2\na b c\n";
    expect_load_fails("vocab.bpe with three fields", enc, enc_len, three, strlen(three));
    expect_load_fails("empty vocab.bpe", enc, enc_len, "", 0);

    // the real files copied there load, so the failures above came from the damage
    put("encoder.json", enc, enc_len);
    put("vocab.bpe", bpe, bpe_len);
    Tokenizer *t = tok_load(dir);
    EXPECT(t != NULL, "the intact copies in %s should load", dir);
    tok_free(t);

    char path[128];
    snprintf(path, sizeof path, "%s/encoder.json", dir); unlink(path);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir); unlink(path);
    rmdir(dir);
    ted_free(enc);
    ted_free(bpe);
}

int main(void) {
    size_t base = mem_stats()->current[MEM_TEMP];
    Tokenizer *t = tok_load("data/gpt2");
    if (!t) {
        printf("FAIL: cannot load data/gpt2 (run from the source root; bash scripts/setup.sh)\n");
        return 1;
    }
    test_vocab(t);
    test_cases(t);
    test_arbitrary_bytes(t);
    test_moby_dick(t);
    tok_free(t);
    EXPECT(mem_stats()->current[MEM_TEMP] == base, "tok_free left %zu bytes allocated",
           mem_stats()->current[MEM_TEMP] - base);
    test_errors();
    return test_exit("test_tokenizer");
}

// fuzz_tokenizer.c — the GPT-2 tokenizer files: the input is split at its first NUL byte into
// encoder.json and vocab.bpe (tok_load); a tokenizer that loads encodes a text and the input's
// tail, and decodes every id back.
#include <stdint.h>
#include "core/alloc.h"
#include "io/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    const uint8_t *nul = memchr(data, 0, n);
    size_t a = nul ? (size_t)(nul - data) : n, b = nul ? n - a - 1 : 0;
    fuzz_file("encoder.json", data, a, p, sizeof p);
    fuzz_file("vocab.bpe", nul ? nul + 1 : data, b, p, sizeof p);
    Tokenizer *t = tok_load(fuzz_path("", p, sizeof p));
    if (!t) return 0;
    const char *text = "Call me Ishmael. Some years ago\n\t 123 don't";
    for (int pass = 0; pass < 2; pass++) {
        int *ids = NULL;
        long k = pass ? tok_encode(t, (const char *)(nul ? nul + 1 : data), b, &ids) : tok_encode(t, text, strlen(text), &ids);
        char piece[1024];
        for (long i = 0; i < k; i++) {
            if (ids[i] < 0 || ids[i] >= tok_vocab_size(t)) abort();
            tok_decode(t, ids[i], piece);
        }
        if (ids) ted_free(ids);
    }
    tok_free(t);
    return 0;
}

// fuzz_token_shard.c — a token shard (llm.c format: 256 int32 header, uint16 tokens) through
// data_load_whole; the tokens it accepts are all read.
#include <stdint.h>
#include "core/alloc.h"
#include "io/data.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    Split s;
    if (data_load_whole(&s, fuzz_file("shard_train_000000.bin", data, n, p, sizeof p)) != 0) return 0;
    volatile long sum = 0;
    for (long i = 0; i < s.n; i++) sum += s.tok[i];
    ted_free(s.tok);
    return 0;
}

// fuzz_safetensors.c — a .safetensors file (st_open): every tensor it lists is read whole.
#include <stdint.h>
#include "io/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    StFile *f = st_open(fuzz_file("model.safetensors", data, n, p, sizeof p));
    if (!f) return 0;
    volatile float sink = 0;
    for (int i = 0; i < st_count(f); i++) {
        int nd;
        int64_t sh[4];
        const float *x = st_get(f, st_name(f, i), &nd, sh);
        if (!x) continue;
        int64_t elems = 1;
        for (int k = 0; k < nd; k++) elems *= sh[k];
        for (int64_t j = 0; j < elems; j++) sink += x[j];
    }
    st_close(f);
    return 0;
}

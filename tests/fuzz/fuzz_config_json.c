// fuzz_config_json.c — the training JSON config (config_load_json), then the validation.
#include <stdint.h>
#include "config/config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    Config c;
    config_defaults(&c);
    if (config_load_json(&c, fuzz_file("config.json", data, n, p, sizeof p)) == 0) config_validate(&c);
    return 0;
}

// fuzz_checkpoint_config.c — a checkpoint's flat config.json (config_load_model_json, which
// validates it); a config that passes is written back and read again: the same model.
#include <stdint.h>
#include "core/alloc.h"
#include "config/config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    Config c, d;
    config_defaults(&c);
    if (config_load_model_json(&c, fuzz_file("config.json", data, n, p, sizeof p)) != 0) return 0;
    char *text = config_model_json(&c);
    config_defaults(&d);
    int rc = config_load_model_json(&d, fuzz_file("again.json", (const uint8_t *)text, strlen(text), p, sizeof p));
    ted_free(text);
    if (rc != 0 || (memcmp(&c.model, &d.model, sizeof c.model) != 0 && c.model.n_inner != 0)) abort();
    return 0;
}

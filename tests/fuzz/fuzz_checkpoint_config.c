// fuzz_checkpoint_config.c — a checkpoint's flat config.json (config_load_model_json, which
// validates it); a config that passes is written back and read again: the same model, written
// the same (the widths whose 0 stands for another key are written as the values they are).
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
    char *again = rc == 0 ? config_model_json(&d) : NULL;
    if (rc != 0 || strcmp(text, again) != 0) abort();
    ted_free(again);
    ted_free(text);
    return 0;
}

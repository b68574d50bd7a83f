// fuzz_trainer_state.c — a checkpoint's trainer_state.json (read_trainer_state): what it
// accepts is within the documented ranges.
#include <stdint.h>
#include "io/checkpoint.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char p[128];
    TrainerState st = {0};
    if (read_trainer_state(fuzz_file("trainer_state.json", data, n, p, sizeof p), &st) != 0) return 0;
    if (st.steps < 0 || st.steps > 2147483647L || st.step < 0 || st.step > st.steps || st.adam_t < 0 || st.adam_t > st.step)
        abort();
    return 0;
}

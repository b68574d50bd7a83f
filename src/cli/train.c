// train.c — `ted train`: a run opened (its configuration resolved, its inputs checked, the
// model built or resumed), the trainer's steps with what follows each, the run closed.
#include "cli/commands.h"
#include "cli/opts.h"
#include "core/util.h"
#include "run/run.h"
#include <string.h>

int cmd_train(int argc, char **argv) {
    const char *v;
    if (opts_find(argc, argv, "--help", &v) || opts_find(argc, argv, "-h", &v)) {
        config_print_train_help();
        return 0;
    }
    static Run R;   // large (the config's paths); one per process
    memset(&R, 0, sizeof R);
    if (run_open(&R, argc, argv)) return TED_EXIT_USAGE;
    if (R.done) return 0;   // --dry-run, or a resumed run already complete
    for (long s = R.st.step; s < R.c.steps; s++) {
        StepMetrics m = trainer_step(&R.tr, s);
        int rc = run_after_step(&R, s, &m);
        if (rc) return rc < 0 ? 1 : rc;
    }
    return run_close(&R);
}

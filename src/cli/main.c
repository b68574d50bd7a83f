// main.c — `ted <command>`: train | generate | eval | tokenize | plan | bench | compare | tune | upcycle.
#include "cli/commands.h"
#include "cli/opts.h"
#include "config/tables.h"
#include "core/util.h"
#include "io/progress.h"
#include "io/tokenizer.h"
#include "parallel/comm.h"
#include "run/threads.h"
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ted <command> [options]   (ted <command> --help for its options; ted --version)\n"
            "  train      train an MoE GPT (one process, or under mpirun with --tp/--ep)\n"
            "  eval       mean loss of a checkpoint over the validation split (or any split, any windows)\n"
            "  generate   sample text from a checkpoint\n"
            "  tokenize   text -> GPT-2 BPE token shards (llm.c format)\n"
            "  plan       model-state memory per GPU under TED, and the largest model that fits\n"
            "  bench      time training steps of the benchmark model\n"
            "  compare    the first step and tensor where two training logs part\n"
            "  tune       the fastest layouts of a model on a cluster, by the performance model\n"
            "  upcycle    grow a dense checkpoint into an MoE whose first step equals it\n");
}

static const char *const commands[] = {"train", "eval", "generate", "tokenize", "plan", "bench", "compare", "tune", "upcycle"};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

// An unknown command: one line, with the nearest command when it is at most two edits away and
// half the typed length ("trian": train; "run" is not "tune").
static void unknown_command(const char *cmd) {
    int len = (int)strlen(cmd), best = -1, d = (len / 2 < 2 ? len / 2 : 2) + 1;
    for (int i = 0; i < NCOMMANDS; i++) {
        int e = config_edit_distance(cmd, commands[i]);
        if (e < d) { d = e; best = i; }
    }
    if (best >= 0) ted_error("unknown command \"%s\": did you mean %s? (ted --help lists them)", cmd, commands[best]);
    else ted_error("unknown command \"%s\" (ted --help lists them)", cmd);
}

static void version(void) {
#ifdef TED_CUDA
    const char *cuda = "with the CUDA backend";
#else
    const char *cuda = "without the CUDA backend (no nvcc at build time)";
#endif
    printf("ted %s, %s\n", TED_VERSION, cuda);
}

int main(int argc, char **argv) {
    // a console redirected to a file shows each line as it is printed; help text stays one
    // write (`ted x --help | grep -q ...` must not meet a closed pipe half-way)
    threads_wait_policy(argv);
    if (!opts_help(argc, argv)) progress_line_buffered();
    comm_init(&argc, &argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        comm_finalize();
        return argc < 2 ? TED_EXIT_USAGE : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        version();
        comm_finalize();
        return 0;
    }
    int rc;
    if (!strcmp(cmd, "train")) rc = cmd_train(argc - 1, argv + 1);
    else if (!strcmp(cmd, "eval")) rc = cmd_eval(argc - 1, argv + 1);
    else if (!strcmp(cmd, "generate")) rc = cmd_generate(argc - 1, argv + 1);
    else if (!strcmp(cmd, "tokenize")) rc = tok_main(argc - 1, argv + 1);
    else if (!strcmp(cmd, "bench")) rc = cmd_bench(argc - 1, argv + 1);
    else if (!strcmp(cmd, "plan")) rc = cmd_plan(argc - 1, argv + 1);
    else if (!strcmp(cmd, "compare")) rc = cmd_compare(argc - 1, argv + 1);
    else if (!strcmp(cmd, "tune")) rc = cmd_tune(argc - 1, argv + 1);
    else if (!strcmp(cmd, "upcycle")) rc = cmd_upcycle(argc - 1, argv + 1);
    else { unknown_command(cmd); rc = TED_EXIT_USAGE; }
    // every rank ends here together: failures were agreed (ted_agree) where they can happen
    ted_agree(rc != 0);
    comm_finalize();
    return rc;
}

// main.c — `ted <command>`: train | generate | eval | tokenize | plan | bench | compare | tune | upcycle.
#include "cli/commands.h"
#include "cli/opts.h"
#include "core/util.h"
#include "io/progress.h"
#include "io/tokenizer.h"
#include "parallel/comm.h"
#include "run/threads.h"
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ted <command> [options]   (ted <command> --help for its options)\n"
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
    else { ted_error("unknown command \"%s\" (ted --help lists them)", cmd); rc = TED_EXIT_USAGE; }
    // every rank ends here together: failures were agreed (ted_agree) where they can happen
    ted_agree(rc != 0);
    comm_finalize();
    return rc;
}

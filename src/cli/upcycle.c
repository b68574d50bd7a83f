// upcycle.c — `ted upcycle`: its options and its report (the work: io/upcycle.c).
#include "cli/commands.h"
#include "cli/opts.h"
#include "io/upcycle.h"
#include "parallel/comm.h"
#include "core/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: ted upcycle --load DENSE --num-experts E [--top-k K] [--granularity G] [--moe-every N]\n"
           "                  [--router topk|mixtral|noisy_topk] [--seed S] --save DIR\n"
           "  Grows a dense checkpoint (a ted folder, or a GPT-2 or Llama folder as transformers saves it) into\n"
           "  an MoE whose first forward equals the dense model's: every expert is a copy of its block's FFN\n"
           "  (a llama FFN becomes Mixtral-layout experts); with --granularity G the FFN's inner size is cut\n"
           "  into G finer experts (E = G x copies, top-k K x G, the output projection x G). Router topk\n"
           "  (renormalised top-k), mixtral (renormalised at top-1 too) or noisy_topk (when G is 1), N(0,\n"
           "  0.02) from --seed (default 1337) with the G slices of a copy sharing a column; dropless\n"
           "  (capacity_factor 0). K defaults to min(2, E/G); topk top-1 without granularity is refused (its\n"
           "  gate is p_e, not 1), as are switch, gshard and expert_choice. MoE in every\n"
           "  N-th block (default 1: all). DIR must not exist; it gets model.safetensors and config.json, no\n"
           "  optimizer state: train it with ted train --init-from DIR. docs/upcycle.md.\n");
}

static int options(int argc, char **argv, UpcycleOpts *u) {
    const char *load = NULL, *save = NULL, *ne = NULL, *tk = "0", *gr = "1", *me = "1", *router = "topk", *seed = "1337";
    Opt o[] = {{"--load", &load}, {"--save", &save}, {"--num-experts", &ne}, {"--top-k", &tk}, {"--granularity", &gr},
               {"--moe-every", &me}, {"--router", &router}, {"--seed", &seed}};
    if (opts_parse(argc, argv, o, 8, "upcycle")) return -1;
    if (!load || !save || !ne) { ted_error("upcycle: --load, --num-experts and --save are required (see ted upcycle --help)"); return -1; }
    long e, k, g, m, s;
    if (opts_long("upcycle", "--num-experts", ne, 1, 1 << 16, &e) || opts_long("upcycle", "--top-k", tk, 0, 1 << 16, &k) ||
        opts_long("upcycle", "--granularity", gr, 1, 1 << 16, &g) || opts_long("upcycle", "--moe-every", me, 1, 1 << 16, &m) ||
        opts_long("upcycle", "--seed", seed, 0, 1L << 62, &s))
        return -1;
    static char dir[1024];   // without trailing slashes: the temporary folder is its sibling
    snprintf(dir, sizeof dir, "%s", save);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = 0;
    *u = (UpcycleOpts){load, dir, (int)e, (int)k, (int)g, (int)m, router, (uint64_t)s};
    return 0;
}

int cmd_upcycle(int argc, char **argv) {
    if (opts_help(argc, argv)) { help(); return 0; }
    if (comm_world_size() > 1) { ted_error("upcycle: runs as one process (not under mpirun)"); return TED_EXIT_USAGE; }
    UpcycleOpts u;
    UpcycleResult r;
    if (options(argc, argv, &u) || upcycle_run(&u, &r)) return TED_EXIT_USAGE;
    printf("upcycled %s into %s: %d experts (%d copies x granularity %d, expert_inner %d), top_k %d, router %s "
           "(seed %llu), dropless, MoE in %d blocks; %ld parameters; no optimizer state: train it with "
           "ted train --init-from %s\n", r.dense, u.save, u.experts, r.copies, u.granularity, r.expert_inner, r.top_k,
           u.router, (unsigned long long)u.seed, r.moe_blocks, r.params, u.save);
    return 0;
}

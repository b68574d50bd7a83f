// topology.c — ranks and groups (design §4).
#include "parallel/topology.h"
#include <stdio.h>

int topo_check(int world, int tp, int ep, int pp, char *err, size_t errlen) {
    if (tp < 1 || ep < 1 || pp < 1) { snprintf(err, errlen, "--tp, --ep and --pp must be >= 1"); return -1; }
    if (world % ((long)pp * tp)) {
        snprintf(err, errlen, "world size %d is not divisible by pp x tp = %ld", world, (long)pp * tp);
        return -1;
    }
    int dp = world / (pp * tp);
    if (dp % ep) { snprintf(err, errlen, "dp = world/tp = %d is not divisible by ep %d", dp, ep); return -1; }
    return 0;
}

void topo_init(Topology *t, int tp, int ep, int pp) {
    t->world = comm_world_size();
    t->rank = comm_world_rank();
    t->pp = pp;
    t->tp = tp; t->ep = ep;
    t->dp = t->world / (t->pp * tp);
    t->edp = t->dp / ep;
    t->tp_idx = t->rank % tp;
    t->dp_idx = (t->rank / tp) % t->dp;
    t->ep_idx = t->dp_idx % ep;
    t->edp_idx = t->dp_idx / ep;
    t->stage = t->rank / (t->dp * tp);
    // color = what the members share; key = position inside the group
    t->g[GROUP_TP] = comm_group(GROUP_TP, t->stage * t->dp + t->dp_idx, t->tp_idx);
    t->g[GROUP_DP] = comm_group(GROUP_DP, t->stage * t->tp + t->tp_idx, t->dp_idx);
    t->g[GROUP_EP] = comm_group(GROUP_EP, (t->stage * t->tp + t->tp_idx) * t->edp + t->edp_idx, t->ep_idx);
    t->g[GROUP_EDP] = comm_group(GROUP_EDP, (t->stage * t->tp + t->tp_idx) * ep + t->ep_idx, t->edp_idx);
    t->g[GROUP_PP] = comm_group(GROUP_PP, t->dp_idx * tp + t->tp_idx, t->stage);
    t->g[GROUP_WORLD] = comm_group(GROUP_WORLD, 0, t->rank);
    t->g[GROUP_STAGE] = comm_group(GROUP_STAGE, t->stage, t->dp_idx * tp + t->tp_idx);
}

void topo_print(const Topology *t, int num_experts) {
    if (t->rank) return;
    printf("layout: G %d  tp %d  dp %d  ep %d  edp %d  pp %d  experts/rank %d\n", t->world, t->tp, t->dp,
           t->ep, t->edp, t->pp, num_experts > 1 ? num_experts / t->ep : 0);
}

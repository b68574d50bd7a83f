// topology.c — ranks and groups (design §4).
#include "parallel/topology.h"
#include "core/alloc.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

// Where rank r sits in the layout (the formulas of topology.h), for any rank, not only this one.
static void place(const Topology *t, int r, int *tp_idx, int *dp_idx, int *stage) {
    *tp_idx = r % t->tp;
    *dp_idx = (r / t->tp) % t->dp;
    *stage = r / (t->dp * t->tp);
}

int topo_group_of(const Topology *t, GroupKind kind, int r, int *key) {
    int ti, di, st;
    place(t, r, &ti, &di, &st);
    int ei = di % t->ep, edi = di / t->ep;
    switch (kind) {
        case GROUP_TP: *key = ti; return st * t->dp + di;
        case GROUP_DP: *key = di; return st * t->tp + ti;
        case GROUP_EP: *key = ei; return (st * t->tp + ti) * t->edp + edi;
        case GROUP_EDP: *key = edi; return (st * t->tp + ti) * t->ep + ei;
        case GROUP_PP: *key = st; return di * t->tp + ti;
        case GROUP_STAGE: *key = di * t->tp + ti; return st;
        default: *key = r; return 0;
    }
}

void topo_init(Topology *t, int tp, int ep, int pp) {
    t->world = comm_world_size();
    t->rank = comm_world_rank();
    t->pp = pp;
    t->tp = tp; t->ep = ep;
    t->dp = t->world / (t->pp * tp);
    t->edp = t->dp / ep;
    place(t, t->rank, &t->tp_idx, &t->dp_idx, &t->stage);
    t->ep_idx = t->dp_idx % ep;
    t->edp_idx = t->dp_idx / ep;
    for (int k = 0; k < GROUP_N; k++) {
        int key, color = topo_group_of(t, (GroupKind)k, t->rank, &key);
        t->g[k] = comm_group((GroupKind)k, color, key);
    }
}

void topo_print(const Topology *t, int num_experts) {
    if (t->rank) return;
    printf("layout: G %d  tp %d  dp %d  ep %d  edp %d  pp %d", t->world, t->tp, t->dp, t->ep, t->edp, t->pp);
    if (num_experts > 1) printf("  experts/rank %d", num_experts / t->ep);
    printf("\n");
}

// Node index of every rank (node = host name, in order of first appearance); returns the node count.
static int gather_nodes(const Topology *t, int *node_of) {
    enum { HN = 64 };
    char me[HN] = {0};
    gethostname(me, HN - 1);
    char *all = ted_alloc((size_t)t->world * HN, MEM_TEMP);
    Group w = t->g[GROUP_WORLD];
    comm_allgather(&w, me, all, HN, DT_BYTE);
    int n = 0;
    for (int r = 0; r < t->world; r++) {
        node_of[r] = -1;
        for (int q = 0; q < r && node_of[r] < 0; q++)
            if (!strcmp(all + (size_t)q * HN, all + (size_t)r * HN)) node_of[r] = node_of[q];
        if (node_of[r] < 0) node_of[r] = n++;
    }
    ted_free(all);
    return n;
}

// How many groups of `kind` there are, and how many of them hold ranks of more than one node.
static void count_crossing(const Topology *t, GroupKind kind, const int *node_of, int *groups, int *crossing) {
    int size = kind == GROUP_TP ? t->tp : kind == GROUP_DP ? t->dp : kind == GROUP_EP ? t->ep
             : kind == GROUP_EDP ? t->edp : t->pp;
    *groups = t->world / size;
    *crossing = 0;
    for (int c = 0; c < *groups; c++) {
        int first = -1, crosses = 0, key;
        for (int r = 0; r < t->world; r++) {
            if (topo_group_of(t, kind, r, &key) != c) continue;
            if (first < 0) first = node_of[r];
            else if (node_of[r] != first) crosses = 1;
        }
        *crossing += crosses;
    }
}

int topo_print_placement(const Topology *t) {
    int *node_of = ted_alloc(sizeof(int) * t->world, MEM_TEMP);
    int nodes = gather_nodes(t, node_of), tp_cross = 0;
    if (nodes > 1 && t->rank == 0) {
        printf("placement: %d ranks on %d nodes; groups across nodes:", t->world, nodes);
        const GroupKind kinds[] = {GROUP_TP, GROUP_EP, GROUP_EDP, GROUP_DP, GROUP_PP};
        for (int i = 0; i < 5; i++) {
            int groups, crossing;
            count_crossing(t, kinds[i], node_of, &groups, &crossing);
            printf(" %s %d/%d", comm_group_name(kinds[i]), crossing, groups);
            if (kinds[i] == GROUP_TP) tp_cross = crossing;
        }
        printf("\n");
        if (tp_cross)
            printf("warning: %d TP group(s) span nodes: TP all-reduces twice per block; keep tp within a node's ranks "
                   "(ranks fill a node before the next, TP innermost)\n", tp_cross);
        fflush(stdout);
    }
    ted_free(node_of);
    return nodes;
}

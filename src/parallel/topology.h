// topology.h — the rank layout of design §4: G = pp·tp·dp, dp = ep·edp, TP innermost:
// rank = (stage·dp + dp_idx)·tp + tp_idx, dp_idx = edp_idx·ep + ep_idx.
#pragma once
#include "parallel/comm.h"

typedef struct {
    int world, rank;
    int tp, dp, ep, edp, pp;
    int tp_idx, dp_idx, ep_idx, edp_idx, stage;
    Group g[GROUP_N];   // this rank's TP, DP, EP, expert-DP, PP and world groups
} Topology;

// Checks the layout (G % (pp·tp), dp % ep, ...). Returns 0, or -1 with the problem in err.
int topo_check(int world, int tp, int ep, int pp, char *err, size_t errlen);
// Fills t for this process and creates the groups (collective over the world).
void topo_init(Topology *t, int tp, int ep, int pp);
// The group of `kind` rank r belongs to, for any rank (only t's degrees tp, dp, ep, edp are read):
// returns its color (what the members share) and sets key (the position inside).
int topo_group_of(const Topology *t, GroupKind kind, int r, int *key);
void topo_print(const Topology *t, int num_experts);
// Multi-node runs (node = host name, gathered over the world; collective): rank 0 prints how many
// groups of each kind (tp, ep, edp, dp, pp) hold ranks of more than one node, and warns when a TP
// group does. Prints nothing on one node. Returns the number of nodes.
int topo_print_placement(const Topology *t);

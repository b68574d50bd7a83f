// calibrate.h — `ted tune --calibrate`: a cluster file measured on the machines it runs on
// (under mpirun, one rank per device): nodes and devices per node from the ranks' host names,
// the fp32 GEMM rate every rank gets while all of them multiply at once (the slowest counts),
// memory per device (the node's memory over its ranks), and per level the latency (8-byte
// ping-pong) and bandwidth (8 MB messages) between rank 0 and a rank on its node, and between the
// ranks of rank 0's node and their twins on the next node, all at once (a device's share of the uplink).
// A level with no such pair keeps the other level's figures (one node: inter = intra), and one
// process measures no link at all (nominal figures, said in the file's note).
#pragma once
#include "perf/cluster.h"

// Collective over the world. Fills c; returns 0, or -1 after one line (uneven ranks per node).
int perf_calibrate(Cluster *c, char *note, int notelen);
// The cluster as a cluster file's JSON text (malloc'd through ted_alloc).
char *cluster_json(const Cluster *c, const char *note);

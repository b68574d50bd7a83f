// cluster.h — a cluster as the performance model sees it: nodes of devices, each device's
// peak, GEMM efficiency and memory, and per network level (inside a node, between nodes) the
// bandwidth one device gets and the latency of one message. Read from a JSON file, or a preset
// by name from configs/clusters/ (this machine, the namespace cluster, DGX A100 and H100
// nodes, Summit as the TED paper used it):
//   {"name": "...", "nodes": N, "devices_per_node": D,
//    "device": {"peak_tflops": P, "gemm_efficiency": e, "memory_gb": M [, "kind": "cpu"|"cuda", "shared_by": S, "meet_us": W]},
//    "intra": {"bandwidth_gbs": B, "latency_us": L}, "inter": {"bandwidth_gbs": B, "latency_us": L [, "burst_kb": K]}}
#pragma once

// bytes/s a device sends at; seconds per message; bytes a device sends at once on a link that has been
// idle (its share of a token bucket, as tc's tbf and cloud networks shape links; 0 = none)
typedef struct { double bw, lat, burst; } Link;

typedef struct {
    char name[64];
    int nodes, per_node;   // devices per node
    int gpu;               // device.kind "cuda": ted train runs there with --device cuda (default "cpu")
    double peak;           // FLOP/s of one device at the run's precision
    double gemm_eff;       // the share of the peak the model's GEMMs reach
    double mem;            // bytes of one device
    double shared_by;      // the CPU test bed (ranks > cores): peak is then the rate of a device while all are busy,
                           // and one alone runs shared_by× faster (calibrated); 1 = devices of their own
    double meet;           // seconds a TP or EP collective waits for its peers between pieces of compute, per call,
                           // beyond its bytes: on shared cores a peer waits for a core (calibrated); 0 = none
    Link intra, inter;
} Cluster;

// Reads `what`: a file path, or a preset name (configs/clusters/NAME.json beside the working
// directory or the ted binary). 0, or -1 after one line naming the file and the key.
int cluster_load(Cluster *c, const char *what);
static inline int cluster_devices(const Cluster *c) { return c->nodes * c->per_node; }

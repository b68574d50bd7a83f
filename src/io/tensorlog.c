// tensorlog.c — per-tensor diagnostics (see tensorlog.h).
#include "io/tensorlog.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "parallel/comm.h"
#include "moe/router.h"
#include "core/util.h"
#include <math.h>
#include <string.h>

static int versions(const Model *M, const Param *p) { return p->expert < 0 ? 1 : M->topo->ep; }

int tensorlog_init(TensorLog *t, const Model *M, const Config *c) {
    memset(t, 0, sizeof *t);
    if (c->debug_expert_grad_scale != 1.0f && (cfg_precision(c) != PREC_FP32 || c->device == DEV_CUDA)) {
        ted_error("--debug-expert-grad-scale: needs fp32 on the CPU");
        return -1;
    }
    if (!c->log_tensors) return 0;
    const Registry *r = &M->reg;
    t->slot = ted_alloc(sizeof(int) * r->n, MEM_TEMP);
    for (int i = 0; i < r->n; i++) { t->slot[i] = t->nslots; t->nslots += versions(M, &r->p[i]); }
    t->sum = ted_alloc(sizeof(double) * (t->nslots + (long)M->L * M->E), MEM_TEMP);
    memset(t->sum, 0, sizeof(double) * (t->nslots + (long)M->L * M->E));
    return 0;
}

void tensorlog_count(TensorLog *t, const Model *M) {
    if (!t->sum || M->topo->tp_idx != 0) return;   // TP ranks hold the same tokens: count once
    long N = (long)M->B * M->Tc;
    int G = router_ngroups(N, M->moe.rcfg.group_tokens), E = M->E;
    double *tok = t->sum + t->nslots;
    int *host = ted_alloc(sizeof(int) * G * E, MEM_TEMP);   // a GPU run's counts, read through a host copy
    for (int l = 0; l < M->L; l++) {
        if (!M->bp[l].moe) continue;
        const int *kept = buf_to_host(host, M->ba[l].moe.kept, sizeof(int) * G * E);
        for (int g = 0; g < G; g++)
            for (int e = 0; e < E; e++) tok[(long)l * E + e] += kept[(long)g * E + e];
    }
    ted_free(host);
}

void tensorlog_debug_scale(const Model *M, const Config *c) {
    if (c->debug_expert_grad_scale == 1.0f || M->topo->ep == 1) return;
    const Registry *r = &M->reg;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        if (p->expert < 0) continue;
        for (long j = 0; j < p->numel; j++) p->g[j] *= c->debug_expert_grad_scale;
    }
}

static void write_line(const TensorLog *t, const Model *M, FILE *log, long step, float margin) {
    const Registry *r = &M->reg;
    fprintf(log, "{\"tensors_step\": %ld, \"grad_norm\": {", step);
    int first = 1;
    for (int i = 0; i < r->n; i++) {
        const Param *p = &r->p[i];
        for (int s = 0; s < versions(M, p); s++) {
            char name[160];
            param_name_for_expert(p, s * M->El + (p->expert - M->topo->ep_idx * M->El), name, sizeof name);
            fprintf(log, "%s\"%s\": %.9g", first ? "" : ", ", name, sqrt(t->sum[t->slot[i] + s]));
            first = 0;
        }
    }
    fprintf(log, "}, \"tokens_per_expert\": {");
    first = 1;
    for (int l = 0; l < M->L; l++) {
        if (!M->bp[l].moe) continue;
        fprintf(log, "%s\"transformer.h.%d.mlp\": [", first ? "" : ", ", l);
        for (int e = 0; e < M->E; e++) fprintf(log, "%s%.0f", e ? ", " : "", t->sum[t->nslots + (long)l * M->E + e]);
        fprintf(log, "]");
        first = 0;
    }
    fprintf(log, "}");
    if (isfinite(margin)) fprintf(log, ", \"route_margin\": %.3g", (double)margin);
    fprintf(log, "}\n");
    write_check(log, NULL);
}

void tensorlog_write(TensorLog *t, const Model *M, const Zero *z, FILE *log, long step) {
    if (!t->sum) return;
    const Registry *r = &M->reg;
    const Topology *tp = M->topo;
    const double *sq = buf_to_host(z->sq_host, z->sq, sizeof(double) * r->n);
    for (int i = 0; i < r->n; i++) {   // this rank's part of each full tensor (as the global norm counts it)
        const Param *p = &r->p[i];
        if (p->split_dim >= 0 || tp->tp_idx == 0) t->sum[t->slot[i] + (p->expert < 0 ? 0 : tp->ep_idx)] = sq[i];
    }
    long n = t->nslots + (long)M->L * M->E;
    comm_allreduce((Group *)&tp->g[GROUP_WORLD], t->sum, n, DT_F64);
    // the step's closest routing choice over every rank (the max of its negation)
    float neg = M->rstats.margins ? -(float)M->rstats.min_margin : -INFINITY;
    comm_allreduce_max((Group *)&tp->g[GROUP_WORLD], &neg, 1);
    if (log && tp->rank == 0) write_line(t, M, log, step, -neg);
    memset(t->sum, 0, sizeof(double) * n);
}

void tensorlog_free(TensorLog *t) { ted_free(t->slot); ted_free(t->sum); memset(t, 0, sizeof *t); }

// router.c — top-k token-choice routing, capacity and drops, aux and z losses (see router.h).
#include "backend.h"
#include "router.h"
#include "router_token.h"
#include "alloc.h"
#include <math.h>
#include <string.h>

int router_capacity(const RouterCfg *c, long S) {
    if (c->capacity_factor <= 0) return (int)S;     // dropless: an expert can take every token
    // cf is a float (1.1 is 1.10000002): forgive that much relative error before rounding up
    double x = (double)c->capacity_factor * c->k * S / c->E;
    long C = (long)ceil(x * (1.0 - 1e-6));
    if (C < c->min_capacity) C = c->min_capacity;
    if (C > S) C = S;
    return (int)C;
}

void router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount,
                    int *kept, long N, const RouterCfg *c, RouterStats *st) {
    ON_GPU(cu_router_forward(probs, lse, choice, gate, slot, fcount, kept, N, c, st));
    int E = c->E, k = c->k;
    // softmax, logsumexp, top-k (strictly greater wins, so ties go to the lower index)
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        float *p = probs + t * E, mx = -INFINITY;
        double s = 0;
        for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++) s += exp((double)(p[e] - mx));
        lse[t] = (float)(log(s) + mx);
        for (int e = 0; e < E; e++) p[e] = (float)exp((double)(p[e] - mx)) / (float)s;
        float sum = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= choice[t * k + i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            choice[t * k + j] = best;
            sum += p[best];
        }
        for (int j = 0; j < k; j++) gate[t * k + j] = k == 1 ? p[choice[t * k]] : p[choice[t * k + j]] / sum;
    }
    // capacity per group, choice-major then token order
    int G = router_ngroups(N, c->group_tokens);
    for (int g = 0; g < G; g++) {
        long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
        int C = router_capacity(c, S);
        int *used = kept + (long)g * E;
        float *f = fcount + (long)g * E;
        memset(used, 0, sizeof(int) * E);
        memset(f, 0, sizeof(float) * E);
        for (int j = 0; j < k; j++)
            for (long t = t0; t < t0 + S; t++) {
                int e = choice[t * k + j];
                f[e] += 1.0f;
                if (used[e] < C) slot[t * k + j] = used[e]++;
                else { slot[t * k + j] = -1; st->dropped++; }
            }
        // l_aux = E · Σ_e f_e · P_e
        double aux = 0;
        for (int e = 0; e < E; e++) {
            f[e] /= (float)(k * S);
            double P = 0;
            for (long t = t0; t < t0 + S; t++) P += probs[t * E + e];
            aux += f[e] * (P / S);
        }
        st->aux_sum += E * aux;
    }
    router_stats_batch(st, lse, N, G, k);
}

void router_stats_batch(RouterStats *st, const float *lse, long N, int G, int k) {
    double z = 0;
    for (long t = 0; t < N; t++) z += (double)lse[t] * lse[t];
    st->z_sum += z;
    st->groups += G;
    st->tokens += N;
    st->choices += N * k;
}

void router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse,
                     const int *choice, const float *fcount, long N, const RouterCfg *c,
                     float aux_scale, float z_scale) {
    ON_GPU(cu_router_backward(dlogits, dgate, probs, lse, choice, fcount, N, c, aux_scale, z_scale));
    int E = c->E, k = c->k;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        int g = (int)(t / c->group_tokens);
        long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
        router_backward_token(dlogits + t * E, probs + t * E, fcount + (long)g * E, choice + t * k, dgate + t * k,
                              lse[t], E, k, S, aux_scale, z_scale);
    }
}

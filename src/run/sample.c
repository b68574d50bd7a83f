// sample.c — sampling from a model (see sample.h).
#include "run/sample.h"
#include "core/alloc.h"
#include "core/rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

// Keeps the top_k largest scores (the others -inf).
static void keep_top_k(float *p, int V, int k, float *scratch) {
    if (k <= 0 || k >= V) return;
    memcpy(scratch, p, sizeof(float) * V);
    qsort(scratch, V, sizeof(float), desc);
    float cut = scratch[k - 1];
    for (int v = 0; v < V; v++) if (p[v] < cut) p[v] = -INFINITY;
}

// p: probabilities (unnormalized, sum s). Keeps the most probable tokens until they hold
// top_p of the mass; returns the new sum.
static double keep_top_p(float *p, int V, double s, float top_p, float *scratch) {
    if (!(top_p < 1)) return s;
    memcpy(scratch, p, sizeof(float) * V);
    qsort(scratch, V, sizeof(float), desc);
    double acc = 0;
    float cut = scratch[0];
    for (int v = 0; v < V && acc < top_p * s; v++) { acc += scratch[v]; cut = scratch[v]; }
    double kept = 0;
    for (int v = 0; v < V; v++) { if (p[v] < cut) p[v] = 0; kept += p[v]; }
    return kept;
}

// The next token after ctx[0..n): drawn with the random number (seed, i).
static int next_token(Pipeline *P, const int *ctx, int n, const SampleOpts *o, int i, float *p, float *scratch) {
    Model *M = P->M;
    int T = M->T, V = M->V, start = n > T ? n - T : 0, len = n - start;
    pipe_forward(P, ctx + start, NULL, 1, len);
    const float *lg = M->full_logits + (long)(len - 1) * V;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) { p[v] = lg[v] / (o->temperature > 0 ? o->temperature : 1e-6f); if (p[v] > mx) mx = p[v]; }
    keep_top_k(p, V, o->top_k, scratch);
    double s = 0;
    for (int v = 0; v < V; v++) { p[v] = expf(p[v] - mx); s += p[v]; }
    s = keep_top_p(p, V, s, o->top_p, scratch);
    double u = rng_uniform(rng_at(o->seed, 0x73616d70ull, (uint64_t)i)) * s, acc = 0;
    for (int v = 0; v < V; v++) { acc += p[v]; if (p[v] > 0 && acc >= u) return v; }
    return V - 1;
}

long sample_text(Pipeline *P, const Tokenizer *tok, const int *prompt, int np, const SampleOpts *o, FILE *out) {
    int V = P->M->V, n = np;
    size_t stop_len = o->stop ? strlen(o->stop) : 0, cap = 4096, len = 0;
    int *ctx = ted_alloc(sizeof(int) * (np + o->ntok + 1), MEM_TEMP);
    memcpy(ctx, prompt, sizeof(int) * np);
    float *p = ted_alloc(sizeof(float) * V, MEM_TEMP), *scratch = ted_alloc(sizeof(float) * V, MEM_TEMP);
    char piece[512], *text = ted_alloc(cap, MEM_TEMP);   // the generated text, for --stop
    long made = 0;
    for (int i = 0; i < o->ntok; i++) {
        int next = next_token(P, ctx, n, o, i, p, scratch);
        ctx[n++] = next;
        made++;
        int k = tok ? tok_decode(tok, next, piece) : 1;
        if (!tok) piece[0] = (char)next;
        if (out) { fwrite(piece, 1, k, out); fflush(out); }
        if (!stop_len) continue;
        if (len + k + 1 > cap) {   // keep only the tail that can still hold the stop string
            size_t keep = stop_len < len ? stop_len : len;
            memmove(text, text + len - keep, keep);
            len = keep;
        }
        memcpy(text + len, piece, k);
        len += k;
        text[len] = 0;
        if (len >= stop_len && memmem(text, len, o->stop, stop_len)) break;
    }
    if (out) fputc('\n', out);
    ted_free(ctx); ted_free(p); ted_free(scratch); ted_free(text);
    return made;
}

int *sample_encode_prompt(const Tokenizer *tok, const char *text, int *n) {
    size_t len = strlen(text);
    if (!tok) {
        int *ids = ted_alloc(sizeof(int) * (len + 1), MEM_TEMP);
        for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
        if (!len) ids[len++] = '\n';
        *n = (int)len;
        return ids;
    }
    int *raw = NULL;
    long k = tok_encode((Tokenizer *)tok, text, len, &raw);
    int *ids = ted_alloc(sizeof(int) * (k + 1), MEM_TEMP);
    if (k > 0) memcpy(ids, raw, sizeof(int) * k);
    if (raw) ted_free(raw);
    if (k <= 0) { ids[0] = 50256; k = 1; }   // <|endoftext|> starts an empty prompt
    *n = (int)k;
    return ids;
}

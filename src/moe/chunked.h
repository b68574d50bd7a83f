// chunked.h — the expert-parallel exchange cut into n chunks along the capacity/row axis
// (moe.overlap_degree, docs/overlap.md): chunk i holds rows [n_b·i/n, n_b·(i+1)/n) of every
// block of n_b rows the exchange moves (each (expert, source) block, and with DTD each TP
// rank's share of it), so every chunk reaches every expert. Each direction is a start (pack,
// with DTD the TP reduce-scatter, then MPI_Ialltoallv) and a finish (wait, with DTD the TP
// all-gather, then unpack), so the caller computes one chunk while others travel. The expert
// side is chunk-major: chunk i's rows [r0, r0 + off[El]) are ordered like a whole exchange's
// (local expert, source, TP share), so one GEMM per local expert runs on a chunk.
#pragma once
#include "moe/dispatcher.h"

#define MAX_OVERLAP 64

typedef struct {
    Exchange *x;        // the whole exchange: counts, Rs and Rr set
    int n, d;           // chunks, row width
    int q, j;           // TP shares per row block (DTD: tp, else 1) and this rank's
    int thread;         // moe.progress_thread: a thread tests the requests while a chunk's work runs
    float *scr;         // scratch of chunked_scratch_rows(Rs, Rr)·d floats
    CommReq req[MAX_OVERLAP];
} Chunked;

// Rows of scratch the chunked exchange needs for a token side of Rs and an expert side of Rr rows.
long chunked_scratch_rows(long Rs, long Rr);
Chunked chunked_make(Exchange *x, int n, int d, float *scratch);
// Chunk i's expert-side first row; off[El+1] gets each local expert's first row inside the chunk.
long chunked_rows(const Chunked *c, int i, long *off);
// tok: the whole token side (rows by global expert); exp: the whole expert side (chunk-major).
void chunked_start_to_experts(Chunked *c, int i, const float *tok);
void chunked_finish_to_experts(Chunked *c, int i, float *exp);
// exp is read (and with DTD summed over TP) before the call returns; tok gets chunk i's rows.
void chunked_start_to_tokens(Chunked *c, int i, const float *exp);
void chunked_finish_to_tokens(Chunked *c, int i, float *tok);

// The work on chunk i's expert side: rows [r0, r0 + off[El]), each local expert's first row in off.
typedef void (*ChunkedWork)(void *ctx, long r0, const long *off);
// The whole overlapped pass: tok_in travels to the experts (exp_in), work runs per chunk and writes
// exp_out, whose rows travel back to tok_out. With DTD the TP sum of the f shards is inside the
// exchange; without it tok_out holds this TP rank's shard only and the caller sums it over TP once,
// on the token side (one meeting of the TP group per pass instead of one per chunk). While chunk i's
// work runs, chunk i+1's dispatch and chunk i−1's combine are in flight; they move through the
// sockets' buffers and the tests before and after each chunk, and with c->thread also every 0.5 ms.
void chunked_run(Chunked *c, const float *tok_in, float *exp_in, float *exp_out, float *tok_out, ChunkedWork work,
                 void *ctx);

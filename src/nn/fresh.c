// fresh.c — the fresh gradients' ranges (see fresh.h): sorted, disjoint, merged when they touch.
#include "nn/fresh.h"
#include "core/alloc.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POISON = 0x0d };   // TED_FRESH_POISON: bytes 0x0d, the float 4.4e-31 (adding anything changes it)

typedef struct { uintptr_t a, b; } Span;   // bytes [a, b)

static Span *span;
static long nspan, cap;
static int poison = -1;

static void insert(long i, Span s) {
    if (nspan == cap) {
        cap = cap ? 2 * cap : 64;
        span = ted_realloc(span, sizeof(Span) * (size_t)cap, MEM_TEMP);
    }
    memmove(span + i + 1, span + i, sizeof(Span) * (size_t)(nspan - i));
    span[i] = s;
    nspan++;
}

static void drop(long i) {
    memmove(span + i, span + i + 1, sizeof(Span) * (size_t)(nspan - i - 1));
    nspan--;
}

int fresh_poisoned(void) {
    if (poison < 0) poison = getenv("TED_FRESH_POISON") && atoi(getenv("TED_FRESH_POISON"));
    return poison;
}

void fresh_mark(float *p, long n) {
    if (!p || n <= 0) return;
    if (fresh_poisoned()) buf_fill(p, POISON, sizeof(float) * (size_t)n);
    uintptr_t a = (uintptr_t)p, b = a + sizeof(float) * (size_t)n;
    long i = 0;
    while (i < nspan && span[i].b < a) i++;
    while (i < nspan && span[i].a <= b) {   // overlapping or touching: merged
        if (span[i].a < a) a = span[i].a;
        if (span[i].b > b) b = span[i].b;
        drop(i);
    }
    insert(i, (Span){a, b});
}

// the first span that ends after a
static long first_after(uintptr_t a) {
    long i = 0;
    while (i < nspan && span[i].b <= a) i++;
    return i;
}

int fresh_whole(const float *p, long n) {
    if (!p || n <= 0) return 0;
    uintptr_t a = (uintptr_t)p, b = a + sizeof(float) * (size_t)n;
    long i = first_after(a);
    return i < nspan && span[i].a <= a && b <= span[i].b;
}

// [a, b) leaves the set; its fresh parts are zeroed when zero
static void take(uintptr_t a, uintptr_t b, int zero) {
    for (long i = first_after(a); i < nspan && span[i].a < b;) {
        Span s = span[i];
        uintptr_t lo = s.a > a ? s.a : a, hi = s.b < b ? s.b : b;
        if (zero) buf_zero((void *)lo, hi - lo);
        drop(i);
        if (s.b > hi) insert(i, (Span){hi, s.b});
        if (s.a < lo) insert(i++, (Span){s.a, lo});
        if (s.b > hi) i++;
    }
}

float fresh_beta(float *p, long n) {
    if (!p || n <= 0) return 1.0f;
    int whole = fresh_whole(p, n);
    take((uintptr_t)p, (uintptr_t)p + sizeof(float) * (size_t)n, !whole);
    return whole ? 0.0f : 1.0f;
}

void fresh_prepare(float *p, long n) {
    if (!p || n <= 0) return;
    take((uintptr_t)p, (uintptr_t)p + sizeof(float) * (size_t)n, 1);
}

// TED_FRESH_POISON: a fresh range must still hold the poison: any other byte was written by an op
// that did not ask fresh_beta / fresh_prepare first, and so added to (or read) a stale value
static void check_poison(const Span *s) {
    size_t n = s->b - s->a;
    unsigned char *h = ted_alloc(n, MEM_TEMP);
    const unsigned char *v = buf_to_host(h, (const void *)s->a, n);
    for (size_t i = 0; i < n; i++)
        if (v[i] != POISON) {
            fprintf(stderr, "ted: TED_FRESH_POISON: the fresh gradient at %p was written without nn/fresh.h "
                            "(an op accumulated into last step's values)\n", (void *)(s->a + i));
            exit(1);
        }
    ted_free(h);
}

void fresh_settle(void) {
    for (long i = 0; i < nspan; i++) {
        if (poison > 0) check_poison(&span[i]);
        buf_zero((void *)span[i].a, span[i].b - span[i].a);
    }
    nspan = 0;
}

void fresh_reset(void) {
    ted_free(span);
    span = NULL;
    nspan = cap = 0;
}

long fresh_spans(void) { return nspan; }

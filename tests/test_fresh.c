// test_fresh.c — nn/fresh.c, the fresh gradients' ranges, on host memory (buf_zero is memset on
// the CPU): a GEMM's beta is 0 only for a range wholly fresh, accumulating ops get the fresh parts
// zeroed, the rest is zeroed by settle, and touching or overlapping marks merge.
#include "core/alloc.h"
#include "nn/fresh.h"
#include "harness.h"
#include <string.h>

enum { N = 100 };
static float g[N];

static void fill(float v) { for (int i = 0; i < N; i++) g[i] = v; }
// g[i] is v for i in [a, b), and w elsewhere
static int holds(int a, int b, float v, float w) {
    for (int i = 0; i < N; i++)
        if (g[i] != (i >= a && i < b ? v : w)) return 0;
    return 1;
}

static void test_whole_overwrite(void) {
    fill(7);
    fresh_mark(g, N);
    EXPECT(fresh_spans() == 1, "one range, got %ld", fresh_spans());
    EXPECT(fresh_whole(g + 10, 20), "[10, 30) is fresh");
    EXPECT(fresh_beta(g + 10, 20) == 0.0f, "a wholly fresh GEMM output gets beta 0");
    EXPECT(holds(0, N, 7, 7), "nothing zeroed for it (the GEMM overwrites)");
    EXPECT(fresh_spans() == 2, "[0, 10) and [30, 100) left, got %ld", fresh_spans());
    EXPECT(!fresh_whole(g + 5, 10), "[5, 15) is no longer wholly fresh");
    EXPECT(fresh_beta(g + 10, 20) == 1.0f, "a written range accumulates");
    fresh_settle();
    EXPECT(holds(10, 30, 7, 0), "settle zeroes [0, 10) and [30, 100) only");
    EXPECT(fresh_spans() == 0, "nothing fresh after settle");
}

static void test_partial(void) {
    fill(7);
    fresh_mark(g + 20, 30);   // [20, 50)
    EXPECT(fresh_beta(g + 10, 20) == 1.0f, "[10, 30) is partly fresh: beta 1");
    EXPECT(holds(20, 30, 0, 7), "its fresh part [20, 30) zeroed first");
    fresh_prepare(g + 40, 5);   // an accumulating op on [40, 45)
    EXPECT(holds(20, 30, 0, 7) == 0 && g[42] == 0 && g[39] == 7 && g[45] == 7, "prepare zeroes [40, 45) only");
    EXPECT(fresh_spans() == 2, "[30, 40) and [45, 50) left, got %ld", fresh_spans());
    fresh_settle();
    for (int i = 0; i < N; i++) EXPECT(g[i] == (i >= 20 && i < 50 ? 0.0f : 7.0f), "g[%d] after settle", i);
}

static void test_merge(void) {
    fill(7);
    fresh_mark(g, 10);
    fresh_mark(g + 20, 10);
    EXPECT(fresh_spans() == 2, "two apart, got %ld", fresh_spans());
    fresh_mark(g + 10, 10);   // touches both
    EXPECT(fresh_spans() == 1 && fresh_whole(g, 30), "[0, 30) one range");
    fresh_mark(g + 25, 20);   // overlaps its end
    EXPECT(fresh_spans() == 1 && fresh_whole(g, 45), "[0, 45) one range");
    EXPECT(fresh_beta(NULL, 5) == 1.0f && fresh_beta(g, 0) == 1.0f, "nothing to write: beta 1");
    fresh_settle();
    EXPECT(holds(0, 45, 0, 7), "settle zeroes [0, 45)");
}

static void test_reset(void) {
    fill(7);
    fresh_mark(g, N);
    fresh_reset();   // the gradients went away: their range must not be zeroed later
    EXPECT(fresh_spans() == 0 && !fresh_whole(g, 1), "nothing fresh after reset");
    fresh_settle();
    EXPECT(holds(0, N, 7, 7), "settle after reset touches nothing");
}

int main(void) {
    test_whole_overwrite();
    test_reset();
    test_partial();
    test_merge();
    return test_exit("test_fresh");
}

// harness.h — what the C tests share. EXPECT checks a condition and goes on: a failure is one
// line "FAIL file:line: message" on stderr and is counted. expect_near checks a value against
// the one wanted (within rel · max(1, |want|)) and prints one "ok"/"FAIL" line either way.
// test_exit ends a test: a summary line, and the exit status (0: every check passed).
#pragma once
#include <math.h>
#include <stdio.h>

static int test_passes, test_failures;

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (cond) test_passes++;                                                                                       \
        else {                                                                                                         \
            test_failures++;                                                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

static inline int expect_near(const char *what, double got, double want, double rel) {
    int ok = fabs(got - want) <= rel * fmax(1, fabs(want));
    printf("%s %s: %g (want %g)\n", ok ? "ok  " : "FAIL", what, got, want);
    if (ok) test_passes++;
    else test_failures++;
    return ok;
}

static inline int test_exit(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_passes, test_failures);
    return test_failures != 0;
}

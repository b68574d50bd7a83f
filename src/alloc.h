// alloc.h — the one place that allocates. Every buffer has a category; current bytes per
// category, the overall peak and the peak of each phase (forward, backward, optimizer)
// are what the `mem` metrics report.
#pragma once
#include <stddef.h>

typedef enum {
    MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_COMM, MEM_TEMP, MEM_NCAT
} MemCategory;
typedef enum { PHASE_NONE, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_N } MemPhase;

// 64-byte aligned, zeroed. Exits with a clear message when memory runs out.
void *ted_alloc(size_t bytes, MemCategory cat);
void *ted_realloc(void *p, size_t bytes, MemCategory cat);  // keeps the category
void ted_free(void *p);
char *ted_strdup(const char *s);

typedef struct {
    size_t current[MEM_NCAT];
    size_t total, peak;
    size_t phase_peak[PHASE_N];
    size_t phase_cat_peak[PHASE_N][MEM_NCAT];   // per phase, the most bytes each category held
    size_t optimizer_temp_peak;   // largest MEM_TEMP bytes the optimizer step itself had alive
} MemStats;

void mem_set_phase(MemPhase p);     // starts a phase: its peak restarts from the current total
const MemStats *mem_stats(void);
void mem_reset_peaks(void);         // at the start of each step
const char *mem_category_name(MemCategory c);

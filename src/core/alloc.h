// alloc.h — the one place that allocates. Every buffer has a category; current bytes per
// category, the overall peak and the peak of each phase (forward, backward, optimizer)
// are what the `mem` metrics report.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {   // the CUDA sources allocate through here too
#endif

typedef enum {
    MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_COMM, MEM_TEMP,
    MEM_MIRROR,   // GPU runs: host copies of device parameters and optimizer state (checkpoints)
    MEM_NCAT
} MemCategory;

// Where the run's buffers live: the host (default) or the GPU (`--device cuda`). Set once,
// before anything is allocated, by device_select.
typedef enum { DEV_CPU, DEV_CUDA } Device;
extern Device ted_device;
// Selects the device of the run ("cpu" or "cuda"); cuda starts the GPU of this local rank.
// Returns 0, or -1 after one line (unknown name; built without CUDA; no GPU).
int device_select(const char *name, int local_rank, int bf16);
typedef enum { PHASE_NONE, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_N } MemPhase;

// 64-byte aligned, zeroed. Exits with a clear message when memory runs out.
void *ted_alloc(size_t bytes, MemCategory cat);
void *ted_realloc(void *p, size_t bytes, MemCategory cat);  // keeps the category
void ted_free(void *p);
char *ted_strdup(const char *s);
// This node's physical memory in bytes (0 when unknown): the bound on what one process can hold.
double mem_physical_bytes(void);

typedef struct {
    size_t current[MEM_NCAT];
    size_t total, peak;
    size_t phase_peak[PHASE_N];
    size_t phase_cat_peak[PHASE_N][MEM_NCAT];   // per phase, the most bytes each category held
    size_t optimizer_temp_peak;   // largest MEM_TEMP bytes the optimizer step itself had alive
    size_t device, device_peak;   // bytes of GPU memory held (a subset of total)
} MemStats;

// Run buffers: on the run's device (GPU memory under --device cuda, else the same as ted_alloc).
// Counted in their category like host memory, and in `device` / `device_peak` when on the GPU.
// Planned once: nothing calls these per step.
void *ted_alloc_buf(size_t bytes, MemCategory cat);
// GPU memory whatever the run's device (CUDA builds): the backend's own small scratch buffers.
void *ted_alloc_dev(size_t bytes, MemCategory cat);
void ted_free_buf(void *p);
// Moves bytes between any two buffers (host or device); a device-to-device copy does not wait.
void buf_copy(void *dst, const void *src, size_t bytes);
void buf_zero(void *p, size_t bytes);
void buf_fill(void *p, int byte, size_t bytes);   // every byte set to `byte` (tests' poison)
// Waits for the device's queued work (timing); nothing on the CPU.
void buf_sync(void);
// Host view of a run buffer: p itself on the CPU; on the GPU a copy in `host` (bytes long).
const void *buf_to_host(void *host, const void *p, size_t bytes);

void mem_set_phase(MemPhase p);     // starts a phase: its peak restarts from the current total
const MemStats *mem_stats(void);
void mem_reset_peaks(void);         // at the start of each step
const char *mem_category_name(MemCategory c);
#ifdef __cplusplus
}
#endif

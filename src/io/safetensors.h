// safetensors.h — reading and writing the safetensors format (8-byte little-endian
// header length, JSON header {name: {dtype, shape, data_offsets}}, raw data), fp32 only.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[4];
    const float *data;   // writing: the caller's data (contiguous, row-major)
} StTensor;

// Writes n tensors to path (exactly that path; the caller handles atomic renames).
// Returns 0 or -1 after printing one line naming the file and the problem.
int st_write(const char *path, const StTensor *tensors, int n);

typedef struct StFile StFile;
// Opens and validates a file: header length in bounds, JSON parses, every entry has
// dtype F32, a shape, offsets inside the file and consistent with the shape.
// Returns NULL after printing one line naming the file and the problem.
StFile *st_open(const char *path);
// Looks up a tensor: returns its data (owned by the StFile) and fills ndim/shape,
// or NULL when absent. The tensor counts as read (st_read).
const float *st_get(StFile *f, const char *name, int *ndim, int64_t shape[4]);
int st_count(const StFile *f);
const char *st_name(const StFile *f, int i);
// Whether tensor i (header order, as st_name) was looked up by st_get.
int st_read(const StFile *f, int i);
void st_close(StFile *f);

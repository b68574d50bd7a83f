// util.h — what nearly every file needs: error handling (error.h), time (clock.h) and
// whole-file reads.
#pragma once
#include <stdint.h>
#include "core/clock.h"
#include "core/error.h"

// Reads a whole file (malloc'd through the counted allocator, category "temp", NUL appended).
// Returns NULL (errno set) when it cannot be read.
char *read_file(const char *path, size_t *len);

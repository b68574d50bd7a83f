// util.h — what nearly every file needs: error handling (error.h), time (clock.h) and
// whole-file reads.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "core/clock.h"
#include "core/error.h"

// Reads a whole file (malloc'd through the counted allocator, category "temp", NUL appended).
// Returns NULL (errno set) when it cannot be read; ENOMEM when it is larger than this node's memory.
char *read_file(const char *path, size_t *len);
// After writing to f: when a write or the flush failed (a full disk), one line naming path (NULL:
// the file f has open) and the error, and the run ends on every rank, exit 1.
void write_check(FILE *f, const char *path);

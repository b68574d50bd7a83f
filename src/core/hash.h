// hash.h — FNV-1a 64: the digest of the ranks' agreement and the checksum of files ted writes
// without a format of their own (1-bit Adam's errors).
#pragma once
#include <stddef.h>
#include <stdint.h>

// FNV-1a 64 of n bytes, continuing from h (0: a fresh digest).
uint64_t hash_fnv1a(const void *p, size_t n, uint64_t h);
